//! `SF_*` settings, parsed once at init and apart from any process state so they can be
//! tested with plain maps. A bad value never stops the job: it yields one warning line and
//! the default. Every value is read through `settings::Settings` (one wording for every
//! warning); the RDMA and CUDA-door keys are parsed in `config/rdma.rs` and `config/cupti.rs`.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

mod cupti;
mod rdma;
mod settings;

pub use crate::core::kernels::cupti::config::CuptiConfig;
use settings::Settings;

use crate::core::record::notice::{clip, echo};
use crate::core::steps::nvtx_stages;

/// Every variable the library reads, with its default, for docs/configuration.md and `--help` texts.
pub const VARIABLES: &[(&str, &str, &str)] = &[
    ("SF_DISABLE", "0", "1 turns the library into a pure pass-through"),
    ("SF_FORCE", "0", "1 records in processes with no rank identity (logs named pid-<pid>.sflog)"),
    (
        "SF_LOG_DIR",
        "/dev/shm/stagefrontier-<uid>",
        "root of the log tree (an absolute path); logs go to <root>/<job id>/",
    ),
    ("SF_LOG_MODE", "private", "private (dirs 0700, files 0600) or group (0750/0640: the group may read; see docs/security.md)"),
    ("SF_KEEP_ATTEMPTS", "5", "attempts of one job id whose logs are kept (1..1000); older ones are removed"),
    ("SF_QUIET", "0", "1 drops the start line saying where the logs go (warnings still show)"),
    ("SF_JOB_ID", "from the launcher", "job id directory name; overrides TORCHELASTIC_RUN_ID, SLURM_JOB_ID, ..."),
    ("SF_HOST", "gethostname", "host name the logs record (a simulated node, a container not named as its node)"),
    (
        "SF_RING_EVENTS",
        "16384",
        "events the hot-path ring holds (power of two, 16..4194304), 192 bytes each (3 MiB by default, 768 MiB at 4194304); a full ring drops and counts",
    ),
    (
        "SF_LOG_RECORDS",
        "65536",
        "records the per-rank log keeps before wrapping (1024..67108864), 384 bytes each with the history ring (24 MiB by default); unset: fewer when the log directory is small",
    ),
    ("SF_HEARTBEAT_MS", "50", "collector heartbeat and drain period in ms (1..100)"),
    ("SF_CLOCK", "auto", "auto (invariant TSC when present), tsc or monotonic"),
    ("SF_INJECT", "unset", "scripted NCCL faults, `ACTION:key=value,...;...` (see docs/configuration.md, Fault injection)"),
    ("SF_HANG_MIN_S", "10", "floor of the hang threshold, in seconds"),
    ("SF_HANG_FACTOR", "10", "hang threshold = max(SF_HANG_FACTOR x median step time, SF_HANG_MIN_S)"),
    ("SF_NVTX_STEP", "step", "NVTX range name of a logical step (`step 12` / `step:12` give the index)"),
    ("SF_NVTX_STAGES", "unset", "more NVTX range names that are stages: `name` or `nvtxname=stage`, comma-separated"),
    (
        "SF_CHAIN_PROFILER",
        "unset",
        "NCCL profiler plugin (.so path) the profiler door loads and forwards every call to",
    ),
    ("SF_PROFILER_KERNEL_CH", "0", "1 asks NCCL for ncclProfileKernelCh events through the profiler door"),
    ("SF_KERNEL_WINDOW_MS", "1000", "length of a kernel-summary window in ms (200..4000), aligned to wall-clock time"),
    ("SF_NET_RAW", "0", "1 also records every RDMA work request (prof_net records); default: per-QP aggregates only"),
    ("SF_NET_SAMPLE_MS", "1000", "period of the per-QP qp_window samples, in ms (10..600000)"),
    ("SF_WR_WINDOW", "64", "completed work requests in the sliding bandwidth window (2..256)"),
    ("SF_WR_TIMEOUT_MS", "500", "a work request in flight longer than this is stuck (qp_stuck), in ms (1..3600000)"),
    ("SF_WR_DEGRADED", "0.2", "window bandwidth this fraction below the QP's baseline is degraded (0.01..0.99)"),
    ("SF_VERBS", "0", "1 counts RDMA work requests through libibverbs (NCCL < 2.26, or programs using verbs)"),
    ("SF_IB_SYSFS_ROOT", "/sys/class/infiniband", "where the RDMA port-counter sampler finds devices"),
    ("SF_IB_SAMPLE_MS", "1000", "RDMA port-counter sampling period in ms (10..600000); 0 turns the sampler off"),
    ("SF_CUPTI", "1", "0 keeps the CUDA injection door (CUDA_INJECTION64_PATH) from touching CUPTI"),
    ("SF_CUPTI_PATH", "searched", "libcupti to use; default: one already loaded, then the usual CUDA locations"),
    ("SF_CUPTI_FLUSH_MS", "500", "how often the collector flushes CUPTI's activity buffers, in ms (10..60000)"),
    ("SF_CUPTI_BUFFERS", "16", "CUPTI activity buffers allocated once at init (2..256)"),
    ("SF_CUPTI_BUFFER_KB", "1024", "size of each CUPTI activity buffer in KiB (4..65536)"),
    ("SF_CUPTI_CORRELATION", "0", "1 also records CUDA runtime calls, linking each kernel to its launch"),
    ("SF_TEST_FAULT", "unset", "for the library's own tests only: collector-panic, collector-stall or slow-init=<ms>"),
];

/// Who may read the logs (`SF_LOG_MODE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogMode {
    /// Directories 0700, files 0600: the user alone.
    Private,
    /// Directories 0750, files 0640: the group too (the directory's group, with setgid).
    Group,
}

impl LogMode {
    pub fn dir_mode(self) -> u32 {
        match self {
            LogMode::Private => 0o700,
            LogMode::Group => 0o750,
        }
    }

    pub fn file_mode(self) -> u32 {
        match self {
            LogMode::Private => 0o600,
            LogMode::Group => 0o640,
        }
    }
}

/// Faults the library's own tests provoke (`SF_TEST_FAULT`); never set in production.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestFault {
    /// The collector thread panics in its first round.
    CollectorPanic,
    /// The collector thread blocks for ever in its first round, as in a CUPTI flush on a
    /// wedged GPU.
    CollectorStall,
    /// Reading the settings takes this long, to widen the window a fork can land in.
    SlowInit { ms: u64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockChoice {
    Auto,
    Tsc,
    Monotonic,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub disabled: bool,
    pub force: bool,
    pub log_root: PathBuf,
    /// Whether SF_LOG_DIR / SF_LOG_RECORDS were set: if not, the library may pick a place
    /// and a size that fit (core::runtime::place).
    pub log_root_chosen: bool,
    pub log_records_chosen: bool,
    pub log_mode: LogMode,
    pub keep_attempts: u32,
    pub quiet: bool,
    pub test_fault: Option<TestFault>,
    pub job_id: Option<String>,
    pub ring_events: usize,
    pub log_records: u32,
    pub heartbeat_ms: u64,
    pub clock: ClockChoice,
    pub inject: Option<String>,
    pub hang_min_s: f64,
    pub hang_factor: f64,
    pub nvtx_step: String,
    /// (NVTX range name, stage name) beyond the default stages.
    pub nvtx_stages: Vec<(String, String)>,
    /// Another NCCL profiler plugin the profiler door chains to.
    pub chain_profiler: Option<PathBuf>,
    /// Whether the profiler door asks for kernel-channel events.
    pub profiler_kernel_ch: bool,
    /// Length of a kernel-summary window (core::kernel_windows).
    pub kernel_window_ms: u64,
    /// RDMA work requests (core::qp_monitor): raw per-WR records, sample period, window,
    /// stuck timeout, degradation fraction.
    pub net_raw: bool,
    pub net_sample_ms: u64,
    pub wr_window: usize,
    pub wr_timeout_ms: u64,
    pub wr_degraded: f64,
    /// The libibverbs fallback door (doors::verbs), and the sysfs port-counter sampler
    /// (core::port_counters): its root and period (0: off).
    pub verbs: bool,
    pub ib_sysfs_root: PathBuf,
    pub ib_sample_ms: u64,
    /// The CUDA injection door (SF_CUPTI*).
    pub cupti: CuptiConfig,
}

impl Config {
    pub fn defaults_for_uid(uid: u32) -> Config {
        Config {
            disabled: false,
            force: false,
            log_root: PathBuf::from(format!("/dev/shm/stagefrontier-{uid}")),
            log_root_chosen: false,
            log_records_chosen: false,
            log_mode: LogMode::Private,
            keep_attempts: 5,
            quiet: false,
            test_fault: None,
            job_id: None,
            ring_events: 16_384,
            log_records: 65_536,
            heartbeat_ms: 50,
            clock: ClockChoice::Auto,
            inject: None,
            hang_min_s: 10.0,
            hang_factor: 10.0,
            nvtx_step: nvtx_stages::DEFAULT_STEP.to_string(),
            nvtx_stages: Vec::new(),
            chain_profiler: None,
            profiler_kernel_ch: false,
            kernel_window_ms: 1000,
            net_raw: false,
            net_sample_ms: 1000,
            wr_window: 64,
            wr_timeout_ms: 500,
            wr_degraded: 0.2,
            verbs: false,
            ib_sysfs_root: PathBuf::from("/sys/class/infiniband"),
            ib_sample_ms: 1000,
            cupti: CuptiConfig::default(),
        }
    }

    /// Parses from any variable lookup; returns the config and one warning per bad value.
    pub fn parse(uid: u32, var: impl Fn(&str) -> Option<String>) -> (Config, Vec<String>) {
        let mut cfg = Config::defaults_for_uid(uid);
        let mut s = Settings::new(&var);
        s.flag("SF_DISABLE", &mut cfg.disabled);
        s.flag("SF_FORCE", &mut cfg.force);
        s.flag("SF_QUIET", &mut cfg.quiet);
        if let Some(root) = s.path("SF_LOG_DIR") {
            // Each rank would log into its own working directory, wherever that is.
            if root.is_absolute() {
                cfg.log_root = root;
                cfg.log_root_chosen = true;
            } else {
                let v = root.to_string_lossy();
                s.warn("SF_LOG_DIR", &v, "an absolute path", cfg.log_root.display());
            }
        }
        if let Some(v) = s.text("SF_LOG_MODE") {
            match v.as_str() {
                "private" => cfg.log_mode = LogMode::Private,
                "group" => cfg.log_mode = LogMode::Group,
                _ => s.warn("SF_LOG_MODE", &v, "private or group", "private"),
            }
        }
        s.bounded("SF_KEEP_ATTEMPTS", "a number of attempts", 1..=1000, &mut cfg.keep_attempts);
        if let Some(v) = s.text("SF_TEST_FAULT") {
            let slow = v.strip_prefix("slow-init=").and_then(|ms| ms.parse().ok()).filter(|ms| *ms <= 10_000);
            match (v.as_str(), slow) {
                ("collector-panic", _) => cfg.test_fault = Some(TestFault::CollectorPanic),
                ("collector-stall", _) => cfg.test_fault = Some(TestFault::CollectorStall),
                (_, Some(ms)) => cfg.test_fault = Some(TestFault::SlowInit { ms }),
                _ => s.warn(
                    "SF_TEST_FAULT",
                    &v,
                    "collector-panic, collector-stall or slow-init=<ms up to 10000>",
                    "none",
                ),
            }
        }
        if let Some(v) = s.text("SF_JOB_ID") {
            match sanitize_job_id(&v) {
                Some(id) => cfg.job_id = Some(id),
                None => s.warnings.push(format!(
                    "SF_JOB_ID={} has no usable character; using the launcher's job id",
                    echo(v.as_bytes())
                )),
            }
        }
        let ring_ok = |n: &usize| n.is_power_of_two() && (16..=1 << 22).contains(n);
        s.checked("SF_RING_EVENTS", "a power of two from 16 to 4194304", ring_ok, &mut cfg.ring_events);
        let records = 1024..=1 << 26;
        cfg.log_records_chosen =
            s.text("SF_LOG_RECORDS").and_then(|v| v.parse().ok()).is_some_and(|n: u32| records.contains(&n));
        s.bounded("SF_LOG_RECORDS", "a record count", records, &mut cfg.log_records);
        s.bounded("SF_HEARTBEAT_MS", "a period in ms", 1..=100, &mut cfg.heartbeat_ms);
        if let Some(v) = s.text("SF_CLOCK") {
            match v.as_str() {
                "auto" => cfg.clock = ClockChoice::Auto,
                "tsc" => cfg.clock = ClockChoice::Tsc,
                "monotonic" => cfg.clock = ClockChoice::Monotonic,
                _ => s.warn("SF_CLOCK", &v, "auto, tsc or monotonic", "auto"),
            }
        }
        cfg.inject = s.text("SF_INJECT");
        s.bounded("SF_HANG_MIN_S", "a number of seconds", 0.01..=86_400.0, &mut cfg.hang_min_s);
        s.bounded("SF_HANG_FACTOR", "a factor", 1.0..=10_000.0, &mut cfg.hang_factor);
        if let Some(v) = s.text("SF_NVTX_STEP") {
            match nvtx_stages::check_step_name(&v) {
                Ok(()) => cfg.nvtx_step = v,
                Err(why) => {
                    s.warnings.push(format!("SF_NVTX_STEP={} {why}; using {}", echo(v.as_bytes()), cfg.nvtx_step))
                }
            }
        }
        if let Some(v) = s.text("SF_NVTX_STAGES") {
            match nvtx_stages::parse_stage_list(&v, &cfg.nvtx_step) {
                Ok(stages) => cfg.nvtx_stages = stages,
                Err(why) => s.warnings.push(format!(
                    "SF_NVTX_STAGES={}: {}; using the default stages only",
                    echo(v.as_bytes()),
                    clip(why.as_bytes()).0
                )),
            }
        }
        cfg.chain_profiler = s.path("SF_CHAIN_PROFILER");
        s.flag("SF_PROFILER_KERNEL_CH", &mut cfg.profiler_kernel_ch);
        s.bounded("SF_KERNEL_WINDOW_MS", "a window in ms", 200..=4000, &mut cfg.kernel_window_ms);
        rdma::parse_work_request_keys(&mut cfg, &mut s);
        rdma::parse_verbs_keys(&mut cfg, &mut s);
        cupti::parse_cupti_keys(&mut cfg.cupti, &mut s);
        (cfg, s.warnings)
    }

    /// From the process environment. A value that is not UTF-8 is reported and ignored
    /// like any other bad value.
    pub fn from_env() -> (Config, Vec<String>) {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let uid = unsafe { libc::geteuid() };
        let (config, mut warnings) = Config::parse(uid, |name| std::env::var(name).ok());
        warnings.extend(not_utf8_warnings(std::env::vars_os()));
        if let Some(TestFault::SlowInit { ms }) = config.test_fault {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
        (config, warnings)
    }
}

/// One warning per library variable whose value is not UTF-8 (`parse` saw it as unset).
fn not_utf8_warnings(vars: impl Iterator<Item = (OsString, OsString)>) -> Vec<String> {
    vars.filter(|(name, value)| value.to_str().is_none() && VARIABLES.iter().any(|(known, _, _)| name == known))
        .map(|(name, value)| {
            format!("{}={} is not valid UTF-8; using the default", name.to_string_lossy(), echo(value.as_bytes()))
        })
        .collect()
}

/// A boolean setting's value; also read by doors that decide before the config is parsed.
pub fn flag(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// Job ids become directory names: keep `[A-Za-z0-9._-]`, map the rest to `_`, cap at 63
/// bytes, and refuse ids that would name `.` or `..`.
pub fn sanitize_job_id(raw: &str) -> Option<String> {
    let id: String =
        raw.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).take(63).collect();
    (!id.is_empty() && id.chars().any(|c| c.is_ascii_alphanumeric())).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    pub(super) fn parse(pairs: &[(&str, &str)]) -> (Config, Vec<String>) {
        let env: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::parse(1000, |k| env.get(k).cloned())
    }

    /// The figure docs/configuration.md and `SF_RING_EVENTS`' description give: 192 bytes an event
    /// (a 152-byte event and its stamp, in three cache lines), 768 MiB at the largest
    /// setting. A change to the event's size must change them too.
    #[test]
    fn an_event_slot_costs_what_the_docs_say() {
        use crate::core::live::event::Event;
        use crate::core::record::ring::Ring;
        assert_eq!(Ring::<Event>::SLOT_BYTES, 192);
        assert_eq!(4_194_304 * Ring::<Event>::SLOT_BYTES, 768 << 20);
        let (_, _, doc) = VARIABLES.iter().find(|(name, _, _)| *name == "SF_RING_EVENTS").unwrap();
        assert!(doc.contains("192 bytes each") && doc.contains("768 MiB"), "{doc}");
        let readme = include_str!("../../../docs/configuration.md");
        assert!(readme.contains("`SF_RING_EVENTS` × 192 bytes"), "docs/configuration.md memory paragraph");
    }

    #[test]
    fn kernel_window_length_is_bounded() {
        assert_eq!(parse(&[]).0.kernel_window_ms, 1000);
        assert_eq!(parse(&[("SF_KERNEL_WINDOW_MS", "250")]).0.kernel_window_ms, 250);
        for bad in ["100", "5000", "1s"] {
            let (cfg, warnings) = parse(&[("SF_KERNEL_WINDOW_MS", bad)]);
            assert_eq!((cfg.kernel_window_ms, warnings.len()), (1000, 1), "{bad}");
            assert!(warnings[0].starts_with("SF_KERNEL_WINDOW_MS="), "{warnings:?}");
        }
    }

    #[test]
    fn defaults_without_variables() {
        let (cfg, warnings) = parse(&[]);
        assert!(warnings.is_empty());
        assert_eq!(cfg, Config::defaults_for_uid(1000));
        assert_eq!(cfg.log_root, PathBuf::from("/dev/shm/stagefrontier-1000"));
    }

    #[test]
    fn profiler_settings() {
        let (cfg, warnings) = parse(&[("SF_CHAIN_PROFILER", "/opt/p.so"), ("SF_PROFILER_KERNEL_CH", "1")]);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(cfg.chain_profiler, Some(PathBuf::from("/opt/p.so")));
        assert!(cfg.profiler_kernel_ch);
        let (cfg, warnings) = parse(&[("SF_PROFILER_KERNEL_CH", "maybe")]);
        assert_eq!((cfg.profiler_kernel_ch, warnings.len()), (false, 1));
    }

    #[test]
    fn valid_values_are_taken() {
        let (cfg, warnings) = parse(&[
            ("SF_RING_EVENTS", "64"),
            ("SF_LOG_RECORDS", "4096"),
            ("SF_HEARTBEAT_MS", "20"),
            ("SF_CLOCK", "monotonic"),
            ("SF_FORCE", "yes"),
            ("SF_LOG_DIR", "/tmp/x"),
            ("SF_JOB_ID", "run 42/a"),
        ]);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(cfg.ring_events, 64);
        assert_eq!(cfg.log_records, 4096);
        assert_eq!(cfg.heartbeat_ms, 20);
        assert_eq!(cfg.clock, ClockChoice::Monotonic);
        assert!(cfg.force);
        assert_eq!(cfg.log_root, PathBuf::from("/tmp/x"));
        assert_eq!(cfg.job_id.as_deref(), Some("run_42_a"));
    }

    #[test]
    fn each_bad_value_gives_one_warning_naming_it_and_keeps_the_default() {
        let (cfg, warnings) = parse(&[
            ("SF_RING_EVENTS", "1000"),
            ("SF_LOG_RECORDS", "lots"),
            ("SF_HEARTBEAT_MS", "500"),
            ("SF_CLOCK", "sundial"),
            ("SF_HANG_MIN_S", "-1"),
            ("SF_DISABLE", "maybe"),
            ("SF_JOB_ID", "//"),
        ]);
        assert_eq!(warnings.len(), 7, "{warnings:?}");
        for (w, name) in warnings.iter().zip([
            "SF_DISABLE",
            "SF_JOB_ID",
            "SF_RING_EVENTS",
            "SF_LOG_RECORDS",
            "SF_HEARTBEAT_MS",
            "SF_CLOCK",
            "SF_HANG_MIN_S",
        ]) {
            assert!(w.starts_with(name), "{w}");
        }
        let defaults = Config::defaults_for_uid(1000);
        assert_eq!(cfg, defaults);
    }

    #[test]
    fn nvtx_step_and_stages() {
        let (cfg, warnings) =
            parse(&[("SF_NVTX_STEP", "iteration"), ("SF_NVTX_STAGES", "fwd=model.fwd_loss_cpu_wall,io")]);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(cfg.nvtx_step, "iteration");
        let expected = [("fwd", "model.fwd_loss_cpu_wall"), ("io", "io")].map(|(a, b)| (a.to_string(), b.to_string()));
        assert_eq!(cfg.nvtx_stages, expected);

        let (cfg, warnings) = parse(&[("SF_NVTX_STEP", "data.next_wait"), ("SF_NVTX_STAGES", "a,,b")]);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].starts_with("SF_NVTX_STEP") && warnings[1].starts_with("SF_NVTX_STAGES"), "{warnings:?}");
        assert_eq!((cfg.nvtx_step.as_str(), cfg.nvtx_stages.len()), ("step", 0));

        let (_, warnings) = parse(&[("SF_NVTX_STEP", "iter"), ("SF_NVTX_STAGES", "iter")]);
        assert_eq!(warnings.len(), 1, "a stage may not take the configured step's name: {warnings:?}");
    }

    #[test]
    fn log_place_settings() {
        let (cfg, warnings) = parse(&[
            ("SF_LOG_DIR", "/srv/sf"),
            ("SF_LOG_RECORDS", "2048"),
            ("SF_LOG_MODE", "group"),
            ("SF_KEEP_ATTEMPTS", "3"),
            ("SF_QUIET", "1"),
        ]);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert!(cfg.log_root_chosen && cfg.log_records_chosen && cfg.quiet);
        assert_eq!((cfg.log_mode, cfg.keep_attempts), (LogMode::Group, 3));
        assert_eq!((LogMode::Group.dir_mode(), LogMode::Group.file_mode()), (0o750, 0o640));
        let defaults = parse(&[]).0;
        assert!(!defaults.log_root_chosen && !defaults.log_records_chosen && !defaults.quiet);
        assert_eq!((defaults.log_mode, defaults.keep_attempts), (LogMode::Private, 5));
        assert_eq!((LogMode::Private.dir_mode(), LogMode::Private.file_mode()), (0o700, 0o600));
    }

    #[test]
    fn a_relative_log_dir_is_refused_with_one_line() {
        for relative in ["logs", "./logs", "../x"] {
            let (cfg, warnings) = parse(&[("SF_LOG_DIR", relative)]);
            assert_eq!(warnings.len(), 1, "{warnings:?}");
            assert!(
                warnings[0].starts_with(&format!("SF_LOG_DIR=\"{relative}\" is not an absolute path")),
                "{warnings:?}"
            );
            assert_eq!((cfg.log_root, cfg.log_root_chosen), (PathBuf::from("/dev/shm/stagefrontier-1000"), false));
        }
    }

    #[test]
    fn bad_values_are_echoed_short_and_escaped() {
        let long = format!("\x1b]0;pwned\x07{}", "7".repeat(300));
        let stages = format!("a,\x1b[2J{}=x", "b".repeat(300));
        let (_, warnings) = parse(&[("SF_RING_EVENTS", &long), ("SF_JOB_ID", "\n\n"), ("SF_NVTX_STAGES", &stages)]);
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        for w in &warnings {
            assert!(!w.chars().any(char::is_control), "{w:?}");
            // The value, at most 120 characters, and the item at fault in it, as many more.
            assert!(w.len() < 2 * 120 + 150, "{w}");
        }
        assert!(warnings[1].contains("... ("), "{warnings:?}");
    }

    #[test]
    fn values_that_are_not_utf8_are_reported() {
        use std::os::unix::ffi::OsStringExt;
        let vars = [
            (OsString::from("SF_LOG_DIR"), OsString::from_vec(b"/tmp/\xff\xfe".to_vec())),
            (OsString::from("SF_CLOCK"), OsString::from("tsc")),
            (OsString::from("OTHER"), OsString::from_vec(vec![0xff])),
        ];
        let warnings = not_utf8_warnings(vars.into_iter());
        assert_eq!(warnings, ["SF_LOG_DIR=\"/tmp/\\xff\\xfe\" is not valid UTF-8; using the default"]);
    }

    #[test]
    fn test_faults() {
        assert_eq!(parse(&[("SF_TEST_FAULT", "collector-panic")]).0.test_fault, Some(TestFault::CollectorPanic));
        assert_eq!(parse(&[("SF_TEST_FAULT", "collector-stall")]).0.test_fault, Some(TestFault::CollectorStall));
        assert_eq!(parse(&[("SF_TEST_FAULT", "slow-init=300")]).0.test_fault, Some(TestFault::SlowInit { ms: 300 }));
        let (cfg, warnings) = parse(&[("SF_TEST_FAULT", "slow-init=99999")]);
        assert_eq!((cfg.test_fault, warnings.len()), (None, 1));
    }

    #[test]
    fn job_ids_cannot_escape_the_log_root() {
        assert_eq!(sanitize_job_id(".."), None);
        assert_eq!(sanitize_job_id("../etc").as_deref(), Some(".._etc"));
        assert_eq!(sanitize_job_id(&"x".repeat(100)).map(|s| s.len()), Some(63));
    }
}
