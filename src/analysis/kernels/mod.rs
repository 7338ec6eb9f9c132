//! Kernel-duration statistics (ARGUS §5.2 and §6.2, L3): per (kernel, stream) series, KDE
//! valley clustering compresses a window of launches into a few clusters (count, p50,
//! p99); across ranks of one role, each rank's clusters become a log-normal mixture CDF,
//! pairwise Wasserstein-1 distances form a matrix, and an IQR fence on each rank's mean
//! distance names the anomalous ranks.

pub mod cross_rank;
pub mod fence;
pub mod mixture;
pub mod wasserstein;
