//! The CUDA door's keys (docs/kernels.md, CUDA kernel activity).

use super::settings::Settings;
use crate::core::kernels::cupti::config::CuptiConfig;

pub(super) fn parse_cupti_keys(cfg: &mut CuptiConfig, s: &mut Settings) {
    s.flag("SF_CUPTI", &mut cfg.enabled);
    if let Some(path) = s.path("SF_CUPTI_PATH") {
        cfg.path = Some(path);
    }
    s.bounded("SF_CUPTI_FLUSH_MS", "a period in ms", 10..=60_000, &mut cfg.flush_ms);
    s.bounded("SF_CUPTI_BUFFERS", "a buffer count", 2..=256, &mut cfg.buffers);
    s.bounded("SF_CUPTI_BUFFER_KB", "a size in KiB", 4..=65_536, &mut cfg.buffer_kb);
    s.flag("SF_CUPTI_CORRELATION", &mut cfg.correlation);
}

#[cfg(test)]
mod tests {
    use super::super::tests::parse;
    use super::*;
    use std::path::PathBuf;

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
}
