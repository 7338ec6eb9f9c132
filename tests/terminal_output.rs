//! Strings from logs never reach the terminal raw (issue 24, point 9): a job's own stage
//! and value names, marked through the Python helper, and a crafted header's host and job
//! id, each holding an escape sequence, a carriage return and a newline that would start a
//! forged line, must come out of every human output of `sf` (stdout and stderr) with no
//! control character but the line feeds that end sf's own lines.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use stagefrontier::core::log::format::{header, HOST_LEN, JOB_ID_LEN};

/// Clears the screen, sets the window title, returns to the line's start and forges a
/// line of its own; ends in a C1 CSI.
const HOSTILE: &str = "data\u{1b}[2J\u{1b}]0;owned\u{7}\rFORGED\nSLOW: rank 7 forged\u{9b}";

const JOB: &str = r#"
import sys
sys.path.insert(0, sys.argv[1])
import stagefrontier as sf
hostile = sys.argv[2]
for _ in range(4):
    with sf.step():
        with sf.stage(hostile):
            pass
        with sf.stage("model.fwd_loss_cpu_wall"):
            pass
        sf.value(hostile, 0.5)
assert sf.recording()
"#;

/// Puts `text` (cut to fit, NUL-terminated) at `offset` of a log's static header and
/// reseals it, as a crafted file would carry it.
fn plant(log: &Path, offset: usize, len: usize, text: &str) {
    let mut bytes = std::fs::read(log).unwrap();
    let field = &mut bytes[offset..offset + len];
    field.fill(0);
    let text = &text.as_bytes()[..text.len().min(len - 1)];
    field[..text.len()].copy_from_slice(text);
    reseal_header(&mut bytes);
    std::fs::write(log, bytes).unwrap();
}

/// The raw control characters in `text` other than line feeds.
fn raw_controls(text: &str) -> Vec<char> {
    text.chars().filter(|c| c.is_control() && *c != '\n').collect()
}

#[test]
fn names_from_logs_reach_every_human_output_escaped() {
    let root = log_root("terminal-output");
    let helper = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    for rank in 0..2 {
        let mut cmd = preloaded(Path::new("python3"), &root, "job");
        cmd.env("RANK", rank.to_string()).env("WORLD_SIZE", "2").env("LOCAL_RANK", rank.to_string());
        run_ok(cmd.arg("-c").arg(JOB).arg(&helper).arg(HOSTILE));
    }
    let logs = rank_logs(&root, "job");
    assert_eq!(logs.len(), 2);
    plant(&logs[1], header::HOST, HOST_LEN, &HOSTILE.replace("data", "node"));
    plant(&logs[1], header::JOB_ID, JOB_ID_LEN, &HOSTILE.replace("data", "job"));
    let dir = logs[0].parent().unwrap();
    let to = TempDir::new("terminal-snapshot");

    let log0 = logs[0].to_str().unwrap();
    let log1 = logs[1].to_str().unwrap();
    let dir_arg = dir.to_str().unwrap();
    let to_arg = to.0.to_str().unwrap();
    let trace = to.join("trace.json");
    let commands: Vec<Vec<&str>> = vec![
        vec!["ls", dir_arg],
        vec!["steps", dir_arg],
        vec!["frontier", dir_arg],
        vec!["slow", dir_arg],
        vec!["hang", dir_arg],
        vec!["net", dir_arg],
        vec!["kernels", dir_arg],
        vec!["dump", log0],
        vec!["dump", "--header", log1],
        vec!["trace", dir_arg, "-o", trace.to_str().unwrap()],
        vec!["snapshot", dir_arg, "--to", to_arg],
    ];
    let mut shown_escaped = false;
    let mut failures = Vec::new();
    for args in &commands {
        let out = Command::new(artifact("sf")).args(args).output().unwrap();
        for (stream, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
            let text = String::from_utf8_lossy(bytes);
            let raw = raw_controls(&text);
            let forged: Vec<&str> = text.lines().filter(|l| l.starts_with("SLOW: rank 7")).collect();
            if !raw.is_empty() || !forged.is_empty() {
                failures.push(format!("sf {args:?} {stream}: raw {raw:?}, forged lines {forged:?}\n{text}"));
            }
            shown_escaped |= text.contains("data\\u{1b}[2J");
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(shown_escaped, "the stage's name is shown, escaped");
}
