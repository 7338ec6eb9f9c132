//! What `sf` writes must not be redirected by another user (issue 24, points 1, 7, 11):
//! `sf snapshot` run as root (docs/many-nodes.md's Slurm epilog) into a shared DEST whose names
//! the job's owner knows in advance, from a DIR that owner controls, and the outputs of
//! `sf trace -o` and `sf exporter --textfile`. The second user is `nobody` through
//! `setpriv` (needs root; where that is missing the test says SKIP on stderr); it plants
//! links and directories, and root's files must come out untouched.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use stagefrontier::core::log::synth::SynthJob;

/// A finished two-rank job on host `node0`, written into `dir`.
fn two_rank_job(dir: &Path) -> Vec<PathBuf> {
    let job = SynthJob {
        job_id: "job".into(),
        world: 2,
        ranks_per_host: 2,
        steps: 4,
        calls_per_step: 3,
        slot_count: 1024,
        slow_rank: None,
        stall_us: 0,
    };
    job.write(dir, 0..2).unwrap()
}

fn sf(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(artifact("sf")).args(args).output().expect("spawn sf")
}

fn snapshot(dir: &Path, to: &Path) -> Output {
    sf(&["snapshot".as_ref(), dir.as_os_str(), "--to".as_ref(), to.as_os_str()])
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A root-only directory holding one precious file: what a planted link points at.
struct Secret {
    dir: TempDir,
}

impl Secret {
    fn new(name: &str) -> Secret {
        let dir = TempDir::new(name);
        std::fs::write(dir.join("keep"), b"precious").unwrap();
        std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o700)).unwrap();
        Secret { dir }
    }

    fn keep(&self) -> PathBuf {
        self.dir.join("keep")
    }

    /// Still only `keep`, still holding what it held.
    fn untouched(&self) -> bool {
        let names: Vec<_> = std::fs::read_dir(&self.dir.0).unwrap().map(|e| e.unwrap().file_name()).collect();
        names == ["keep"] && std::fs::read(self.keep()).unwrap() == b"precious"
    }
}

#[test]
fn a_snapshot_as_root_never_writes_through_what_another_user_planted_in_dest() {
    if let Err(why) = second_user() {
        return skip("a_snapshot_as_root_never_writes_through...", &why);
    }
    let logs = TempDir::new("planted-dest-logs");
    two_rank_job(&logs.join("job"));
    let shared = shared_dir("planted-dest"); // /shared/sf: root's, 1777
    let secret = Secret::new("planted-dest-secret");
    let s = shared.0.display();
    let (sec, keep) = (secret.dir.0.display(), secret.keep().display().to_string());
    // The job's owner knows the job id and host: DEST/<host>/<job> is theirs to prepare.
    as_nobody(&format!(
        "ln -s {sec} {s}/J1 && mkdir -m 777 -p {s}/J2/node0/job && ln -s {keep} {s}/J2/node0/job/rank-00000.sflog.partial \
         && ln -s {keep} {s}/J2/node0/job/rank-00001.sflog.partial && ln -s {keep} {s}/J2/node0/job/snapshot.json.partial"
    ));

    let linked = snapshot(&logs.join("job"), &shared.join("J1"));
    assert_eq!(linked.status.code(), Some(1), "{}", stderr(&linked));
    let said = stderr(&linked);
    assert_eq!(said.lines().count(), 1, "one line: {said}");
    assert!(said.contains("J1 is a symbolic link of uid 65534, neither root nor this user (0)"), "{said}");
    assert!(secret.untouched(), "nothing created inside the root-only directory");

    let planted = snapshot(&logs.join("job"), &shared.join("J2"));
    assert_eq!(planted.status.code(), Some(1), "{}", stderr(&planted));
    let said = stderr(&planted);
    assert_eq!(said.lines().count(), 1, "one line: {said}");
    assert!(said.contains("J2 is owned by uid 65534, neither root nor this user (0)"), "{said}");
    assert!(secret.untouched(), "root's file was not overwritten through a .partial link");

    // A fresh DEST in the same shared directory: created root's and private.
    let fresh = snapshot(&logs.join("job"), &shared.join("J3"));
    assert_eq!(fresh.status.code(), Some(0), "{}", stderr(&fresh));
    for dir in ["J3", "J3/node0", "J3/node0/job"] {
        let meta = std::fs::symlink_metadata(shared.join(dir)).unwrap();
        assert!(meta.is_dir() && meta.uid() == 0 && meta.mode() & 0o777 == 0o700, "{dir}: {:o}", meta.mode());
    }
    let mut copied: Vec<_> = std::fs::read_dir(shared.join("J3/node0/job"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    copied.sort();
    assert_eq!(copied, ["rank-00000.sflog", "rank-00001.sflog", "snapshot.json"], "no temporary left");
}

#[test]
fn a_snapshot_copies_only_regular_files_of_the_jobs_user() {
    if let Err(why) = second_user() {
        return skip("a_snapshot_copies_only_regular_files...", &why);
    }
    // Root's private logs of a job with the same id and host.
    let private = TempDir::new("own-files-private");
    let victim = two_rank_job(&private.join("job"));
    std::fs::set_permissions(&private.0, std::fs::Permissions::from_mode(0o700)).unwrap();
    let shared = shared_dir("own-files");
    let attacker = shared.join("attacker");
    // nobody's job directory: a link to root's log, and a log of root's put there (as a
    // hard link would be), beside a link from a directory of nobody's to root's job.
    as_nobody(&format!(
        "mkdir -p {a}/job && ln -s {v} {a}/job/rank-00000.sflog && ln -s {p}/job {a}/linked",
        a = attacker.display(),
        v = victim[0].display(),
        p = private.0.display()
    ));
    std::fs::copy(&victim[1], attacker.join("job/rank-00001.sflog")).unwrap();
    let dest = TempDir::new("own-files-dest");

    let out = snapshot(&attacker.join("job"), &dest.0);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(
        said.contains("rank-00000.sflog: a symbolic link, not a regular file of the job's user (uid 65534"),
        "{said}"
    );
    assert!(
        said.contains("rank-00001.sflog: a file of uid 0, not a regular file of the job's user (uid 65534"),
        "{said}"
    );
    assert!(!dest.join("node0").exists(), "nothing copied: {said}");

    let out = snapshot(&attacker.join("linked"), &dest.0);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("linked is a symbolic link of uid 65534 to a directory of uid 0"), "{said}");
    assert!(!dest.join("node0").exists(), "nothing copied: {said}");
}

#[test]
fn a_snapshot_into_the_directory_it_copies_is_refused_and_the_logs_are_left_alone() {
    // The --nodes layout: R/node0/job is both DIR and DEST/<host>/<job> for --to R.
    let root = TempDir::new("into-itself");
    let logs = two_rank_job(&root.join("node0/job"));
    let before: Vec<(u64, Vec<u8>)> =
        logs.iter().map(|p| (std::fs::metadata(p).unwrap().ino(), std::fs::read(p).unwrap())).collect();
    let out = snapshot(&root.join("node0/job"), &root.0);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(
        said.contains("node0/job holds the logs being copied, which the copies would replace or join; pick a DEST"),
        "{said}"
    );
    let after: Vec<(u64, Vec<u8>)> =
        logs.iter().map(|p| (std::fs::metadata(p).unwrap().ino(), std::fs::read(p).unwrap())).collect();
    assert!(before == after, "the logs were replaced");
    let names: Vec<_> = std::fs::read_dir(root.join("node0/job")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "nothing added beside the logs: {names:?}");
}

#[test]
fn trace_and_textfile_outputs_never_follow_another_users_links() {
    if let Err(why) = second_user() {
        return skip("trace_and_textfile_outputs_never_follow...", &why);
    }
    let logs = TempDir::new("outputs-logs");
    two_rank_job(&logs.join("job"));
    let shared = shared_dir("outputs");
    let secret = Secret::new("outputs-secret");
    as_nobody(&format!(
        "ln -s {keep} {s}/job.json && ln -s {sec} {s}/prom",
        keep = secret.keep().display(),
        s = shared.0.display(),
        sec = secret.dir.0.display()
    ));

    let trace = shared.join("job.json");
    let out = sf(&["trace".as_ref(), logs.join("job").as_os_str(), "-o".as_ref(), trace.as_os_str()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(secret.untouched(), "the trace went through nobody's link");
    let meta = std::fs::symlink_metadata(&trace).unwrap();
    assert!(meta.is_file() && meta.uid() == 0, "the link itself was replaced by root's trace");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    assert!(json.is_object() || json.is_array());

    let textfile = shared.join("prom");
    let out =
        sf(&["exporter".as_ref(), "--textfile".as_ref(), textfile.as_os_str(), "--once".as_ref(), logs.0.as_os_str()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("prom is a symbolic link of uid 65534, neither root nor this user (0)"), "{said}");
    assert!(secret.untouched(), "a textfile was written into the root-only directory");
}
