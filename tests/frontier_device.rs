//! `sf frontier --csv` with the optional device columns: the forward_* labels through the
//! whole command, and none of them without device evidence.

mod common;

use std::process::Command;

use common::*;
use serde_json::Value;

/// 4 ranks x 10 steps of (data, forward, backward); rank 2's forward takes 0.15 s of CPU
/// wall with `device` s of kernels, the others (0.02, 0.03, 0.16) with 0.025 s, waiting for
/// rank 2 in backward. `with_device` false leaves the device columns out.
fn csv(device: f64, with_device: bool) -> String {
    let mut text = String::from("step,rank,stage,seconds");
    text += if with_device { ",device_seconds,spill_seconds\n" } else { "\n" };
    for step in 0..10 {
        for rank in 0..4 {
            let (row, fwd) = if rank == 2 { ([0.02, 0.15, 0.04], device) } else { ([0.02, 0.03, 0.16], 0.025) };
            for ((stage, seconds), kernels) in
                ["data", "model.fwd_loss_cpu_wall", "backward"].iter().zip(row).zip([0.0, fwd, 0.03])
            {
                text += &format!("{step},{rank},{stage},{seconds}");
                text += &if with_device { format!(",{kernels},0\n") } else { "\n".to_string() };
            }
        }
    }
    text
}

fn frontier(dir: &TempDir, name: &str, text: &str) -> Value {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    let out = run_ok(Command::new(artifact("sf")).args(["frontier", "--json", "--csv"]).arg(&path));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn forward_labels(report: &Value) -> Vec<String> {
    let labels = report["windows"][0]["labels"].as_array().unwrap();
    labels.iter().map(|l| l["label"].as_str().unwrap().to_string()).filter(|l| l.starts_with("forward_")).collect()
}

#[test]
fn device_time_supports_or_questions_a_forward_frontier() {
    let dir = TempDir::new("frontier-device");
    let supported = frontier(&dir, "supported.csv", &csv(0.14, true));
    assert_eq!(forward_labels(&supported), ["forward_device_supported"], "{supported}");
    let device = &supported["windows"][0]["forward_device"];
    assert_eq!(
        (&device["stage"], &device["samples"], &device["ready_ratio"]),
        (&"model.fwd_loss_cpu_wall".into(), &40.into(), &1.0.into())
    );
    assert!((device["device_s"].as_f64().unwrap() - 2.15).abs() < 1e-9, "{device}");

    let host = frontier(&dir, "host.csv", &csv(0.01, true));
    assert_eq!(forward_labels(&host), ["forward_host_overhead_suspected"], "{host}");

    let none = frontier(&dir, "none.csv", &csv(0.01, false));
    assert!(forward_labels(&none).is_empty(), "{none}");
    assert_eq!(none["windows"][0]["forward_device"], Value::Null);
}
