//! The sysfs RDMA port-counter sampler in a real job: sf-trainer-sim under the library with
//! SF_IB_SYSFS_ROOT pointing at a fake /sys/class/infiniband tree that the test changes
//! while the job runs: one counter grows, one disappears, one is a directory (unreadable
//! even as root), the rest stay quiet.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use stagefrontier::core::log::records::{CounterState, PortCounterName, RecordBody};

fn set(root: &Path, rel: &str, value: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, value).unwrap();
}

const GROWING: &str = "mlx5_0/ports/1/counters/port_xmit_data";
const VANISHING: &str = "mlx5_0/ports/1/hw_counters/rnr_nak_retry_err";

#[test]
fn changes_are_recorded_and_quiet_counters_cost_nothing() {
    let tree = TempDir::new("ib-tree");
    set(&tree.0, GROWING, "1000\n");
    set(&tree.0, "mlx5_0/ports/1/counters/port_rcv_data", "555\n");
    set(&tree.0, "mlx5_0/ports/1/counters/symbol_error/inside", "0\n");
    set(&tree.0, VANISHING, "3\n");
    set(&tree.0, "mlx5_1/ports/1/counters/port_rcv_data", "42\n");
    set(&tree.0, "mlx5_1/ports/2/counters/link_downed", "0\n");

    let root = log_root("ports");
    let mut cmd = preloaded(&trainer_sim(), &root, "ports");
    cmd.args(["--ranks", "2", "--steps", "60", "--stage-ms", "data=5,fwd=5,bwd=5,callbacks=0,optim=0"]);
    cmd.env("SF_IB_SYSFS_ROOT", &tree.0).env("SF_IB_SAMPLE_MS", "20");
    let mut child = cmd.stdout(std::process::Stdio::null()).spawn().expect("spawn sf-trainer-sim");

    // The growing counter goes up by 250 every 30 ms; the vanishing one goes 100 ms (five
    // sample periods) after both ranks' logs exist, so it was sampled before it went.
    let start = Instant::now();
    let mut logs_seen: Option<Instant> = None;
    let mut value = 1000;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(Duration::from_millis(30));
        value += 250;
        set(&tree.0, GROWING, &format!("{value}\n"));
        if logs_seen.is_none() && rank_logs(&root, "ports").len() == 2 {
            logs_seen = Some(Instant::now());
        }
        if logs_seen.is_some_and(|t| t.elapsed() > Duration::from_millis(100)) {
            let _ = std::fs::remove_file(tree.join(VANISHING));
        }
    };
    assert!(status.success(), "sf-trainer-sim failed: {status}");
    assert!(start.elapsed() > Duration::from_millis(400), "the job must outlive several samples");
    assert!(!tree.join(VANISHING).exists(), "the job ended before the counter could vanish");

    let logs = rank_logs(&root, "ports");
    assert_eq!(logs.len(), 2);
    for log in logs {
        let bodies = bodies(&log);
        let mut names: BTreeMap<u16, Vec<PortCounterName>> = BTreeMap::new();
        let mut values: BTreeMap<u16, Vec<(u64, u64)>> = BTreeMap::new();
        for body in &bodies {
            match body {
                RecordBody::PortCounterName(n) => names.entry(n.name_id).or_default().push(*n),
                RecordBody::PortCounters(p) => {
                    assert_eq!(p.over_cap, 0);
                    for v in p.values() {
                        values.entry(v.name_id).or_default().push((v.value, v.delta));
                    }
                }
                _ => {}
            }
        }
        let id = |device: &str, port: u16, counter: &str| {
            let found = names.iter().find(|(_, n)| {
                n[0].device.to_string_lossy() == device
                    && n[0].port == port
                    && n[0].counter.to_string_lossy() == counter
            });
            *found.unwrap_or_else(|| panic!("{device}/{port}/{counter} not named in {}: {names:?}", log.display())).0
        };
        assert_eq!(names.len(), 6, "every counter file is named: {names:?}");

        let growing = &values[&id("mlx5_0", 1, "port_xmit_data")];
        assert!(growing.len() >= 3, "the growing counter was sampled as it grew: {growing:?}");
        assert_eq!(growing[0].1, 0, "the first sample is a baseline");
        assert!(growing.windows(2).all(|w| w[1].0 > w[0].0 && w[1].1 == w[1].0 - w[0].0), "{growing:?}");

        for (device, port, counter) in
            [("mlx5_0", 1, "port_rcv_data"), ("mlx5_1", 1, "port_rcv_data"), ("mlx5_1", 2, "link_downed")]
        {
            let quiet = &values[&id(device, port, counter)];
            assert_eq!(quiet.len(), 1, "{device}/{port}/{counter} is written once, in the first sample: {quiet:?}");
        }
        assert_eq!(values[&id("mlx5_1", 1, "port_rcv_data")], [(42, 0)]);

        let states = |id: u16| names[&id].iter().map(|n| n.state).collect::<Vec<_>>();
        assert_eq!(states(id("mlx5_0", 1, "rnr_nak_retry_err")), [CounterState::Present, CounterState::Gone]);
        assert!(names[&id("mlx5_0", 1, "rnr_nak_retry_err")][0].hw);
        assert_eq!(states(id("mlx5_0", 1, "symbol_error")), [CounterState::Unreadable]);
        assert!(!values.contains_key(&id("mlx5_0", 1, "symbol_error")));
    }

    // sf net summarises the same records per rank: first/last/delta, and bytes for data words.
    let out = run_ok(std::process::Command::new(artifact("sf")).arg("net").arg(root.join("ports")).arg("--json"));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("sf net --json");
    for rank in report["ranks"].as_array().unwrap() {
        let ports = rank["ports"].as_array().unwrap();
        assert_eq!(ports.len(), 6, "{ports:?}");
        let find = |counter: &str| ports.iter().find(|p| p["counter"] == counter && p["device"] == "mlx5_0").unwrap();
        let xmit = find("port_xmit_data");
        let (first, last, delta) =
            (xmit["first"].as_u64().unwrap(), xmit["last"].as_u64().unwrap(), xmit["delta"].as_u64().unwrap());
        assert!(first >= 1000 && last > first && delta == last - first, "{xmit}");
        let (rate, bytes) = (xmit["rate_per_s"].as_f64().unwrap(), xmit["bytes_per_s"].as_f64().unwrap());
        assert!(rate > 0.0 && (bytes - 4.0 * rate).abs() < 1e-6, "{xmit}");
        assert_eq!(find("rnr_nak_retry_err")["state"], "gone");
        assert_eq!(find("symbol_error")["state"], "unreadable");
        assert_eq!(find("port_rcv_data")["bytes_per_s"], 0.0, "a quiet data counter moves 0 bytes/s");
    }
    let human = run_ok(std::process::Command::new(artifact("sf")).arg("net").arg(root.join("ports")));
    let human = String::from_utf8_lossy(&human.stdout);
    assert!(human.contains("port counters: 12 sampled, 6 moved or changed state"), "{human}");
}

#[test]
fn zero_period_turns_the_sampler_off() {
    let tree = TempDir::new("ib-off");
    set(&tree.0, GROWING, "1\n");
    let root = log_root("ports-off");
    let mut cmd = preloaded(&trainer_sim(), &root, "off");
    cmd.args(trainer_args(1, 5)).env("SF_IB_SYSFS_ROOT", &tree.0).env("SF_IB_SAMPLE_MS", "0");
    run_ok(&mut cmd);
    let logs = rank_logs(&root, "off");
    assert_eq!(logs.len(), 1);
    let sampled = bodies(&logs[0])
        .iter()
        .filter(|b| matches!(b, RecordBody::PortCounterName(_) | RecordBody::PortCounters(_)))
        .count();
    assert_eq!(sampled, 0);
}
