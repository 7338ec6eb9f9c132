//! The CUDA injection door (CUDA_INJECTION64_PATH), which subscribes to CUPTI.

pub mod cuda;
