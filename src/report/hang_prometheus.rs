//! `sf hang --prometheus URL --job ID`: the hang report from the metrics every node's
//! `sf exporter` gave a Prometheus server, for a job that spans many nodes while it is
//! wedged, without copying a log.
//!
//! The metrics carry each rank's liveness, heartbeat age and communicator table (last
//! entered and returned sequence numbers, the call in flight and its age), which is what
//! `sf hang`'s analysis decides on; they carry no call history, so the threshold is the
//! one the exporters computed from the logs (`sf_hang_threshold_seconds`), and the report
//! has no cadence, injections or stage. Every age is as of each target's last scrape.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::analysis::hang::device::{DeviceView, Unfinished};
use crate::analysis::hang::kernel_ch::KernelChView;
use crate::analysis::hang::{self, RankInput, Settings};
use crate::analysis::log::liveness::Liveness;
use crate::core::log::kernel_ch::KernelChKey;
use crate::core::log::nccl_op::NcclOp;
use crate::core::log::reader::{CommLive, InFlight};
use crate::core::log::records::NcclCall;
use crate::core::net::profiler::func_code;
use serde_json::Value;

use super::hang::HangOptions;
use super::hang::{report, Extra, HangReport};
use super::Failure;
use crate::report::discover::Dirs;

/// A Prometheus answer larger than this is not one for a job's metrics.
const RESPONSE_MAX_BYTES: u64 = 256 << 20;
const TIMEOUT: Duration = Duration::from_secs(30);
/// The made-up monotonic now the ages are laid out before: far from 0 so no age underflows.
const NOW_NS: u64 = 1 << 62;

pub fn build(url: &str, job: &str, options: &HangOptions) -> Result<HangReport, Failure> {
    let server = Server::parse(url)?;
    let sel = format!("{{job_id=\"{}\"}}", job.replace('\\', "\\\\").replace('"', "\\\""));
    let info = server.query(&format!("sf_rank_info{sel}"))?;
    if info.is_empty() {
        return Err(Failure::Message(format!(
            "{url}: no sf_rank_info{sel}: no exporter reported job {job} (is sf exporter scraped, and the job id right? \
             label_values(sf_rank_info, job_id) lists the jobs)"
        )));
    }
    let liveness = server.query(&format!("sf_rank_liveness{sel} == 1"))?;
    let ages = server.query(&format!("sf_heartbeat_age_seconds{sel}"))?;
    let threshold = server.query(&format!("max(sf_hang_threshold_seconds{sel})"))?;
    let mut counters = BTreeMap::new();
    for name in ["coll_entered", "coll_returned", "p2p_entered", "p2p_returned"] {
        counters.insert(name, server.query(&format!("sf_nccl_{name}_seq{sel}"))?);
    }
    let inflight = server.query(&format!("sf_nccl_inflight_age_seconds{sel}"))?;
    let last_return = server.query(&format!("sf_nccl_last_return_age_seconds{sel}"))?;

    let rank_of = |v: &Value| v["metric"]["rank"].as_str().and_then(|r| r.parse::<i32>().ok());
    let mut ranks: BTreeMap<i32, (RankInput, Extra)> = BTreeMap::new();
    for v in &info {
        let Some(rank) = rank_of(v) else { continue };
        let m = &v["metric"];
        let live = liveness
            .iter()
            .find(|l| rank_of(l) == Some(rank))
            .and_then(|l| l["metric"]["sf_rank_liveness"].as_str())
            .map_or(Liveness::Live, liveness_of);
        let age_ns = ages.iter().find(|a| rank_of(a) == Some(rank)).map(|a| (value(a) * 1e9) as u64);
        let heartbeat = NOW_NS - age_ns.unwrap_or(0);
        let input = RankInput {
            rank,
            liveness: live,
            now_ns: Some(NOW_NS),
            heartbeat_age_ns: age_ns,
            heartbeat_mono_ns: heartbeat,
            drained_ns: heartbeat,
            comms: Vec::new(),
            created: Vec::new(),
            calls: Vec::new(),
            history_complete: true,
            records_stale: false,
            newest_drop_ns: None,
            stage: None,
            stuck_qps: Vec::new(),
        };
        let extra = Extra::from_metrics(
            m["host"].as_str().unwrap_or_default(),
            m["pid"].as_str().and_then(|p| p.parse().ok()).unwrap_or(0),
            format!("{}/{}", m["instance"].as_str().unwrap_or_default(), rank),
            live,
            age_ns,
        );
        ranks.insert(rank, (input, extra));
    }
    // The communicator tables.
    let mut tables: BTreeMap<(i32, u64), CommLive> = BTreeMap::new();
    for (name, series) in &counters {
        for v in series {
            let (Some(rank), Some(comm)) = (rank_of(v), comm_of(v)) else { continue };
            let m = &v["metric"];
            let row = tables.entry((rank, comm)).or_insert_with(|| CommLive {
                comm_id: comm,
                rank: m["comm_rank"].as_str().and_then(|r| r.parse().ok()).unwrap_or(-1),
                nranks: m["nranks"].as_str().and_then(|r| r.parse().ok()).unwrap_or(-1),
                coll_entered: 0,
                coll_returned: 0,
                p2p_entered: 0,
                p2p_returned: 0,
                inflight: None,
            });
            let n = value(v) as u64;
            match *name {
                "coll_entered" => row.coll_entered = n,
                "coll_returned" => row.coll_returned = n,
                "p2p_entered" => row.p2p_entered = n,
                _ => row.p2p_returned = n,
            }
        }
    }
    for v in &inflight {
        let (Some(rank), Some(comm)) = (rank_of(v), comm_of(v)) else { continue };
        if let Some(row) = tables.get_mut(&(rank, comm)) {
            let op = v["metric"]["op"].as_str().and_then(|name| NcclOp::ALL.into_iter().find(|o| o.name() == name));
            row.inflight = Some(InFlight { op, since_mono_ns: NOW_NS - (value(v) * 1e9) as u64 });
        }
    }
    for ((rank, comm), row) in tables {
        let Some((input, _)) = ranks.get_mut(&rank) else { continue };
        // The newest returned calls stand for the history the metrics do not carry: the
        // analysis sees the rank's last progress on each communicator, and when.
        let age = last_return.iter().find(|v| rank_of(v) == Some(rank) && comm_of(v) == Some(comm)).map(value);
        if let Some(age) = age {
            let t = NOW_NS - (age * 1e9) as u64;
            let call = |op, seq| NcclCall {
                op,
                t_enter_ns: t,
                t_exit_ns: t,
                comm_id: comm,
                seq,
                count: 0,
                bytes: 0,
                stream: 0,
                tid: 0,
                peer: -1,
                dtype: -1,
                redop: -1,
                result: 0,
                group_depth: 0,
            };
            if row.coll_returned > 0 {
                input.calls.push(call(NcclOp::AllReduce, row.coll_returned));
            }
            if row.p2p_returned > 0 {
                input.calls.push(call(NcclOp::Send, row.p2p_returned));
            }
        }
        input.comms.push(row);
    }
    // The devices' unfinished work: a stall the host counts cannot show.
    let oldest = server.query(&format!("sf_device_oldest_unfinished_seconds{sel}"))?;
    let syncs = server.query(&format!("sf_device_host_sync_seconds{sel}"))?;
    let unchanged = server.query(&format!("sf_device_unchanged_seconds{sel}"))?;
    for (input, extra) in ranks.values_mut() {
        let rank = Some(input.rank);
        let of_rank = |series: &[Value]| series.iter().find(|s| rank_of(s) == rank).map(value);
        let (sync, unchanged) = (of_rank(&syncs), of_rank(&unchanged));
        // A rank without the metric shows nothing unfinished: the devices name no culprit
        // in a collective it is part of.
        let oldest = oldest.iter().find(|v| rank_of(v) == rank).map(|v| {
            let text = |key: &str| v["metric"][key].as_str().filter(|t| !t.is_empty()).map(str::to_string);
            let op = text("op").and_then(|name| NcclOp::ALL.into_iter().find(|o| o.name() == name));
            let seq = text("seq").and_then(|seq| seq.parse().ok());
            let collective = match (comm_of(v), op, seq) {
                (Some(comm), Some(op), Some(seq)) => Some((comm, seq, op)),
                _ => None,
            };
            Unfinished {
                kernel: text("kernel"),
                stage: text("stage"),
                t_launch_ns: NOW_NS - (value(v) * 1e9) as u64,
                collective,
            }
        });
        extra.set_device(DeviceView {
            rank: input.rank,
            now_ns: Some(NOW_NS),
            oldest,
            changed_ns: unchanged.map_or(0, |u| NOW_NS - (u * 1e9) as u64),
            sync_since_ns: sync.map_or(0, |s| NOW_NS - (s * 1e9) as u64),
            launched: input.comms.iter().map(|c| (c.comm_id, c.coll_entered)).collect(),
            launched_p2p: input.comms.iter().map(|c| (c.comm_id, c.p2p_entered)).collect(),
            comm_ranks: input.comms.iter().map(|c| (c.comm_id, c.rank)).collect(),
            // The metrics carry no send/recv peer: no chain through a pipeline's exchanges.
            oldest_peer: None,
            // The metrics do not carry it: the exporters' threshold stands alone.
            evidence_lag_ns: 0,
            // The exporters judged their ranks' evidence; the metrics show what they found.
            complete_ns: None,
        });
    }
    // What NCCL's profiler told each rank's profiler door: a stall the CUDA door missed.
    let started = server.query(&format!("sf_device_kernel_ch_started_seconds{sel}"))?;
    let stopped = server.query(&format!("sf_device_kernel_ch_stopped_seq{sel}"))?;
    for (input, extra) in ranks.values_mut() {
        let rank = Some(input.rank);
        let key = |v: &Value, seq: u64| {
            let m = &v["metric"];
            let tag = m["comm_tag"].as_str()?.parse().ok()?;
            let func = func_code(m["func"].as_str()?.as_bytes());
            // The folded tag as the metric carries it, the function kept as the words keep it.
            Some(KernelChKey { comm_tag: tag, ..KernelChKey::new(0, func, seq) })
        };
        let started = started.iter().find(|v| rank_of(v) == rank).and_then(|v| {
            let seq = v["metric"]["seq"].as_str()?.parse().ok()?;
            Some((key(v, seq)?, NOW_NS - (value(v) * 1e9) as u64))
        });
        let stopped = stopped.iter().find(|v| rank_of(v) == rank).and_then(|v| key(v, value(v) as u64));
        extra.set_kernel_ch(KernelChView { rank: input.rank, now_ns: Some(NOW_NS), started, stopped });
    }
    let threshold_s = threshold.first().map_or(options.fallback_stuck_s, value);
    let settings = Settings {
        factor: options.factor,
        min_stuck_ns: (options.min_stuck_s.max(threshold_s) * 1e9) as u64,
        fallback_stuck_ns: (threshold_s * 1e9) as u64,
    };
    let (inputs, extras): (Vec<RankInput>, Vec<Extra>) = ranks.into_values().unzip();
    let diagnosis = hang::diagnose(&inputs, &settings);
    let mut report = report(&Dirs::new(vec![format!("{url} job {job}").into()]), NOW_NS, diagnosis, extras, Vec::new());
    report.source = "prometheus";
    // The exporters' threshold, unless the --min-stuck-s floor is above it.
    if !threshold.is_empty() && threshold_s >= options.min_stuck_s {
        report.threshold.source = "exporters";
    }
    Ok(report)
}

fn comm_of(v: &Value) -> Option<u64> {
    u64::from_str_radix(v["metric"]["comm"].as_str()?.trim_start_matches("0x"), 16).ok()
}

fn value(v: &Value) -> f64 {
    v["value"][1].as_str().and_then(|s| s.parse().ok()).unwrap_or(0.0)
}

fn liveness_of(name: &str) -> Liveness {
    match name {
        "exited" => Liveness::Exited,
        "disabled" => Liveness::Disabled,
        "dead" => Liveness::Dead,
        "stalled" => Liveness::Stalled,
        _ => Liveness::Live,
    }
}

/// A Prometheus server reached over plain HTTP.
struct Server {
    host: String,
    port: u16,
    base: String,
}

impl Server {
    fn parse(url: &str) -> Result<Server, Failure> {
        let bad = |why: &str| Failure::Message(format!("--prometheus {url}: {why}; e.g. http://127.0.0.1:9090"));
        let rest = url.strip_prefix("http://").ok_or_else(|| bad("only http:// URLs"))?;
        let (authority, base) = rest.split_once('/').map_or((rest, ""), |(a, b)| (a, b));
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (h, p.parse().map_err(|_| bad("the port is not a number"))?),
            None => (authority, 80),
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        Ok(Server { host: host.to_string(), port, base: base.trim_end_matches('/').to_string() })
    }

    /// An instant query's result vector.
    fn query(&self, promql: &str) -> Result<Vec<Value>, Failure> {
        let fail = |why: String| Failure::Message(format!("prometheus at {}:{}: {why}", self.host, self.port));
        let encoded: String = promql
            .bytes()
            .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
            .collect();
        let prefix = if self.base.is_empty() { String::new() } else { format!("/{}", self.base) };
        let mut stream = TcpStream::connect((self.host.as_str(), self.port)).map_err(|e| fail(e.to_string()))?;
        stream.set_read_timeout(Some(TIMEOUT)).map_err(|e| fail(e.to_string()))?;
        write!(stream, "GET {prefix}/api/v1/query?query={encoded} HTTP/1.0\r\nHost: {}\r\n\r\n", self.host)
            .map_err(|e| fail(e.to_string()))?;
        let mut response = Vec::new();
        stream.take(RESPONSE_MAX_BYTES).read_to_end(&mut response).map_err(|e| fail(e.to_string()))?;
        let text = String::from_utf8_lossy(&response);
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let answer: Value = serde_json::from_str(body)
            .map_err(|_| fail(format!("not a Prometheus API answer: {}", text.lines().next().unwrap_or_default())))?;
        if answer["status"] != "success" {
            return Err(fail(format!("{} for {promql}", answer["error"].as_str().unwrap_or("query failed"))));
        }
        Ok(answer["data"]["result"].as_array().cloned().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let s = Server::parse("http://prom.example:9090/").ok().unwrap();
        assert_eq!((s.host.as_str(), s.port, s.base.as_str()), ("prom.example", 9090, ""));
        let s = Server::parse("http://10.0.0.1/prometheus").ok().unwrap();
        assert_eq!((s.port, s.base.as_str()), (80, "prometheus"));
        assert!(Server::parse("https://x:1").is_err());
        assert!(Server::parse("http://:9090").is_err());
    }
}
