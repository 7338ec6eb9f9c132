//! RDMA port counters of one rank log, summarised per (device, port, counter): the first
//! and last value the sysfs sampler recorded, the increase in between (resets included),
//! and its rate. Pure: a function of the `port_counter_name` and `port_counters` records.
//!
//! The sampler writes a value only when it changed, so the last change is the last time
//! the log knows a value for sure; the rate is the increase over the span from the first
//! value to the last change (the counter's rate while it moved). `port_xmit_data` and
//! `port_rcv_data` count 4-byte words (IBA PortCounters), so their byte rate is four times
//! the rate.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::core::log::records::{CounterState, RecordBody};

/// Counters the IBA defines in units of 4 octets.
const WORD_COUNTERS: [&str; 2] = ["port_xmit_data", "port_rcv_data"];

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PortCounterSummary {
    pub device: String,
    pub port: u16,
    pub counter: String,
    /// From `hw_counters/` rather than `counters/`.
    pub hw: bool,
    /// The counter file's last known state.
    pub state: CounterState,
    /// Values recorded (the first, then one per change).
    pub samples: u32,
    pub first: u64,
    pub last: u64,
    /// Increase from the first value to the last (a reset counts what came after it).
    pub delta: u64,
    pub first_ns: u64,
    pub last_change_ns: u64,
    /// `delta` per second between the first value and the last change; 0 when it never moved.
    pub rate_per_s: f64,
    /// For `port_xmit_data` / `port_rcv_data`: bytes per second (4 × rate).
    pub bytes_per_s: Option<f64>,
}

/// Every counter the log names, in (device, port, counter) order.
pub fn summarize<'a>(bodies: impl IntoIterator<Item = &'a RecordBody>) -> Vec<PortCounterSummary> {
    let mut by_id: BTreeMap<u16, PortCounterSummary> = BTreeMap::new();
    for body in bodies {
        match body {
            RecordBody::PortCounterName(n) => {
                let entry = by_id.entry(n.name_id).or_insert_with(|| PortCounterSummary {
                    device: n.device.to_string_lossy(),
                    port: n.port,
                    counter: n.counter.to_string_lossy(),
                    hw: n.hw,
                    state: n.state,
                    samples: 0,
                    first: 0,
                    last: 0,
                    delta: 0,
                    first_ns: 0,
                    last_change_ns: 0,
                    rate_per_s: 0.0,
                    bytes_per_s: None,
                });
                entry.state = n.state;
            }
            RecordBody::PortCounters(p) => {
                for v in p.values() {
                    // A value before its name can only follow a wrapped log: its name was lost.
                    let Some(entry) = by_id.get_mut(&v.name_id) else { continue };
                    if entry.samples == 0 {
                        (entry.first, entry.first_ns) = (v.value, p.t_ns);
                    } else {
                        entry.delta += v.delta;
                    }
                    (entry.last, entry.last_change_ns) = (v.value, p.t_ns);
                    entry.samples += 1;
                }
            }
            _ => {}
        }
    }
    let mut out: Vec<PortCounterSummary> = by_id.into_values().collect();
    for s in &mut out {
        let span_s = s.last_change_ns.saturating_sub(s.first_ns) as f64 / 1e9;
        s.rate_per_s = if span_s > 0.0 { s.delta as f64 / span_s } else { 0.0 };
        s.bytes_per_s = WORD_COUNTERS.contains(&s.counter.as_str()).then_some(s.rate_per_s * 4.0);
    }
    out.sort_by(|a, b| (&a.device, a.port, a.hw, &a.counter).cmp(&(&b.device, b.port, b.hw, &b.counter)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::log::records::{CounterValue, PortCounterName, PortCounters, Text};

    fn name(id: u16, counter: &str, state: CounterState) -> RecordBody {
        RecordBody::PortCounterName(PortCounterName {
            t_ns: 0,
            name_id: id,
            port: 1,
            hw: false,
            state,
            device: Text::new(b"mlx5_0"),
            counter: Text::new(counter.as_bytes()),
        })
    }

    fn values(t_ns: u64, v: &[(u16, u64, u64)]) -> RecordBody {
        let mut p = PortCounters {
            t_ns,
            interval_ns: 0,
            over_cap: 0,
            count: v.len() as u8,
            values: [CounterValue::default(); PortCounters::CAPACITY],
        };
        for (slot, &(name_id, value, delta)) in p.values.iter_mut().zip(v) {
            *slot = CounterValue { name_id, value, delta };
        }
        RecordBody::PortCounters(p)
    }

    #[test]
    fn first_last_delta_and_rate_in_words_and_bytes() {
        let records = [
            name(0, "port_xmit_data", CounterState::Present),
            name(1, "symbol_error", CounterState::Present),
            values(1_000_000_000, &[(0, 100, 0), (1, 5, 0)]),
            values(2_000_000_000, &[(0, 600, 500)]),
            values(3_000_000_000, &[(0, 50, 50)]), // reset
            name(1, "symbol_error", CounterState::Gone),
        ];
        let s = summarize(&records);
        assert_eq!(s.len(), 2);
        let xmit = &s[0];
        assert_eq!((xmit.first, xmit.last, xmit.delta, xmit.samples), (100, 50, 550, 3));
        assert_eq!(xmit.rate_per_s, 275.0);
        assert_eq!(xmit.bytes_per_s, Some(1100.0));
        let errors = &s[1];
        assert_eq!(
            (errors.delta, errors.rate_per_s, errors.bytes_per_s, errors.state),
            (0, 0.0, None, CounterState::Gone)
        );
    }
}
