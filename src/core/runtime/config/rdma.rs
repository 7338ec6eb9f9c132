//! The RDMA keys: work-request accounting (docs/network.md, RDMA work requests), the verbs door and
//! the port-counter sampler (docs/network.md, libibverbs fallback and RDMA port counters).

use super::settings::Settings;
use super::Config;
use crate::core::net::work_requests::WINDOW_MAX;

pub(super) fn parse_work_request_keys(cfg: &mut Config, s: &mut Settings) {
    s.flag("SF_NET_RAW", &mut cfg.net_raw);
    s.bounded("SF_NET_SAMPLE_MS", "a period in ms", 10..=600_000, &mut cfg.net_sample_ms);
    s.bounded("SF_WR_TIMEOUT_MS", "a timeout in ms", 1..=3_600_000, &mut cfg.wr_timeout_ms);
    s.bounded("SF_WR_WINDOW", "a window length", 2..=WINDOW_MAX, &mut cfg.wr_window);
    s.bounded("SF_WR_DEGRADED", "a fraction", 0.01..=0.99, &mut cfg.wr_degraded);
}

pub(super) fn parse_verbs_keys(cfg: &mut Config, s: &mut Settings) {
    s.flag("SF_VERBS", &mut cfg.verbs);
    if let Some(root) = s.path("SF_IB_SYSFS_ROOT") {
        cfg.ib_sysfs_root = root;
    }
    let off_or_period = |n: &u64| *n == 0 || (10..=600_000).contains(n);
    s.checked("SF_IB_SAMPLE_MS", "0 (off) or a period in ms from 10 to 600000", off_or_period, &mut cfg.ib_sample_ms);
}

#[cfg(test)]
mod tests {
    use super::super::tests::parse;
    use super::*;

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
}
