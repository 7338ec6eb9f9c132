//! The libibverbs fallback door (SF_VERBS=1) on a real process: tests/c/verbs_app.c uses
//! fakeverbs (a libibverbs.so.1 with rdma-core's header layout) as NCCL uses libibverbs —
//! private dlopen, dlvsym, the header's inline post/poll — under the library; built with
//! -DLINKED and linked against fakeverbs, as a program linked against rdma-core does
//! (versioned references through the PLT). Its output (every return code, per-QP tallies)
//! must be the same with and without the library, and the library's per-QP counters must
//! be the program's own.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use stagefrontier::core::log::records::{QpStuck, QpWindow, RecordBody, VerbsDevice};
use stagefrontier::core::log::records_net::WrSource;
use stagefrontier::core::log::records_ports::DeviceState;
use stagefrontier::doors::net::verbs::abi::LAYOUT;

fn verbs_header_or_panic() {
    assert!(
        Path::new("/usr/include/infiniband/verbs.h").exists(),
        "<infiniband/verbs.h> is missing: install libibverbs-dev (scripts/install-deps)"
    );
}

/// fakeverbs as the fixtures' build script produced it.
fn fakeverbs() -> PathBuf {
    verbs_header_or_panic();
    fixture_output("fakeverbs/libibverbs.so.1")
}

/// verbs_app as NCCL uses libibverbs: dlopen and dlvsym.
fn verbs_app(dir: &TempDir) -> PathBuf {
    let exe = dir.join("verbs_app");
    compile_c(&c_source("verbs_app.c"), &exe, &["-ldl"]);
    exe
}

/// verbs_app linked against fakeverbs by its SONAME (a DT_NEEDED on libibverbs.so.1 and
/// references to `ibv_*@IBVERBS_1.1`, as against rdma-core), found through its rpath.
fn verbs_linked(dir: &TempDir) -> PathBuf {
    let exe = dir.join("verbs_linked");
    let fake_dir = fakeverbs().parent().unwrap().to_path_buf();
    let (search, rpath) = (format!("-L{}", fake_dir.display()), format!("-Wl,-rpath,{}", fake_dir.display()));
    compile_c(&c_source("verbs_app.c"), &exe, &["-DLINKED", &search, "-l:libibverbs.so.1", &rpath, "-ldl"]);
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
    compile_c(&file, &exe, &[]);
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
    assert_counted_per_qp(&verbs_app(&dir), "verbs-count");
}

#[test]
fn linked_program_is_counted_per_qp() {
    let dir = TempDir::new("verbs-linked-count");
    assert_counted_per_qp(&verbs_linked(&dir), "verbs-linked-count");
}

/// Under SF_VERBS=1 the program's output and codes are what they are without the library,
/// each device is recorded, each QP's last qp_window holds the program's own tallies, and
/// the QP left with WRs in flight is reported stuck (the other is not).
fn assert_counted_per_qp(app: &Path, test: &str) {
    let plain = run_ok(Command::new(app).arg(fakeverbs()).arg("700"));
    let root = log_root(test);
    let (traced, bodies) = run_app(app, &root, Some("1"));
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
    assert_only_forwarded(&verbs_app(&dir), "verbs-off");
}

#[test]
fn linked_program_without_sf_verbs_is_only_forwarded() {
    let dir = TempDir::new("verbs-linked-off");
    assert_only_forwarded(&verbs_linked(&dir), "verbs-linked-off");
}

/// With SF_VERBS unset or 0: the same output and exit status as without the library, no
/// verbs record, nothing on stderr.
fn assert_only_forwarded(app: &Path, test: &str) {
    let plain = run_ok(Command::new(app).arg(fakeverbs()).arg("700"));
    for setting in [None, Some("0")] {
        let root = log_root(test);
        let (traced, bodies) = run_app(app, &root, setting);
        assert_eq!(String::from_utf8_lossy(&traced.stdout), String::from_utf8_lossy(&plain.stdout));
        assert_eq!(traced.status.code(), plain.status.code());
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

/// The app's undefined dynamic symbols named `ibv_*` (readelf's `name@VERSION` form), and
/// the library's defined ones (unversioned: no `@`).
fn dynamic_verbs(file: &Path, defined: bool) -> Vec<String> {
    let out = run_ok(Command::new("readelf").args(["-W", "--dyn-syms"]).arg(file));
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(" FUNC ") && l.contains(" GLOBAL ") && l.contains(" UND ") != defined)
        .filter_map(|l| l.split_whitespace().nth(7).map(str::to_string))
        .filter(|n| ["ibv_open_device", "ibv_close_device", "ibv_create_qp"].contains(&n.split('@').next().unwrap()))
        .collect();
    names.sort();
    names
}

#[test]
fn versioned_references_bind_to_the_library_exports() {
    let dir = TempDir::new("verbs-bind");
    let app = verbs_linked(&dir);
    assert_eq!(
        dynamic_verbs(&app, false),
        ["ibv_close_device@IBVERBS_1.1", "ibv_create_qp@IBVERBS_1.1", "ibv_open_device@IBVERBS_1.1"],
        "the app references rdma-core's version node"
    );
    assert_eq!(
        dynamic_verbs(&library(), true),
        ["ibv_close_device", "ibv_create_qp", "ibv_open_device"],
        "the library defines them unversioned"
    );
    // The dynamic linker's own account of each binding (LD_DEBUG=bindings, on stderr).
    let root = log_root("verbs-bind");
    let mut cmd = preloaded(&app, &root, "verbs");
    cmd.arg("-").env("LD_DEBUG", "bindings").env("RANK", "0").env("WORLD_SIZE", "1");
    let out = run_ok(&mut cmd);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let app_name = app.to_string_lossy();
    for verb in ["ibv_open_device", "ibv_close_device", "ibv_create_qp"] {
        let binding = stderr
            .lines()
            .find(|l| {
                l.contains(&format!("binding file {app_name} ")) && l.contains(&format!("`{verb}' [IBVERBS_1.1]"))
            })
            .unwrap_or_else(|| panic!("no binding of {verb} in:\n{stderr}"));
        assert!(binding.contains("libstagefrontier.so [0]: normal symbol"), "{binding}");
        let onward = stderr.lines().find(|l| {
            l.contains("binding file ")
                && l.contains("libstagefrontier.so [0] to ")
                && l.contains(&format!("`{verb}' [IBVERBS_1.1]"))
        });
        assert!(
            onward.is_some_and(|l| l.contains("fakeverbs/libibverbs.so.1")),
            "the export forwards to fakeverbs: {onward:?}"
        );
    }
}

#[test]
fn exports_fail_like_missing_verbs_until_libibverbs_is_loaded() {
    let dir = TempDir::new("verbs-missing");
    let exe = dir.join("verbs_missing");
    compile_c(&c_source("verbs_missing.c"), &exe, &["-ldl"]);
    let plain = run_ok(Command::new(&exe).arg(fakeverbs()));
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout),
        "not exported\n",
        "nothing defines the verbs without the library"
    );
    for setting in [None, Some("1")] {
        let root = log_root("verbs-missing");
        let mut cmd = preloaded(&exe, &root, "verbs");
        cmd.arg(fakeverbs()).env("RANK", "0").env("WORLD_SIZE", "1");
        if let Some(v) = setting {
            cmd.env("SF_VERBS", v);
        }
        let out = run_ok(&mut cmd);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "missing open -> NULL errno Function not implemented\n\
             missing close -> -1 errno Function not implemented\n\
             missing create_qp -> NULL errno Function not implemented\n\
             loaded open -> fake_0\n\
             loaded create_qp -> qp\n\
             loaded close -> 0\n",
            "SF_VERBS={setting:?}"
        );
        // With the door on, the privately loaded library's device was counted and closed.
        let states: Vec<DeviceState> = rank_logs(&root, "verbs")
            .iter()
            .flat_map(|log| bodies(log))
            .filter_map(|b| match b {
                RecordBody::VerbsDevice(d) => Some(d.state),
                _ => None,
            })
            .collect();
        let expected: &[DeviceState] =
            if setting.is_some() { &[DeviceState::Counting, DeviceState::Closed] } else { &[] };
        assert_eq!(states, expected, "SF_VERBS={setting:?}");
    }
}
