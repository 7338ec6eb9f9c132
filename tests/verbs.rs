//! The libibverbs fallback door (SF_VERBS=1) on a real process: tests/c/verbs_app.c uses
//! fakeverbs (a libibverbs.so.1 with rdma-core's header layout) as NCCL uses libibverbs —
//! private dlopen, dlvsym, the header's inline post/poll — under the library. Its output
//! (every return code, per-QP tallies) must be the same with and without the library, and
//! the library's per-QP counters must be the program's own.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use stagefrontier::core::log::records::{QpStuck, QpWindow, RecordBody, VerbsDevice};
use stagefrontier::core::verbs::DeviceState;
use stagefrontier::core::work_requests::WrSource;
use stagefrontier::doors::verbs::abi::LAYOUT;

fn cc() -> Command {
    Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
}

fn verbs_header_or_panic() {
    assert!(
        Path::new("/usr/include/infiniband/verbs.h").exists(),
        "<infiniband/verbs.h> is missing: install libibverbs-dev (scripts/install-deps)"
    );
}

/// fakeverbs as the fixtures' build script produced it.
fn fakeverbs() -> PathBuf {
    verbs_header_or_panic();
    let build = artifact_dir().join("build");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&build)
        .expect("target/<profile>/build")
        .filter_map(|e| Some(e.ok()?.path().join("out/fakeverbs/libibverbs.so.1")))
        .filter(|p| p.exists())
        .collect();
    found.sort_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
    found.pop().expect("fakeverbs is built with the workspace (`cargo build --workspace`)")
}

fn compile(source: &Path, exe: &Path, extra: &[&str]) {
    let status =
        cc().args(["-O1", "-Wall", "-Werror", "-o"]).arg(exe).arg(source).args(extra).status().expect("run cc");
    assert!(status.success(), "compiling {}", source.display());
}

fn verbs_app(dir: &TempDir) -> PathBuf {
    let exe = dir.join("verbs_app");
    compile(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/verbs_app.c"), &exe, &["-ldl"]);
    exe
}

#[test]
fn layout_matches_the_real_header() {
    verbs_header_or_panic();
    let dir = TempDir::new("verbs-layout");
    let mut source =
        String::from("#include <stddef.h>\n#include <stdio.h>\n#include <infiniband/verbs.h>\nint main(void) {\n");
    for (expr, _) in LAYOUT {
        source += &format!("    printf(\"%zu\\n\", (size_t){expr});\n");
    }
    source += "    return 0;\n}\n";
    let file = dir.join("layout.c");
    std::fs::write(&file, source).unwrap();
    let exe = dir.join("layout");
    compile(&file, &exe, &[]);
    let out = run_ok(&mut Command::new(&exe));
    let header: Vec<usize> = String::from_utf8(out.stdout).unwrap().lines().map(|l| l.parse().unwrap()).collect();
    for ((expr, ours), theirs) in LAYOUT.iter().zip(&header) {
        assert_eq!(ours, theirs, "{expr}: the door's layout says {ours}, rdma-core's header {theirs}");
    }
    assert_eq!(header.len(), LAYOUT.len());
}

/// The program's "final qp N posted .. completed .. errors .. bytes_posted .. bytes_completed
/// .. in_flight .." lines, by QP number.
fn tallies(out: &Output) -> BTreeMap<u32, BTreeMap<String, u64>> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut by_qp = BTreeMap::new();
    for line in stdout.lines().filter(|l| l.starts_with("final qp ")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let fields = words[3..].chunks(2).map(|kv| (kv[0].to_string(), kv[1].parse().unwrap())).collect();
        by_qp.insert(words[2].parse().unwrap(), fields);
    }
    assert_eq!(by_qp.len(), 2, "{stdout}");
    by_qp
}

fn run_app(app: &Path, root: &Path, verbs: Option<&str>) -> (Output, Vec<RecordBody>) {
    let mut cmd = preloaded(app, root, "verbs");
    cmd.arg(fakeverbs()).arg("700").env("RANK", "0").env("WORLD_SIZE", "1");
    cmd.env("SF_WR_TIMEOUT_MS", "150").env("SF_NET_SAMPLE_MS", "50");
    if let Some(v) = verbs {
        cmd.env("SF_VERBS", v);
    }
    let out = run_ok(&mut cmd);
    let bodies = rank_logs(root, "verbs").iter().flat_map(|log| bodies(log)).collect();
    (out, bodies)
}

#[test]
fn per_qp_counters_are_what_the_program_did() {
    let dir = TempDir::new("verbs-count");
    let app = verbs_app(&dir);
    let plain = run_ok(Command::new(&app).arg(fakeverbs()).arg("700"));
    let root = log_root("verbs-count");
    let (traced, bodies) = run_app(&app, &root, Some("1"));
    assert_eq!(
        String::from_utf8_lossy(&traced.stdout),
        String::from_utf8_lossy(&plain.stdout),
        "same results and codes"
    );
    assert!(String::from_utf8_lossy(&plain.stdout).contains("rejected list -> 22 bad=1"));

    let devices: Vec<VerbsDevice> = bodies
        .iter()
        .filter_map(|b| match b {
            RecordBody::VerbsDevice(d) => Some(*d),
            _ => None,
        })
        .collect();
    let named = |state| {
        devices.iter().filter(|d| d.state == state).map(|d| (d.device, d.name.to_string_lossy())).collect::<Vec<_>>()
    };
    assert_eq!(named(DeviceState::Counting), [(0, "fake_0".to_string()), (1, "fake_1".to_string())]);
    assert_eq!(named(DeviceState::Closed).len(), 1, "the program closed one device: {devices:?}");

    let windows: Vec<QpWindow> = bodies
        .iter()
        .filter_map(|b| match b {
            RecordBody::QpWindow(w) if w.source == WrSource::Verbs => Some(*w),
            _ => None,
        })
        .collect();
    let program = tallies(&plain);
    for (device, (qp_num, expected)) in program.iter().enumerate() {
        let ours: Vec<&QpWindow> = windows.iter().filter(|w| w.qp_num == *qp_num).collect();
        let last = ours.last().unwrap_or_else(|| panic!("no qp_window for QP {qp_num}: {windows:?}"));
        assert_eq!(last.device, device as i32);
        let got = [
            ("posted", last.posted),
            ("completed", last.completed),
            ("errors", last.errors as u64),
            ("bytes_posted", last.bytes_posted),
            ("bytes_completed", last.bytes_completed),
            ("in_flight", last.in_flight as u64),
        ];
        for (field, value) in got {
            assert_eq!(value, expected[field], "QP {qp_num} {field}: library {value}, program {}", expected[field]);
        }
        assert!(ours.windows(2).all(|w| w[0].posted <= w[1].posted && w[0].completed <= w[1].completed));
    }
    // QP A stopped completing with 5 in flight: stuck, with its in-flight count; QP B not.
    let (qp_a, qp_b) = (*program.keys().next().unwrap(), *program.keys().last().unwrap());
    assert_eq!(program[&qp_a]["in_flight"], 5);
    let stuck: Vec<QpStuck> = bodies
        .iter()
        .filter_map(|b| match b {
            RecordBody::QpStuck(s) => Some(*s),
            _ => None,
        })
        .collect();
    assert!(stuck.iter().any(|s| s.qp_num == qp_a && s.device == 0 && s.in_flight == 5), "{stuck:?}");
    assert!(stuck.iter().all(|s| s.qp_num != qp_b), "{stuck:?}");
    assert!(String::from_utf8_lossy(&traced.stderr).contains("work request in flight"));
}

#[test]
fn without_sf_verbs_nothing_is_wrapped() {
    let dir = TempDir::new("verbs-off");
    let app = verbs_app(&dir);
    let plain = run_ok(Command::new(&app).arg(fakeverbs()));
    for setting in [None, Some("0")] {
        let root = log_root("verbs-off");
        let (traced, bodies) = run_app(&app, &root, setting);
        assert_eq!(
            String::from_utf8_lossy(&traced.stdout).lines().count(),
            String::from_utf8_lossy(&plain.stdout).lines().count()
        );
        assert_eq!(tallies(&traced), tallies(&plain));
        let verbs_records = bodies.iter().filter(|b| match b {
            RecordBody::QpWindow(w) => w.source == WrSource::Verbs,
            RecordBody::VerbsDevice(_) | RecordBody::QpStuck(_) => true,
            _ => false,
        });
        assert_eq!(verbs_records.count(), 0, "SF_VERBS={setting:?}");
        assert!(traced.stderr.is_empty(), "{}", String::from_utf8_lossy(&traced.stderr));
    }
}
