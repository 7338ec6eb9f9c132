//! What the CUDA door is told to do: the settings `open` and the collector's drain read,
//! parsed from the environment by the runtime's config (docs/kernels.md, CUDA kernel activity).

use std::path::PathBuf;

/// The CUDA door's settings (docs/kernels.md, CUDA kernel activity).
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
