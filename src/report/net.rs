//! `sf net`: RDMA work requests per rank and queue pair, from the `qp_window`, `qp_stuck`
//! and `qp_degraded` records the collector writes (docs/network.md "RDMA work requests"): totals,
//! bandwidth, latency, stuck and degraded evidence, and each QP's time series.

use crate::analysis::net::peers::{self, Judgement, Work};
use crate::analysis::net::ports::{self, PortCounterSummary};
use crate::core::log::format::Region;
use crate::core::log::reader::{RankLog, Record};
use crate::core::log::records::{QpDegraded, QpStuck, QpWindow, RecordBody};
use crate::core::log::records_net::WrSource;
use crate::core::net::proxy_progress::ProxyLink;
use serde::Serialize;

use super::ls::FileError;
use super::Failure;
use crate::report::discover;
use crate::report::discover::Dirs;
use crate::report::parallel;
use crate::report::read_budget;
use crate::report::wall::{rfc3339_ms, WallClock};

/// The `--json` object; the field names docs/ lists are a contract.
#[derive(Debug, Serialize)]
pub struct NetReport {
    pub dir: String,
    /// Any QP has a `qp_stuck` record (sf net exits 3).
    pub stuck: bool,
    /// A QP is degraded: slower than its own start (a `qp_degraded` record) and slower
    /// than its peers for a sustained time (sf net exits 4 when nothing is stuck).
    pub degraded: bool,
    /// QPs with stuck evidence first, then degraded, as "rank R qp 0xN".
    pub summary: Summary,
    pub ranks: Vec<RankNet>,
    pub errors: Vec<FileError>,
    /// When the QP series start after the job did: the latest first window (UTC) among
    /// the ranks whose event ring wrapped past older windows; null when none wrapped.
    pub series_start: Option<String>,
    /// Ranks whose event ring wrapped: their older QP windows are gone.
    pub wrapped_ranks: Vec<i32>,
    /// The newest event records read of each rank (`SF_READ_BUDGET` shared by the ranks;
    /// every record held up to 512 ranks of default logs).
    pub records_read_per_rank: u64,
    /// Ranks whose older records were held but not read, within that budget.
    pub unread_ranks: Vec<i32>,
}

#[derive(Debug, Default, Serialize)]
pub struct Summary {
    pub ranks: usize,
    pub qps: usize,
    pub stuck_qps: Vec<QpRef>,
    /// Degraded QPs: slower than their peers too, for a sustained time.
    pub degraded_qps: Vec<QpRef>,
    /// QPs with `qp_degraded` records that are not degraded links: only slower than their
    /// own start (a loaded host, no peer to compare with, or not for long).
    pub slower_than_start_qps: Vec<QpRef>,
    /// Ranks whose log holds no work-request record (no RDMA door, or NCCL never used one).
    pub ranks_without_work_requests: Vec<i32>,
}

#[derive(Debug, Clone, Serialize)]
pub struct QpRef {
    pub rank: i32,
    pub source: &'static str,
    pub device: i32,
    pub qp_num: u32,
    /// Source `proxy`: the link the key names (null for a real QP).
    pub link: Option<LinkReport>,
}

/// A link of proxy-step traffic (source `proxy`: NCCL without NET_PROFILER), which the
/// key's `device` and `qp_num` encode.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct LinkReport {
    pub channel: u8,
    /// `send` or `recv`.
    pub direction: &'static str,
    /// The peer's rank in the communicator.
    pub peer: u32,
    /// 14 bits of NCCL's communicator hash, telling the rank's communicators apart.
    pub comm_tag: u16,
}

impl LinkReport {
    pub fn of(source: WrSource, device: i32, qp_num: u32) -> Option<LinkReport> {
        ProxyLink::of(source, device, qp_num).map(|l| LinkReport {
            channel: l.channel,
            direction: if l.is_send { "send" } else { "recv" },
            peer: l.peer,
            comm_tag: l.comm_tag,
        })
    }
}

#[derive(Debug, Serialize)]
pub struct RankNet {
    pub rank: i32,
    pub host: String,
    /// Turns the log's monotonic times into UTC for people.
    #[serde(skip)]
    pub clock: WallClock,
    pub file: String,
    pub qps: Vec<QpReport>,
    /// RDMA port counters from sysfs (docs/network.md "RDMA port counters").
    pub ports: Vec<PortCounterSummary>,
    /// Records of the event ring overwritten before this read: older windows are gone.
    #[serde(skip)]
    pub lost_to_wrap: u64,
    /// Records the event ring still held, older than the newest this read took
    /// (`read_budget`): their windows are not in the series.
    #[serde(skip)]
    pub not_read: u64,
}

#[derive(Debug, Serialize)]
pub struct QpReport {
    pub source: &'static str,
    pub device: i32,
    pub qp_num: u32,
    pub link: Option<LinkReport>,
    /// False when it completed work requests and none carried a size (NCCL's receive-side
    /// QP events have no length): its bandwidth is unknown, and `window_bps` and
    /// `baseline_bps` are 0 for unknown, not a rate of 0.
    pub bandwidth_known: bool,
    /// From the newest sample: cumulative counts.
    pub posted: u64,
    pub completed: u64,
    pub in_flight: u32,
    pub errors: u32,
    pub bytes_posted: u64,
    pub bytes_completed: u64,
    /// Over every sample's completions with a known post time.
    pub latency_mean_ns: u64,
    pub latency_max_ns: u64,
    /// The newest sample's window bandwidth and the QP's baseline (0: not known).
    pub window_bps: u64,
    pub baseline_bps: u64,
    /// The extremes of the window bandwidth over the samples that had one.
    pub max_window_bps: u64,
    pub min_window_bps: u64,
    pub last_sample_ns: u64,
    pub table_dropped: u32,
    pub stuck: Vec<StuckEvidence>,
    /// `qp_degraded` records: slower than its own start. `peer_check` says whether that
    /// makes it a degraded link.
    pub degraded: Vec<DegradedEvidence>,
    pub peer_check: Option<PeerCheck>,
    pub series: Vec<Sample>,
}

/// The QP's `qp_degraded` evidence against its peers (`analysis::net::peers`).
#[derive(Debug, Serialize)]
pub struct PeerCheck {
    /// `degraded` or `slower_than_start`.
    pub verdict: &'static str,
    /// The QP's window bandwidth over the episode, and its peers' over the same time.
    pub own_bps: u64,
    pub peers_bps: Option<u64>,
    /// Peer QPs compared: the job's other QPs doing the same work (same door; for proxy
    /// links, same communicator, channel and direction).
    pub peers: usize,
    /// How long it stayed slower than its peers (degraded only), seconds.
    pub sustained_s: Option<f64>,
    /// Why it is not degraded (slower_than_start only).
    pub why: Option<&'static str>,
}

#[derive(Debug, Serialize)]
pub struct StuckEvidence {
    pub t_ns: u64,
    pub since_ns: u64,
    /// Age of the oldest request in flight when the collector saw it.
    pub age_s: f64,
    pub timeout_s: f64,
    pub in_flight: u32,
    pub posted: u64,
    pub completed: u64,
    /// A later sample shows completions past it: the QP moved again.
    pub resolved: bool,
}

#[derive(Debug, Serialize)]
pub struct DegradedEvidence {
    pub t_ns: u64,
    pub window_bps: u64,
    pub baseline_bps: u64,
    pub threshold: f64,
    pub windows: u16,
    pub completed: u64,
}

#[derive(Debug, Serialize)]
pub struct Sample {
    pub t_ns: u64,
    pub posted: u64,
    pub completed: u64,
    pub in_flight: u32,
    pub bytes_completed: u64,
    pub window_bps: u64,
    pub latency_mean_ns: u64,
    pub latency_max_ns: u64,
    pub stuck: bool,
    pub degraded: bool,
}

type QpId = (WrSource, i32, u32);

pub fn build(dir: &Dirs) -> Result<NetReport, Failure> {
    let files = discover::job_log_paths(dir, "net").map_err(Failure::Message)?;
    let mut report = NetReport {
        dir: dir.display().to_string(),
        stuck: false,
        degraded: false,
        summary: Summary::default(),
        ranks: Vec::new(),
        errors: Vec::new(),
        series_start: None,
        wrapped_ranks: Vec::new(),
        records_read_per_rank: read_budget::RECORDS.per_log(read_budget::RECORDS.total()?, files.len()),
        unread_ranks: Vec::new(),
    };
    let keep = report.records_read_per_rank;
    let read = parallel::read_all(&files, |file| RankLog::open(file).map(|log| rank_net(&log, keep)));
    for (file, read) in files.iter().zip(read) {
        match read {
            Ok(rank) => report.ranks.push(rank),
            Err(e) => report.errors.push(FileError { file: file.display().to_string(), error: e.to_string() }),
        }
    }
    report.ranks.sort_by_key(|r| (r.rank < 0, r.rank, r.file.clone()));
    report.wrapped_ranks = report.ranks.iter().filter(|r| r.lost_to_wrap > 0).map(|r| r.rank).collect();
    report.unread_ranks = report.ranks.iter().filter(|r| r.not_read > 0).map(|r| r.rank).collect();
    let wrapped = report.ranks.iter().filter(|r| r.lost_to_wrap > 0 || r.not_read > 0);
    let first_windows = wrapped.filter_map(|r| {
        let first = r.qps.iter().filter_map(|q| q.series.first()).map(|s| s.t_ns).min()?;
        r.clock.wall_ns(first)
    });
    report.series_start = first_windows.max().map(rfc3339_ms);
    check_peers(&mut report.ranks);
    let s = &mut report.summary;
    s.ranks = report.ranks.len();
    for r in &report.ranks {
        if r.qps.is_empty() {
            s.ranks_without_work_requests.push(r.rank);
        }
        for q in &r.qps {
            s.qps += 1;
            let at = || QpRef { rank: r.rank, source: q.source, device: q.device, qp_num: q.qp_num, link: q.link };
            if !q.stuck.is_empty() {
                s.stuck_qps.push(at());
            }
            match &q.peer_check {
                Some(c) if c.verdict == "degraded" => s.degraded_qps.push(at()),
                Some(_) => s.slower_than_start_qps.push(at()),
                None => {}
            }
        }
    }
    report.stuck = !s.stuck_qps.is_empty();
    report.degraded = !s.degraded_qps.is_empty();
    Ok(report)
}

/// Judges every QP with `qp_degraded` evidence against its peers.
fn check_peers(ranks: &mut [RankNet]) {
    let samples: Vec<Vec<peers::Sample>> = ranks
        .iter()
        .flat_map(|r| &r.qps)
        .map(|q| {
            q.series
                .iter()
                .map(|s| peers::Sample { t_ns: s.t_ns, window_bps: s.window_bps, degraded: s.degraded })
                .collect()
        })
        .collect();
    let episodes: Vec<Vec<peers::Episode>> = ranks
        .iter()
        .flat_map(|r| &r.qps)
        .map(|q| {
            q.degraded
                .iter()
                .map(|d| peers::Episode { t_ns: d.t_ns, window_bps: d.window_bps, threshold: d.threshold })
                .collect()
        })
        .collect();
    let work = |q: &QpReport| match q.link {
        Some(l) => Work::Link { comm_tag: l.comm_tag, channel: l.channel, send: l.direction == "send" },
        None => Work::Door(q.source),
    };
    let qps: Vec<peers::Qp> = ranks
        .iter()
        .flat_map(|r| r.qps.iter().map(move |q| (r.host.as_str(), work(q))))
        .zip(samples.iter().zip(&episodes))
        .map(|((host, work), (samples, episodes))| peers::Qp { host, work, samples, episodes })
        .collect();
    let checks: Vec<Option<PeerCheck>> = (0..qps.len())
        .map(|i| {
            peers::judge(&qps, i).map(|j| match j {
                Judgement::Degraded { own_bps, peers_bps, peers, sustained_ns } => PeerCheck {
                    verdict: "degraded",
                    own_bps,
                    peers_bps: Some(peers_bps),
                    peers,
                    sustained_s: Some(sustained_ns as f64 / 1e9),
                    why: None,
                },
                Judgement::SlowerThanStart { own_bps, peers_bps, peers, why } => PeerCheck {
                    verdict: "slower_than_start",
                    own_bps,
                    peers_bps,
                    peers,
                    sustained_s: None,
                    why: Some(why),
                },
            })
        })
        .collect();
    for (q, check) in ranks.iter_mut().flat_map(|r| r.qps.iter_mut()).zip(checks) {
        q.peer_check = check;
    }
}

/// What one log says of its QPs and ports: the history ring whole (stuck and degraded
/// evidence, names), and the newest `keep` records of the event ring (QP windows).
fn rank_net(log: &RankLog, keep: u64) -> RankNet {
    // Streamed: only the records this command reads are kept, never the NCCL calls.
    let mut port_records: Vec<RecordBody> = Vec::new();
    let mut windows: Vec<QpWindow> = Vec::new();
    let mut stucks: Vec<QpStuck> = Vec::new();
    let mut degradeds: Vec<QpDegraded> = Vec::new();
    let mut take = |record: Record| match record.body {
        RecordBody::QpWindow(w) => windows.push(w),
        RecordBody::QpStuck(s) => stucks.push(s),
        RecordBody::QpDegraded(d) => degradeds.push(d),
        body @ (RecordBody::PortCounterName(_) | RecordBody::PortCounters(_) | RecordBody::VerbsDevice(_)) => {
            port_records.push(body)
        }
        _ => {}
    };
    // The history ring first, as a whole scan reads it: port counter names come before
    // the values that refer to them. A format 1 log has one ring, scanned once below.
    if log.header.history_slot_count > 0 {
        log.scan_region(Region::History, &mut take);
    }
    let events = log.scan_newest(Region::Events, keep, &mut take);
    let ports = ports::summarize(&port_records);
    let mut ids: Vec<QpId> = windows
        .iter()
        .map(|w| (w.source, w.device, w.qp_num))
        .chain(stucks.iter().map(|s| (s.source, s.device, s.qp_num)))
        .chain(degradeds.iter().map(|d| (d.source, d.device, d.qp_num)))
        .collect();
    ids.sort_by_key(|&(source, device, qp_num)| (source as u8, device, qp_num));
    ids.dedup();
    let qps = ids
        .into_iter()
        .map(|id| {
            let is = |source: WrSource, device: i32, qp_num: u32| (source, device, qp_num) == id;
            let series: Vec<&QpWindow> = windows.iter().filter(|w| is(w.source, w.device, w.qp_num)).collect();
            let stuck = stucks.iter().filter(|s| is(s.source, s.device, s.qp_num)).map(|s| StuckEvidence {
                t_ns: s.t_ns,
                since_ns: s.since_ns,
                age_s: s.t_ns.saturating_sub(s.since_ns) as f64 / 1e9,
                timeout_s: s.timeout_ns as f64 / 1e9,
                in_flight: s.in_flight,
                posted: s.posted,
                completed: s.completed,
                resolved: series.iter().any(|w| w.t_ns > s.t_ns && w.completed > s.completed),
            });
            let degraded = degradeds.iter().filter(|d| is(d.source, d.device, d.qp_num)).map(|d| DegradedEvidence {
                t_ns: d.t_ns,
                window_bps: d.window_bps,
                baseline_bps: d.baseline_bps,
                threshold: d.threshold,
                windows: d.windows,
                completed: d.completed,
            });
            qp_report(id, &series, stuck.collect(), degraded.collect())
        })
        .collect();
    RankNet {
        rank: log.header.global_rank,
        host: log.header.host.clone(),
        clock: WallClock::of(&log.header),
        file: log.path().display().to_string(),
        qps,
        ports,
        // The event ring's own loss: the history ring (stuck and degraded evidence) keeps more.
        lost_to_wrap: events.lost_to_wrap,
        not_read: events.not_read,
    }
}

fn qp_report(
    (source, device, qp_num): QpId,
    series: &[&QpWindow],
    stuck: Vec<StuckEvidence>,
    degraded: Vec<DegradedEvidence>,
) -> QpReport {
    let last = series.last();
    let latency_n: u64 = series.iter().map(|w| w.latency_n as u64).sum();
    let latency_sum: u128 = series.iter().map(|w| w.latency_mean_ns as u128 * w.latency_n as u128).sum();
    let rates = || series.iter().map(|w| w.window_bps).filter(|&b| b > 0);
    QpReport {
        source: source.name(),
        device,
        qp_num,
        link: LinkReport::of(source, device, qp_num),
        bandwidth_known: last.is_none_or(|w| w.completed == 0 || w.bytes_completed > 0),
        posted: last.map_or(0, |w| w.posted),
        completed: last.map_or(0, |w| w.completed),
        in_flight: last.map_or(0, |w| w.in_flight),
        errors: last.map_or(0, |w| w.errors),
        bytes_posted: last.map_or(0, |w| w.bytes_posted),
        bytes_completed: last.map_or(0, |w| w.bytes_completed),
        latency_mean_ns: latency_sum.checked_div(latency_n as u128).unwrap_or(0) as u64,
        latency_max_ns: series.iter().map(|w| w.latency_max_ns).max().unwrap_or(0),
        window_bps: last.map_or(0, |w| w.window_bps),
        baseline_bps: series.iter().rev().map(|w| w.baseline_bps).find(|&b| b > 0).unwrap_or(0),
        max_window_bps: rates().max().unwrap_or(0),
        min_window_bps: rates().min().unwrap_or(0),
        last_sample_ns: last.map_or(0, |w| w.t_ns),
        table_dropped: last.map_or(0, |w| w.table_dropped),
        stuck,
        degraded,
        peer_check: None,
        series: series
            .iter()
            .map(|w| Sample {
                t_ns: w.t_ns,
                posted: w.posted,
                completed: w.completed,
                in_flight: w.in_flight,
                bytes_completed: w.bytes_completed,
                window_bps: w.window_bps,
                latency_mean_ns: w.latency_mean_ns,
                latency_max_ns: w.latency_max_ns,
                stuck: w.stuck,
                degraded: w.degraded,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::log::records::QpDegraded;
    use crate::report::test_logs::new_log;

    const SEC: u64 = 1_000_000_000;

    /// One proxy link's samples: `bps` each second, from the first to the sixth; the
    /// episode, when there is one, opens in the third second and stays open.
    fn link_records(link: ProxyLink, bps: &[u64; 6], episode: bool) -> Vec<RecordBody> {
        let key = link.key();
        let mut records = Vec::new();
        for (k, &b) in bps.iter().enumerate() {
            let t_ns = (k as u64 + 1) * SEC;
            let degraded = episode && k >= 2;
            if episode && k == 2 {
                records.push(RecordBody::QpDegraded(QpDegraded {
                    t_ns: t_ns - 1,
                    source: key.source,
                    device: key.device,
                    qp_num: key.qp_num,
                    window_bps: b,
                    baseline_bps: 100_000,
                    threshold: 0.2,
                    window_n: 16,
                    windows: 3,
                    posted: 0,
                    completed: 0,
                }));
            }
            records.push(RecordBody::QpWindow(QpWindow {
                t_ns,
                source: key.source,
                device: key.device,
                qp_num: key.qp_num,
                posted: k as u64 * 10,
                completed: k as u64 * 10,
                in_flight: 0,
                errors: 0,
                bytes_posted: k as u64 * 1000,
                bytes_completed: k as u64 * 1000,
                latency_n: 0,
                latency_mean_ns: 0,
                latency_max_ns: 0,
                window_bps: b,
                window_n: 16,
                baseline_bps: 100_000,
                stuck: false,
                degraded,
                table_dropped: 0,
            }));
        }
        records
    }

    /// The fake's rings: channel 0 moves less than half of what channel 1 moves, on every
    /// link. A channel-0 send that slowed from its own start is as fast as the other
    /// channel-0 sends: no degraded link (it was judged against the channel-1 sends).
    #[test]
    fn a_link_is_compared_only_with_links_doing_the_same_work() {
        let (path, mut writer) = new_log("net-same-work", 1024);
        let comm = 0x1234_5678_9abc_def0;
        let links = [
            (ProxyLink::new(comm, 0, true, 1), [100_000, 100_000, 40_000, 40_000, 40_000, 40_000], true),
            (ProxyLink::new(comm, 0, true, 3), [40_000; 6], false),
            (ProxyLink::new(comm, 1, true, 1), [100_000; 6], false),
            (ProxyLink::new(comm, 1, true, 3), [100_000; 6], false),
        ];
        for (link, bps, episode) in links {
            for record in link_records(link, &bps, episode) {
                writer.append(&record);
            }
        }
        let report = build(&Dirs::one(path.parent().unwrap())).unwrap();
        let q = report.ranks[0].qps.iter().find(|q| !q.degraded.is_empty()).unwrap();
        let check = q.peer_check.as_ref().unwrap();
        assert_eq!((check.verdict, check.peers, check.peers_bps), ("slower_than_start", 1, Some(40_000)));
        assert!(!report.degraded);
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}
