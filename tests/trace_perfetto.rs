//! `sf trace` against an independent decoder: Python's `jsonschema` checks every event
//! against a schema of the Chrome trace-event format (the "JSON Object Format" that
//! Perfetto and chrome://tracing read: the phases, the fields each requires, their
//! types), and plain Python checks what a schema cannot: every flow arrow starts once and
//! finishes once, in time order, and binds to a call slice on its track; slices on a track
//! nest. A 64-rank, 1000-step job's trace must stay under 100 MB.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use stagefrontier::core::log::synth::SynthJob;

/// The schema and the checks a schema cannot express; reads the trace path from argv[1]
/// and prints one JSON summary line.
const CHECK: &str = r#"
import bisect, json, sys, collections
import jsonschema

ids = {"type": "integer", "minimum": 0}
time = {"type": "number", "minimum": 0}
text = {"type": "string", "minLength": 1}
event = {
    "type": "object",
    "required": ["ph", "pid"],
    "properties": {"ph": {"enum": ["X", "M", "C", "s", "t", "f"]}, "pid": ids, "tid": ids},
    "allOf": [
        {"if": {"properties": {"ph": {"const": "X"}}},
         "then": {"required": ["tid", "ts", "dur", "name"],
                  "properties": {"ts": time, "dur": time, "name": text, "args": {"type": "object"}}}},
        {"if": {"properties": {"ph": {"const": "M"}}},
         "then": {"required": ["name", "args"],
                  "properties": {"name": {"enum": ["process_name", "process_labels", "process_sort_index",
                                                   "thread_name", "thread_sort_index"]},
                                 "args": {"type": "object", "minProperties": 1}}}},
        {"if": {"properties": {"ph": {"const": "C"}}},
         "then": {"required": ["ts", "name", "args"],
                  "properties": {"ts": time, "name": text,
                                 "args": {"type": "object", "additionalProperties": {"type": "number"}}}}},
        {"if": {"properties": {"ph": {"enum": ["s", "t", "f"]}}},
         "then": {"required": ["tid", "ts", "id", "cat", "name"],
                  "properties": {"ts": time, "id": {"type": ["string", "integer"]}, "cat": text, "name": text,
                                 "bp": {"const": "e"}}}},
    ],
}
schema = {"type": "object", "required": ["traceEvents"],
          "properties": {"traceEvents": {"type": "array", "items": event},
                         "displayTimeUnit": {"enum": ["ms", "ns"]}}}

trace = json.load(open(sys.argv[1]))
# Every event against the schema, or every STRIDE-th of a big trace (jsonschema is slow).
stride = int(sys.argv[2])
jsonschema.validate(dict(trace, traceEvents=trace["traceEvents"][::stride]), schema)
events = trace["traceEvents"]

named = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
slices = collections.defaultdict(list)
for e in events:
    if e["ph"] == "X":
        assert e["pid"] in named, f"slice of an unnamed process: {e}"
        slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e))
for track, spans in slices.items():
    spans.sort(key=lambda s: (s[0], -s[1]))
    open_ends = []
    for begin, end, e in spans:
        # Times are microseconds with nanosecond decimals: compare within a nanosecond.
        while open_ends and open_ends[-1] <= begin + 1e-3:
            open_ends.pop()
        assert not open_ends or end <= open_ends[-1] + 1e-3, f"slices overlap without nesting on {track}: {e}"
        open_ends.append(end)

flows = collections.defaultdict(list)
for e in events:
    if e["ph"] in "stf":
        flows[e["id"]].append(e)
starts = {track: [s[0] for s in spans] for track, spans in slices.items()}
calls = 0
for fid, chain in flows.items():
    phases = sorted(chain, key=lambda e: e["ts"])
    assert [e["ph"] for e in chain].count("s") == 1 and [e["ph"] for e in chain].count("f") == 1, chain
    assert phases[0]["ph"] == "s" and phases[-1]["ph"] == "f", f"flow {fid} out of time order"
    assert len({e["pid"] for e in chain}) == len(chain), f"flow {fid} visits a rank twice"
    for e in chain:
        # The call slice that starts last at or before the event must enclose it.
        track = (e["pid"], e["tid"])
        i = bisect.bisect_right(starts.get(track, []), e["ts"]) - 1
        assert i >= 0, f"unbound flow event {e}"
        b, end, s = slices[track][i]
        assert b <= e["ts"] <= end and "seq" in s.get("args", {}), f"unbound flow event {e}"
        calls += 1
hosts = [named[p].split(" rank ")[0] for p in sorted(named, key=lambda p: next(
    e["args"]["sort_index"] for e in events if e["ph"] == "M" and e["name"] == "process_sort_index" and e["pid"] == p))]
assert hosts == sorted(hosts), "processes grouped by host"
call_args = next(s["args"] for (p, t), spans in slices.items() if tracks[(p, t)].startswith("nccl") for _, _, s in spans)
print(json.dumps({"events": len(events), "ranks": len(named), "flows": len(flows), "flow_events": calls,
                  "steps": sum(1 for e in events if e["ph"] == "X" and e["name"].startswith("step ")),
                  "tracks": sorted(set(tracks.values()))[:4], "call_args": call_args}))
"#;

fn python_with_jsonschema() -> bool {
    Command::new("python3").args(["-c", "import jsonschema"]).status().is_ok_and(|s| s.success())
}

/// The decoder's summary of the trace at `path`, every `stride`-th event schema-checked.
fn check(path: &Path, stride: u32) -> serde_json::Value {
    let out =
        Command::new("python3").args(["-c", CHECK]).arg(path).arg(stride.to_string()).output().expect("run python3");
    assert!(out.status.success(), "the decoder refused the trace:\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON line")
}

fn job(ranks: u32, steps: u64) -> SynthJob {
    SynthJob {
        job_id: "trace".into(),
        world: ranks,
        ranks_per_host: 8,
        steps,
        calls_per_step: 5,
        slot_count: 8192,
        slow_rank: Some(3),
        stall_us: 20_000,
    }
}

fn sf_trace(args: &[&str]) -> std::process::Output {
    Command::new(artifact("sf")).arg("trace").args(args).output().expect("spawn sf")
}

#[test]
fn a_small_trace_decodes_with_flows_across_ranks_and_cuts_by_steps_and_ranks() {
    if !python_with_jsonschema() {
        return skip("a_small_trace_decodes...", "python3 with jsonschema is missing (scripts/install-deps)");
    }
    let dir = TempDir::new("trace-small");
    job(16, 30).write(&dir.join("job"), 0..16).unwrap();
    let out_file = dir.join("job.json");
    let out = sf_trace(&[dir.join("job").to_str().unwrap(), "-o", out_file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary = check(&out_file, 1);
    assert_eq!(summary["ranks"], 16, "{summary}");
    assert_eq!(summary["steps"], 16 * 30, "{summary}");
    assert_eq!(summary["flows"], 30 * 5, "one flow per collective: {summary}");
    assert_eq!(summary["flow_events"], 16 * 30 * 5, "every rank's call is on its collective's arrow: {summary}");
    assert_eq!(summary["call_args"]["bytes"], 4 << 20, "{summary}");
    assert!(summary["call_args"]["seq"].as_u64().is_some(), "{summary}");
    assert!(summary["tracks"].as_array().unwrap().contains(&"nccl 0x5eed000000000001".into()), "{summary}");

    let cut = dir.join("cut.json");
    let out = sf_trace(&[
        dir.join("job").to_str().unwrap(),
        "-o",
        cut.to_str().unwrap(),
        "--steps",
        "10-14",
        "--ranks",
        "0-3,9",
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let written: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json prints one JSON object");
    assert_eq!((written["ranks"].as_u64(), written["collectives"].as_u64()), (Some(5), Some(25)), "{written}");
    assert_eq!(written["bytes"].as_u64(), Some(std::fs::metadata(&cut).unwrap().len()), "{written}");
    let summary = check(&cut, 1);
    assert_eq!((summary["ranks"].as_u64(), summary["steps"].as_u64()), (Some(5), Some(25)), "{summary}");
    assert_eq!(summary["flows"], 5 * 5, "{summary}");

    let none = sf_trace(&[dir.join("job").to_str().unwrap(), "-o", cut.to_str().unwrap(), "--ranks", "99"]);
    assert_eq!(none.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&none.stderr).contains("--ranks"));
}

#[test]
fn a_64_rank_1000_step_trace_stays_under_100_mb() {
    if !python_with_jsonschema() {
        return skip("a_64_rank_1000_step_trace...", "python3 with jsonschema is missing (scripts/install-deps)");
    }
    let dir = TempDir::new("trace-64");
    job(64, 1000).write(&dir.join("job"), 0..64).unwrap();
    let out_file = dir.join("job.json");
    let out = sf_trace(&[dir.join("job").to_str().unwrap(), "-o", out_file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let bytes = std::fs::metadata(&out_file).unwrap().len();
    assert!(bytes < 100_000_000, "{bytes} bytes");
    let summary = check(&out_file, 97);
    assert_eq!((summary["ranks"].as_u64(), summary["steps"].as_u64()), (Some(64), Some(64_000)), "{summary}");
    eprintln!("64 ranks x 1000 steps x 5 collectives: {:.1} MB, {summary}", bytes as f64 / 1e6);
}

#[test]
fn a_hung_job_is_traced_with_its_unfinished_step_and_the_call_it_is_stuck_in() {
    let _serial = one_at_a_time();
    let root = log_root("trace-hung");
    // #12 is an allreduce of step 2 (a broadcast, then 4 allreduces and an allgather per step).
    let _job = start_sim(&root, 2, "data=2,fwd=2,bwd=4,callbacks=1,optim=1", Some("hang:rank=1,op=allreduce,seq=12"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    // Rank 0 entered #12 and waits in it for rank 1, which never enters.
    loop {
        let waiting = rank_logs(&root, "job")
            .first()
            .and_then(|p| stagefrontier::core::log::reader::RankLog::open(p).ok())
            .is_some_and(|log| log.comms().iter().any(|c| c.inflight.is_some() && c.coll_entered == 12));
        if waiting {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "rank 0 never waited in allreduce #12");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let dir = root.join("job");
    let file = root.join("hung.json");
    let out = sf_trace(&[dir.to_str().unwrap(), "-o", file.to_str().unwrap(), "--steps", "2"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let trace: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().expect("a trace-event array");
    let named = |name: &str, pid: u64| events.iter().find(|e| e["name"] == name && e["pid"] == pid).cloned();
    let stuck = named("allreduce (in flight)", 0).unwrap_or_else(|| panic!("rank 0's hung call is drawn: {trace}"));
    assert_eq!(stuck["args"]["seq"], 12, "{stuck}");
    // Microseconds: 300 ms of waiting, less a heartbeat period or two.
    assert!(stuck["dur"].as_f64().unwrap() >= 200_000.0, "it lasts to the last heartbeat: {stuck}");
    assert!(named("allreduce (in flight)", 1).is_none(), "rank 1 never entered it");
    for rank in [0, 1] {
        assert!(named("step 2 (unfinished)", rank).is_some(), "rank {rank}'s last step is drawn: {trace}");
    }
    if python_with_jsonschema() {
        check(&file, 1);
    }
    let far = sf_trace(&[dir.to_str().unwrap(), "-o", file.to_str().unwrap(), "--steps", "500-600"]);
    assert_eq!(far.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&far.stderr);
    assert!(
        stderr.contains("steps 500-600 are not in the logs, which hold steps 0-1 and step 2 unfinished"),
        "{stderr}"
    );
}
