//! What `sf hang` keeps of a rank beside the analysis input ([`Extra`]): its accessors,
//! and what the metrics of `sf exporter` fill it with (`sf hang --prometheus`).

use crate::analysis::blame::waits_from::Evidence;
use crate::analysis::hang::device::DeviceView;
use crate::analysis::hang::kernel_ch::KernelChView;
use crate::analysis::log::liveness::Liveness;

use super::Extra;

impl Extra {
    /// The device's view of the rank, when its log had one.
    pub(crate) fn device(&self) -> Option<&DeviceView> {
        self.device.as_ref()
    }

    /// The device's view the exporters' metrics tell (`sf hang --prometheus`).
    pub(crate) fn set_device(&mut self, device: DeviceView) {
        self.device = Some(device);
    }

    /// What the profiler door's KernelCh words say of the device.
    pub(crate) fn kernel_ch(&self) -> &KernelChView {
        &self.kernel_ch
    }

    /// The KernelCh words the exporters' metrics tell (`sf hang --prometheus`).
    pub(crate) fn set_kernel_ch(&mut self, view: KernelChView) {
        self.kernel_ch = view;
    }

    /// What the metrics of `sf exporter` tell beside the analysis input (no injections,
    /// hang evidence or step: those are records, which metrics do not carry).
    pub(crate) fn from_metrics(
        host: &str,
        pid: u32,
        file: String,
        liveness: Liveness,
        heartbeat_age_ns: Option<u64>,
    ) -> Extra {
        Extra {
            host: host.to_string(),
            pid,
            file,
            step: None,
            liveness,
            heartbeat_age_ns,
            injections: Vec::new(),
            hang_evidence: Vec::new(),
            snapshot_wall: None,
            profiler: Vec::new(),
            end: None,
            last_heard_wall_ns: 0,
            device: None,
            // Until the metrics' KernelCh words are set: no rank, nothing judged.
            kernel_ch: KernelChView { rank: -1, now_ns: None, started: None, stopped: None },
            evidence: Evidence::default(),
            progress: None,
            process_groups: Vec::new(),
            stacks: None,
            pipeline: None,
        }
    }
}
