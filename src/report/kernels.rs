//! `sf kernels`: ARGUS L3 over the kernel summaries every rank log holds (docs/kernels.md "sf
//! kernels"). Per kernel name and rank, the clusters of all windows make one log-normal
//! mixture; ranks of one role are compared by pairwise W1 distance and an IQR fence on
//! each rank's mean distance names the anomalous ones. Beside it: per-rank NCCL kernel
//! statistics, stream busy time and what the summaries lost.

use std::collections::BTreeMap;

use crate::analysis::kernels::cross_rank::{compare_kernels, L3Params};
use crate::analysis::kernels::mixture::Z_99;
use crate::core::kernels::kde::Cluster;
use crate::core::kernels::kernel_activity::{is_nccl_kernel, readable_kernel_name};
use crate::core::log::reader::RankLog;
use crate::core::log::records::RecordBody;
use serde::Serialize;

use super::ls::FileError;
use super::slow::GroupBy;
use super::Failure;
use crate::report::discover;
use crate::report::discover::Dirs;
use crate::report::observer::Progress;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KernelsOptions {
    /// Which ranks are compared with each other (`sf slow`'s groups).
    pub group_by: GroupBy,
    /// The IQR fence coefficient (ARGUS's α).
    pub iqr_k: f64,
    /// Put each comparison's W1 matrix into the report.
    pub matrix: bool,
}

/// The parser admits only finite, non-negative `iqr_k`, for which `==` is an equivalence.
impl Eq for KernelsOptions {}

/// The `--json` object; the field names docs/ lists are a contract.
#[derive(Debug, Serialize)]
pub struct KernelsReport {
    pub dir: String,
    /// `job`, `local_rank` or `host`, as `sf slow`'s `group_by`.
    pub group_by: &'static str,
    /// The same as `group_by`, under its older name.
    pub role_by: &'static str,
    pub iqr_k: f64,
    /// Any rank log held kernel records.
    pub kernel_records: bool,
    /// Kernel names compared in at least one role group of 4 or more ranks.
    pub kernels_compared: usize,
    pub anomalies: Vec<Anomaly>,
    /// Every kernel compared, per role group, anomalous or not.
    pub comparisons: Vec<Comparison>,
    pub ranks: Vec<RankKernels>,
    pub errors: Vec<FileError>,
}

#[derive(Debug, Serialize)]
pub struct Anomaly {
    pub kernel: String,
    pub rank: i32,
    /// The role group's key: "all", or the local rank.
    pub group: String,
    /// The rank's mean W1 distance to the other ranks of its group, in ns.
    pub score_ns: f64,
    pub upper_fence_ns: f64,
    /// The least score that can be flagged (5% of the group's typical duration).
    pub floor_ns: f64,
    /// How far the score is past the fence, in ns.
    pub past_fence_ns: f64,
    /// This rank's and the group's median p50 of the kernel, in ns.
    pub rank_p50_ns: f64,
    pub group_p50_ns: f64,
}

/// One kernel's comparison among the ranks of one group.
#[derive(Debug, Serialize)]
pub struct Comparison {
    pub kernel: String,
    pub group: String,
    /// The ranks compared, ascending; `scores_ns` and the matrix's rows follow this order.
    pub ranks: Vec<u32>,
    /// Each rank's mean W1 distance to the others, in ns.
    pub scores_ns: Vec<f64>,
    pub upper_fence_ns: f64,
    pub floor_ns: f64,
    /// The W1 quadrature's error bound, in ns: scores this close to the fence are a toss-up.
    pub error_bound_ns: f64,
    pub anomalous: Vec<u32>,
    /// The pairwise W1 distances in ns, with `--matrix` only (null otherwise).
    pub w1_ns: Option<Vec<Vec<f64>>>,
}

#[derive(Debug, Serialize)]
pub struct RankKernels {
    pub rank: i32,
    pub local_rank: i32,
    pub host: String,
    pub file: String,
    pub kernel_names: usize,
    pub windows: usize,
    pub launches: u64,
    pub nccl: NcclStats,
    pub streams: Vec<StreamStats>,
    /// Summed over the windows' stream_busy records (docs/kernels.md "Kernel summaries").
    pub late: u64,
    pub truncated_clusters: u64,
    pub truncated_nccl: u64,
    pub untracked: u64,
}

#[derive(Debug, Default, Serialize)]
pub struct NcclStats {
    pub kernels: u64,
    pub total_ns: u64,
    pub mean_ns: u64,
    pub max_ns: u64,
}

#[derive(Debug, Serialize)]
pub struct StreamStats {
    pub device: u8,
    pub stream: u32,
    pub busy_ns: u64,
    pub windows: usize,
    /// busy_ns over the windows' total length.
    pub utilization: f64,
}

/// One rank's clusters per kernel name, all windows together.
struct RankInput {
    rank: i32,
    local_rank: i32,
    host: String,
    clusters: BTreeMap<String, Vec<Cluster>>,
}

pub fn build(dir: &Dirs, options: &KernelsOptions) -> Result<KernelsReport, Failure> {
    let files = discover::job_log_paths(dir, "kernels").map_err(Failure::Message)?;
    let mut report = KernelsReport {
        dir: dir.display().to_string(),
        group_by: options.group_by.name(),
        role_by: options.group_by.name(),
        iqr_k: options.iqr_k,
        kernel_records: false,
        kernels_compared: 0,
        anomalies: Vec::new(),
        comparisons: Vec::new(),
        ranks: Vec::new(),
        errors: Vec::new(),
    };
    let mut inputs = Vec::new();
    let progress = Progress::new(files.len());
    for (i, file) in files.iter().enumerate() {
        match RankLog::open(file) {
            Ok(log) => {
                let (stats, input) = read_rank(&log);
                report.kernel_records |= stats.windows > 0 || stats.kernel_names > 0;
                report.ranks.push(stats);
                inputs.push(input);
            }
            Err(e) => report.errors.push(FileError { file: file.display().to_string(), error: e.to_string() }),
        }
        progress.done(i + 1);
    }
    drop(progress);
    report.ranks.sort_by_key(|r| (r.rank < 0, r.rank, r.file.clone()));

    let mut groups: BTreeMap<String, Vec<&RankInput>> = BTreeMap::new();
    for input in &inputs {
        groups.entry(options.group_by.group_of(input.local_rank, &input.host)).or_default().push(input);
    }
    let mut params = L3Params::default();
    params.fence.alpha = options.iqr_k;
    let mut compared = std::collections::BTreeSet::new();
    for (group, members) in &groups {
        let mut per_kernel: BTreeMap<&str, Vec<(u32, Vec<Cluster>)>> = BTreeMap::new();
        for m in members {
            // An NCCL kernel lasts until its slowest peer arrives: its duration is mostly the
            // wait sf frontier and sf slow read as such, not the rank's own speed, so a rank
            // that waits longer than its peers is no anomaly of its own.
            for (name, clusters) in m.clusters.iter().filter(|(name, _)| !is_nccl_kernel(name)) {
                per_kernel.entry(name).or_default().push((m.rank.max(0) as u32, clusters.clone()));
            }
        }
        compared.extend(per_kernel.iter().filter(|(_, rows)| rows.len() >= 4).map(|(k, _)| k.to_string()));
        for finding in compare_kernels(&per_kernel, &params) {
            let n = finding.ranks.len();
            report.comparisons.push(Comparison {
                kernel: finding.kernel.to_string(),
                group: group.clone(),
                ranks: finding.ranks.clone(),
                scores_ns: finding.verdict.scores.iter().map(|s| s.score).collect(),
                upper_fence_ns: finding.verdict.upper_fence,
                floor_ns: finding.verdict.floor,
                error_bound_ns: finding.error_bound(),
                anomalous: finding.verdict.anomalous.clone(),
                w1_ns: options
                    .matrix
                    .then(|| (0..n).map(|i| (0..n).map(|j| finding.matrix.get(i, j)).collect()).collect()),
            });
            let rows = &per_kernel[finding.kernel];
            let mut p50s: Vec<f64> = rows.iter().map(|(_, c)| weighted_p50(c)).collect();
            p50s.sort_by(f64::total_cmp);
            let group_p50 = p50s[p50s.len() / 2];
            for &rank in &finding.verdict.anomalous {
                let score = finding.verdict.scores.iter().find(|s| s.rank == rank).map_or(0.0, |s| s.score);
                let rank_p50 = rows.iter().find(|(r, _)| *r == rank).map_or(0.0, |(_, c)| weighted_p50(c));
                report.anomalies.push(Anomaly {
                    kernel: finding.kernel.to_string(),
                    rank: rank as i32,
                    group: group.clone(),
                    score_ns: score,
                    upper_fence_ns: finding.verdict.upper_fence,
                    floor_ns: finding.verdict.floor,
                    past_fence_ns: score - finding.verdict.upper_fence,
                    rank_p50_ns: rank_p50,
                    group_p50_ns: group_p50,
                });
            }
        }
    }
    report.kernels_compared = compared.len();
    report.anomalies.sort_by(|a, b| b.past_fence_ns.total_cmp(&a.past_fence_ns));
    Ok(report)
}

/// The p50 of the cluster holding the median launch: a readable "typical duration".
fn weighted_p50(clusters: &[Cluster]) -> f64 {
    let total: u64 = clusters.iter().map(|c| c.count).sum();
    let mut seen = 0;
    for c in clusters {
        seen += c.count;
        if 2 * seen >= total {
            return c.p50;
        }
    }
    0.0
}

fn read_rank(log: &RankLog) -> (RankKernels, RankInput) {
    let header = &log.header;
    let (records, _) = log.records();
    let mut names: BTreeMap<u16, String> = BTreeMap::new();
    for r in &records {
        if let RecordBody::KernelName(n) = &r.body {
            names.insert(n.name_id.min(0x0fff) as u16, readable_kernel_name(&n.name()).to_string());
        }
    }
    let mut stats = RankKernels {
        rank: header.global_rank,
        local_rank: header.local_rank,
        host: header.host.clone(),
        file: log.path().display().to_string(),
        kernel_names: names.len(),
        windows: 0,
        launches: 0,
        nccl: NcclStats::default(),
        streams: Vec::new(),
        late: 0,
        truncated_clusters: 0,
        truncated_nccl: 0,
        untracked: 0,
    };
    let mut input = RankInput {
        rank: header.global_rank,
        local_rank: header.local_rank,
        host: header.host.clone(),
        clusters: BTreeMap::new(),
    };
    let mut streams: BTreeMap<(u8, u32), (u64, usize, u64)> = BTreeMap::new();
    for r in &records {
        match &r.body {
            RecordBody::KernelCluster(c) => {
                for e in c.entries() {
                    let name = names.get(&e.name_id).cloned().unwrap_or_else(|| format!("kernel#{}", e.name_id));
                    let (p50, p99) = (e.p50_ns(), e.p99_ns().max(e.p50_ns()));
                    stats.launches += e.launches as u64;
                    input.clusters.entry(name).or_default().push(Cluster {
                        count: e.launches as u64,
                        p50,
                        p99,
                        log_mean: p50.ln(),
                        log_sd: (p99.ln() - p50.ln()) / Z_99,
                    });
                }
            }
            RecordBody::NcclKernels(n) => {
                for &(_, d) in n.pairs() {
                    stats.nccl.kernels += 1;
                    stats.nccl.total_ns += d as u64;
                    stats.nccl.max_ns = stats.nccl.max_ns.max(d as u64);
                }
            }
            RecordBody::StreamBusy(b) => {
                if b.part == 0 {
                    stats.windows += 1;
                    stats.late += b.late as u64;
                    stats.truncated_clusters += b.truncated_clusters as u64;
                    stats.truncated_nccl += b.truncated_nccl as u64;
                    stats.untracked += b.untracked as u64;
                }
                for e in b.entries() {
                    let s = streams.entry((e.device, e.stream)).or_default();
                    s.0 += e.busy_ns as u64;
                    s.1 += 1;
                    s.2 += b.window_ms as u64 * 1_000_000;
                }
            }
            _ => {}
        }
    }
    stats.nccl.mean_ns = stats.nccl.total_ns.checked_div(stats.nccl.kernels).unwrap_or(0);
    stats.streams = streams
        .into_iter()
        .map(|((device, stream), (busy_ns, windows, span_ns))| StreamStats {
            device,
            stream,
            busy_ns,
            windows,
            utilization: if span_ns == 0 { 0.0 } else { busy_ns as f64 / span_ns as f64 },
        })
        .collect();
    (stats, input)
}
