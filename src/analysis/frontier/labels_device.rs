//! Table 12's device-evidence labels, from the forward stage's device time (the CUDA door's
//! `stage_device` records: kernels the stage launched, their GPU busy time, and the part of
//! it that ran after the stage ended on the host). The paper samples CUDA events around the
//! forward/loss region; per-stage kernel time is the same evidence, sampled every step.
//!
//! Which ranks are judged: the forward stage's leader ranks (those credited with its
//! frontier advances) for the forward stage's own labels, the top-1 stage's leader ranks
//! for spillover (the ranks whose host saw the exposed cost), all ranks when a stage has
//! no leader. Over those ranks and the steps the door sampled, ρ = device forward time /
//! CPU-wall forward time, σ = spill / device forward time.
//!
//! - `forward_event_scope_limited`: device evidence exists but the forward stage was sampled
//!   in under `event_ready_ratio` (Table 13: 0.8) of the judged rank-steps; no other device
//!   label then.
//! - `forward_device_supported`: forward is in the frontier's top-2 and ρ ≥ `device_high`.
//! - `forward_host_overhead_suspected`: forward is in the top-2 and ρ < `device_low`: the
//!   host spends the forward time, the GPU does not.
//! - `forward_spillover_suspected`: the top-1 stage comes after forward, and on its leaders
//!   ρ ≥ `device_high` with σ ≥ `spill_high`: forward's GPU work is large and mostly ran
//!   after forward ended on the host, so its cost surfaced later.
//!
//! Every label needs `min_event_samples` (Table 13: 5) sampled forward stages. No device
//! evidence, or no forward stage in the schema: none of these labels.

use super::device::DeviceTotals;
use super::gates::Gates;
use super::labels::LabelKind;
use super::window::Window;

pub(super) fn device_labels(w: &Window, forward: Option<usize>, g: &Gates) -> Vec<(LabelKind, String)> {
    let (Some(f), Some(device), Some(routing)) = (forward, w.device.as_ref(), w.routing.as_ref()) else {
        return Vec::new();
    };
    let name = w.schema.name(f);
    let mut labels = Vec::new();
    let at_forward = device.stage(f, &w.leaders[f].ranks);
    if at_forward.samples < g.min_event_samples {
        return labels;
    }
    if at_forward.ready_ratio < g.event_ready_ratio {
        labels.push((
            LabelKind::ForwardEventScopeLimited,
            format!(
                "device time was sampled for {name} in {:.2} of the rank-steps (< {}): device labels withheld",
                at_forward.ready_ratio, g.event_ready_ratio
            ),
        ));
        return labels;
    }
    let rho = ratio(at_forward.device_s, at_forward.wall_s);
    if routing.top2.contains(&f) {
        if rho >= g.device_high {
            labels.push((
                LabelKind::ForwardDeviceSupported,
                format!(
                    "{name} is in the top-2 and its kernels kept the GPU busy {} x its CPU-wall time (>= {}) \
                     over {} sampled rank-steps",
                    times(rho),
                    g.device_high,
                    at_forward.samples
                ),
            ));
        } else if rho < g.device_low {
            labels.push((
                LabelKind::ForwardHostOverheadSuspected,
                format!(
                    "{name} is in the top-2 but its kernels kept the GPU busy only {} x its CPU-wall time (< {}) \
                     over {} sampled rank-steps: the host, not the device, spends the forward time",
                    times(rho),
                    g.device_low,
                    at_forward.samples
                ),
            ));
        }
    }
    if let Some(reason) = spillover(w, f, routing.top1, g, device.stage(f, &w.leaders[routing.top1].ranks)) {
        labels.push((LabelKind::ForwardSpilloverSuspected, reason));
    }
    labels
}

fn spillover(w: &Window, f: usize, top1: usize, g: &Gates, at: DeviceTotals) -> Option<String> {
    if top1 <= f || at.samples < g.min_event_samples || at.ready_ratio < g.event_ready_ratio {
        return None;
    }
    let (rho, sigma) = (ratio(at.device_s, at.wall_s), ratio(at.spill_s, at.device_s));
    if rho < g.device_high || sigma < g.spill_high {
        return None;
    }
    Some(format!(
        "{} leads, but on its leading ranks {}'s kernels took {} x its CPU-wall time (>= {}) and {:.2} of that \
         ran after it ended on the host (>= {}): forward device work surfacing later",
        w.schema.name(top1),
        w.schema.name(f),
        times(rho),
        g.device_high,
        sigma,
        g.spill_high
    ))
}

/// `a / b`, with a zero `b` meaning "all of nothing": infinite when `a` is positive.
fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else if a > 0.0 {
        f64::INFINITY
    } else {
        0.0
    }
}

fn times(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.2}")
    } else {
        "inf".to_string()
    }
}

#[cfg(test)]
#[path = "labels_device_tests.rs"]
mod tests;
