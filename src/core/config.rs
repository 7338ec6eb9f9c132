//! `SF_*` settings, parsed once at init and apart from any process state so they can be
//! tested with plain maps. A bad value never stops the job: it yields one warning line and
//! the default.

use std::path::PathBuf;

use super::nvtx_stages;

/// Every variable the library reads, with its default, for README and `--help` texts.
pub const VARIABLES: &[(&str, &str, &str)] = &[
    ("SF_DISABLE", "0", "1 turns the library into a pure pass-through"),
    ("SF_FORCE", "0", "1 records in processes with no rank identity (logs named pid-<pid>.sflog)"),
    ("SF_LOG_DIR", "/dev/shm/stagefrontier-<uid>", "root of the log tree; logs go to <root>/<job id>/"),
    ("SF_JOB_ID", "from the launcher", "job id directory name; overrides TORCHELASTIC_RUN_ID, SLURM_JOB_ID, ..."),
    (
        "SF_RING_EVENTS",
        "16384",
        "events the hot-path ring holds (power of two, 16..4194304); a full ring drops and counts",
    ),
    ("SF_LOG_RECORDS", "65536", "records the per-rank log keeps before wrapping (1024..67108864), 128 bytes each"),
    ("SF_HEARTBEAT_MS", "50", "collector heartbeat and drain period in ms (1..100)"),
    ("SF_CLOCK", "auto", "auto (invariant TSC when present), tsc or monotonic"),
    ("SF_INJECT", "unset", "scripted NCCL faults, `ACTION:key=value,...;...` (see README, Fault injection)"),
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
];

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

/// The CUDA door's settings (README, CUDA kernel activity).
#[derive(Clone, Debug, PartialEq)]
pub struct CuptiConfig {
    pub enabled: bool,
    pub path: Option<PathBuf>,
    pub flush_ms: u64,
    pub buffers: usize,
    pub buffer_kb: usize,
    pub correlation: bool,
}

impl Default for CuptiConfig {
    fn default() -> CuptiConfig {
        CuptiConfig { enabled: true, path: None, flush_ms: 500, buffers: 16, buffer_kb: 1024, correlation: false }
    }
}

impl Config {
    pub fn defaults_for_uid(uid: u32) -> Config {
        Config {
            disabled: false,
            force: false,
            log_root: PathBuf::from(format!("/dev/shm/stagefrontier-{uid}")),
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
        let mut warnings = Vec::new();
        let setting = |name: &str| var(name).filter(|v| !v.is_empty()).map(|v| (name.to_string(), v));

        if let Some((name, v)) = setting("SF_DISABLE") {
            cfg.disabled = parse_bool(&name, &v, &mut warnings).unwrap_or(false);
        }
        if let Some((name, v)) = setting("SF_FORCE") {
            cfg.force = parse_bool(&name, &v, &mut warnings).unwrap_or(false);
        }
        if let Some((_, v)) = setting("SF_LOG_DIR") {
            cfg.log_root = PathBuf::from(v);
        }
        if let Some((name, v)) = setting("SF_JOB_ID") {
            match sanitize_job_id(&v) {
                Some(id) => cfg.job_id = Some(id),
                None => warnings.push(format!("{name}={v:?} has no usable character; using the launcher's job id")),
            }
        }
        if let Some((name, v)) = setting("SF_RING_EVENTS") {
            match v.parse::<usize>() {
                Ok(n) if n.is_power_of_two() && (16..=1 << 22).contains(&n) => cfg.ring_events = n,
                _ => warnings
                    .push(format!("{name}={v:?} is not a power of two from 16 to 4194304; using {}", cfg.ring_events)),
            }
        }
        if let Some((name, v)) = setting("SF_LOG_RECORDS") {
            match v.parse::<u32>() {
                Ok(n) if (1024..=1 << 26).contains(&n) => cfg.log_records = n,
                _ => warnings.push(format!(
                    "{name}={v:?} is not a record count from 1024 to 67108864; using {}",
                    cfg.log_records
                )),
            }
        }
        if let Some((name, v)) = setting("SF_HEARTBEAT_MS") {
            match v.parse::<u64>() {
                Ok(n) if (1..=100).contains(&n) => cfg.heartbeat_ms = n,
                _ => {
                    warnings.push(format!("{name}={v:?} is not a period from 1 to 100 ms; using {}", cfg.heartbeat_ms))
                }
            }
        }
        if let Some((name, v)) = setting("SF_CLOCK") {
            match v.as_str() {
                "auto" => cfg.clock = ClockChoice::Auto,
                "tsc" => cfg.clock = ClockChoice::Tsc,
                "monotonic" => cfg.clock = ClockChoice::Monotonic,
                _ => warnings.push(format!("{name}={v:?} is not auto, tsc or monotonic; using auto")),
            }
        }
        if let Some((_, v)) = setting("SF_INJECT") {
            cfg.inject = Some(v);
        }
        if let Some((name, v)) = setting("SF_HANG_MIN_S") {
            match v.parse::<f64>() {
                Ok(s) if (0.01..=86_400.0).contains(&s) => cfg.hang_min_s = s,
                _ => warnings.push(format!(
                    "{name}={v:?} is not a number of seconds from 0.01 to 86400; using {}",
                    cfg.hang_min_s
                )),
            }
        }
        if let Some((name, v)) = setting("SF_HANG_FACTOR") {
            match v.parse::<f64>() {
                Ok(f) if (1.0..=10_000.0).contains(&f) => cfg.hang_factor = f,
                _ => warnings.push(format!("{name}={v:?} is not a factor from 1 to 10000; using {}", cfg.hang_factor)),
            }
        }
        if let Some((name, v)) = setting("SF_NVTX_STEP") {
            match nvtx_stages::check_step_name(&v) {
                Ok(()) => cfg.nvtx_step = v,
                Err(why) => warnings.push(format!("{name}={v:?} {why}; using {}", cfg.nvtx_step)),
            }
        }
        if let Some((name, v)) = setting("SF_NVTX_STAGES") {
            match nvtx_stages::parse_stage_list(&v, &cfg.nvtx_step) {
                Ok(stages) => cfg.nvtx_stages = stages,
                Err(why) => warnings.push(format!("{name}={v:?}: {why}; using the default stages only")),
            }
        }
        if let Some((_, v)) = setting("SF_CHAIN_PROFILER") {
            cfg.chain_profiler = Some(PathBuf::from(v));
        }
        if let Some((name, v)) = setting("SF_PROFILER_KERNEL_CH") {
            cfg.profiler_kernel_ch = parse_bool(&name, &v, &mut warnings).unwrap_or(false);
        }
        if let Some((name, v)) = setting("SF_KERNEL_WINDOW_MS") {
            match v.parse::<u64>() {
                Ok(n) if (200..=4000).contains(&n) => cfg.kernel_window_ms = n,
                _ => warnings
                    .push(format!("{name}={v:?} is not a window from 200 to 4000 ms; using {}", cfg.kernel_window_ms)),
            }
        }
        parse_net_keys(&mut cfg, &setting, &mut warnings);
        parse_rdma_keys(&mut cfg, &setting, &mut warnings);
        parse_cupti_keys(&mut cfg.cupti, &setting, &mut warnings);
        (cfg, warnings)
    }

    pub fn from_env() -> (Config, Vec<String>) {
        // SAFETY: getuid has no preconditions and cannot fail.
        let uid = unsafe { libc::getuid() };
        Config::parse(uid, |name| std::env::var(name).ok())
    }
}

/// The CUDA door's keys (README, CUDA kernel activity).
fn parse_cupti_keys(
    cfg: &mut CuptiConfig,
    setting: &dyn Fn(&str) -> Option<(String, String)>,
    warnings: &mut Vec<String>,
) {
    if let Some((name, v)) = setting("SF_CUPTI") {
        match flag(&v) {
            Some(on) => cfg.enabled = on,
            None => warnings.push(format!("{name}={v:?} is not 0/1/true/false/yes/no/on/off; using 1")),
        }
    }
    if let Some((_, v)) = setting("SF_CUPTI_PATH") {
        cfg.path = Some(PathBuf::from(v));
    }
    let mut int = |key: &str, range: std::ops::RangeInclusive<u64>, what: &str, value: &mut u64| {
        let Some((name, v)) = setting(key) else { return };
        match v.parse::<u64>() {
            Ok(n) if range.contains(&n) => *value = n,
            _ => warnings.push(format!(
                "{name}={v:?} is not {what} from {} to {}; using {value}",
                range.start(),
                range.end()
            )),
        }
    };
    int("SF_CUPTI_FLUSH_MS", 10..=60_000, "a period in ms", &mut cfg.flush_ms);
    let (mut buffers, mut buffer_kb) = (cfg.buffers as u64, cfg.buffer_kb as u64);
    int("SF_CUPTI_BUFFERS", 2..=256, "a buffer count", &mut buffers);
    int("SF_CUPTI_BUFFER_KB", 4..=65_536, "a size in KiB", &mut buffer_kb);
    (cfg.buffers, cfg.buffer_kb) = (buffers as usize, buffer_kb as usize);
    if let Some((name, v)) = setting("SF_CUPTI_CORRELATION") {
        cfg.correlation = parse_bool(&name, &v, warnings).unwrap_or(false);
    }
}

/// The verbs door and port-counter keys (README, libibverbs fallback and RDMA port counters).
fn parse_rdma_keys(cfg: &mut Config, setting: &dyn Fn(&str) -> Option<(String, String)>, warnings: &mut Vec<String>) {
    if let Some((name, v)) = setting("SF_VERBS") {
        cfg.verbs = parse_bool(&name, &v, warnings).unwrap_or(false);
    }
    if let Some((_, v)) = setting("SF_IB_SYSFS_ROOT") {
        cfg.ib_sysfs_root = PathBuf::from(v);
    }
    if let Some((name, v)) = setting("SF_IB_SAMPLE_MS") {
        match v.parse::<u64>() {
            Ok(n) if n == 0 || (10..=600_000).contains(&n) => cfg.ib_sample_ms = n,
            _ => warnings.push(format!(
                "{name}={v:?} is not 0 (off) or a period from 10 to 600000 ms; using {}",
                cfg.ib_sample_ms
            )),
        }
    }
}

/// The RDMA work-request keys (README, RDMA work requests).
fn parse_net_keys(cfg: &mut Config, setting: &dyn Fn(&str) -> Option<(String, String)>, warnings: &mut Vec<String>) {
    if let Some((name, v)) = setting("SF_NET_RAW") {
        cfg.net_raw = parse_bool(&name, &v, warnings).unwrap_or(false);
    }
    let mut int = |key: &str, range: std::ops::RangeInclusive<u64>, what: &str, value: &mut u64| {
        if let Some((name, v)) = setting(key) {
            match v.parse::<u64>() {
                Ok(n) if range.contains(&n) => *value = n,
                _ => warnings.push(format!(
                    "{name}={v:?} is not {what} from {} to {}; using {value}",
                    range.start(),
                    range.end()
                )),
            }
        }
    };
    int("SF_NET_SAMPLE_MS", 10..=600_000, "a period in ms", &mut cfg.net_sample_ms);
    int("SF_WR_TIMEOUT_MS", 1..=3_600_000, "a timeout in ms", &mut cfg.wr_timeout_ms);
    let mut window = cfg.wr_window as u64;
    int("SF_WR_WINDOW", 2..=super::work_requests::WINDOW_MAX as u64, "a window length", &mut window);
    cfg.wr_window = window as usize;
    if let Some((name, v)) = setting("SF_WR_DEGRADED") {
        match v.parse::<f64>() {
            Ok(f) if (0.01..=0.99).contains(&f) => cfg.wr_degraded = f,
            _ => warnings.push(format!("{name}={v:?} is not a fraction from 0.01 to 0.99; using {}", cfg.wr_degraded)),
        }
    }
}

fn parse_bool(name: &str, v: &str, warnings: &mut Vec<String>) -> Option<bool> {
    let parsed = flag(v);
    if parsed.is_none() {
        warnings.push(format!("{name}={v:?} is not 0/1/true/false/yes/no/on/off; using 0"));
    }
    parsed
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

    fn parse(pairs: &[(&str, &str)]) -> (Config, Vec<String>) {
        let env: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::parse(1000, |k| env.get(k).cloned())
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
    fn work_request_settings() {
        let (cfg, warnings) = parse(&[
            ("SF_NET_RAW", "1"),
            ("SF_NET_SAMPLE_MS", "100"),
            ("SF_WR_WINDOW", "16"),
            ("SF_WR_TIMEOUT_MS", "200"),
            ("SF_WR_DEGRADED", "0.3"),
        ]);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert!(cfg.net_raw);
        assert_eq!((cfg.net_sample_ms, cfg.wr_window, cfg.wr_timeout_ms, cfg.wr_degraded), (100, 16, 200, 0.3));
        let (cfg, warnings) = parse(&[
            ("SF_NET_SAMPLE_MS", "0"),
            ("SF_WR_WINDOW", "1000"),
            ("SF_WR_TIMEOUT_MS", "soon"),
            ("SF_WR_DEGRADED", "1.5"),
        ]);
        assert_eq!(warnings.len(), 4, "{warnings:?}");
        assert!(warnings[1].starts_with("SF_WR_TIMEOUT_MS"), "{warnings:?}");
        assert_eq!(cfg, Config::defaults_for_uid(1000));
    }

    #[test]
    fn rdma_keys() {
        let (cfg, warnings) = parse(&[("SF_VERBS", "1"), ("SF_IB_SYSFS_ROOT", "/tmp/ib"), ("SF_IB_SAMPLE_MS", "0")]);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!((cfg.verbs, cfg.ib_sysfs_root.to_str(), cfg.ib_sample_ms), (true, Some("/tmp/ib"), 0));
        let (cfg, warnings) = parse(&[("SF_VERBS", "sometimes"), ("SF_IB_SAMPLE_MS", "5")]);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].starts_with("SF_VERBS") && warnings[1].starts_with("SF_IB_SAMPLE_MS"), "{warnings:?}");
        assert_eq!((cfg.verbs, cfg.ib_sample_ms), (false, 1000));
    }

    #[test]
    fn cupti_settings() {
        let (cfg, warnings) = parse(&[
            ("SF_CUPTI", "off"),
            ("SF_CUPTI_PATH", "/opt/cuda/extras/CUPTI/lib64/libcupti.so.12"),
            ("SF_CUPTI_FLUSH_MS", "100"),
            ("SF_CUPTI_BUFFERS", "4"),
            ("SF_CUPTI_BUFFER_KB", "64"),
            ("SF_CUPTI_CORRELATION", "1"),
        ]);
        assert!(warnings.is_empty(), "{warnings:?}");
        let path = Some(PathBuf::from("/opt/cuda/extras/CUPTI/lib64/libcupti.so.12"));
        let expected =
            CuptiConfig { enabled: false, path, flush_ms: 100, buffers: 4, buffer_kb: 64, correlation: true };
        assert_eq!(cfg.cupti, expected);

        let (cfg, warnings) = parse(&[
            ("SF_CUPTI", "maybe"),
            ("SF_CUPTI_FLUSH_MS", "1"),
            ("SF_CUPTI_BUFFERS", "100000"),
            ("SF_CUPTI_BUFFER_KB", "big"),
            ("SF_CUPTI_CORRELATION", "2"),
        ]);
        assert_eq!(warnings.len(), 5, "{warnings:?}");
        assert!(warnings[0].starts_with("SF_CUPTI=") && warnings[0].ends_with("using 1"), "{warnings:?}");
        assert_eq!(cfg.cupti, CuptiConfig::default(), "each bad value keeps its default");
    }

    #[test]
    fn job_ids_cannot_escape_the_log_root() {
        assert_eq!(sanitize_job_id(".."), None);
        assert_eq!(sanitize_job_id("../etc").as_deref(), Some(".._etc"));
        assert_eq!(sanitize_job_id(&"x".repeat(100)).map(|s| s.len()), Some(63));
    }
}
