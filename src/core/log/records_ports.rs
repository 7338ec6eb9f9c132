//! Record layouts of the RDMA port-counter sampler (kinds 20, 21) and the verbs door's
//! device states (kind 22). The collector makes all three, so times are already
//! `CLOCK_MONOTONIC` nanoseconds.
//!
//! A counter's name is written once (`port_counter_name`, also again whenever the file
//! disappears, turns unreadable or comes back) and its values by id, five to a record, only
//! when they changed: a quiet fabric writes nothing after the first sample.

use serde::{Serialize, Serializer};

use super::records::{Decoder, Encoder};

/// What became of a device context the door saw open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum DeviceState {
    /// Its work requests are counted.
    Counting = 1,
    /// Its layout did not look like rdma-core's: left alone.
    Refused = 2,
    /// Every context slot was taken: left alone.
    NoSlot = 3,
    /// Closed by the application.
    Closed = 4,
}

impl DeviceState {
    pub fn from_u8(raw: u8) -> Option<DeviceState> {
        [Self::Counting, Self::Refused, Self::NoSlot, Self::Closed].into_iter().find(|s| *s as u8 == raw)
    }

    pub fn name(self) -> &'static str {
        match self {
            DeviceState::Counting => "counting",
            DeviceState::Refused => "refused",
            DeviceState::NoSlot => "no_slot",
            DeviceState::Closed => "closed",
        }
    }
}

/// A short string kept inline in a record; serialized as a string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Text<const N: usize> {
    len: u8,
    bytes: [u8; N],
}

impl<const N: usize> Text<N> {
    /// The first N bytes of `s`.
    pub fn new(s: &[u8]) -> Text<N> {
        let len = s.len().min(N);
        let mut bytes = [0; N];
        bytes[..len].copy_from_slice(&s[..len]);
        Text { len: len as u8, bytes }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    pub fn to_string_lossy(&self) -> String {
        String::from_utf8_lossy(self.as_bytes()).into_owned()
    }

    pub(super) fn encode(&self, w: &mut Encoder) {
        w.short_bytes(self.as_bytes());
    }

    pub(super) fn decode(r: &mut Decoder) -> Option<Text<N>> {
        r.short_bytes().map(|(len, bytes)| Text { len, bytes })
    }
}

impl<const N: usize> Serialize for Text<N> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string_lossy())
    }
}

/// What the sampler found at a counter's path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum CounterState {
    /// A number was read.
    Present = 1,
    /// The file is gone (the device or port went away).
    Gone = 2,
    /// The file is there but cannot be read as a number.
    Unreadable = 3,
}

impl CounterState {
    fn from_u8(raw: u8) -> Option<CounterState> {
        [Self::Present, Self::Gone, Self::Unreadable].into_iter().find(|s| *s as u8 == raw)
    }
}

/// Kind 20: the device, port and file name a counter id stands for, and its state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PortCounterName {
    pub t_ns: u64,
    pub name_id: u16,
    pub port: u16,
    /// From `hw_counters/` (provider-specific) rather than `counters/` (IBA PortCounters).
    pub hw: bool,
    pub state: CounterState,
    pub device: Text<32>,
    pub counter: Text<64>,
}

pub(super) fn encode_port_counter_name(n: &PortCounterName, w: &mut Encoder) {
    w.u64(n.t_ns);
    w.u16(n.name_id);
    w.u16(n.port);
    w.u8(n.hw as u8);
    w.u8(n.state as u8);
    n.device.encode(w);
    n.counter.encode(w);
}

pub(super) fn decode_port_counter_name(r: &mut Decoder) -> Option<PortCounterName> {
    Some(PortCounterName {
        t_ns: r.u64()?,
        name_id: r.u16()?,
        port: r.u16()?,
        hw: r.u8()? != 0,
        state: CounterState::from_u8(r.u8()?)?,
        device: Text::decode(r)?,
        counter: Text::decode(r)?,
    })
}

/// One counter's value in a `port_counters` record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CounterValue {
    pub name_id: u16,
    pub value: u64,
    /// Change since the counter's previous value (0 in the first sample; the new value
    /// after a reset, when the counter went down).
    pub delta: u64,
}

/// Kind 21: up to `PortCounters::CAPACITY` counters that changed in one sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortCounters {
    pub t_ns: u64,
    /// Time since the previous sample; 0 in the first.
    pub interval_ns: u64,
    /// Counter files left out because the sampler's tables were full (cumulative).
    pub over_cap: u16,
    pub count: u8,
    pub values: [CounterValue; PortCounters::CAPACITY],
}

impl PortCounters {
    /// 8 + 8 + 2 + 1 header bytes, then 18 per counter, in 112.
    pub const CAPACITY: usize = 5;

    pub fn values(&self) -> &[CounterValue] {
        &self.values[..self.count as usize]
    }
}

impl Serialize for PortCounters {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("PortCounters", 4)?;
        st.serialize_field("t_ns", &self.t_ns)?;
        st.serialize_field("interval_ns", &self.interval_ns)?;
        st.serialize_field("over_cap", &self.over_cap)?;
        st.serialize_field("values", self.values())?;
        st.end()
    }
}

pub(super) fn encode_port_counters(p: &PortCounters, w: &mut Encoder) {
    w.u64(p.t_ns);
    w.u64(p.interval_ns);
    w.u16(p.over_cap);
    w.u8(p.count);
    for v in p.values() {
        w.u16(v.name_id);
        w.u64(v.value);
        w.u64(v.delta);
    }
}

pub(super) fn decode_port_counters(r: &mut Decoder) -> Option<PortCounters> {
    let (t_ns, interval_ns, over_cap, count) = (r.u64()?, r.u64()?, r.u16()?, r.u8()?);
    if count as usize > PortCounters::CAPACITY {
        return None;
    }
    let mut values = [CounterValue::default(); PortCounters::CAPACITY];
    for v in &mut values[..count as usize] {
        *v = CounterValue { name_id: r.u16()?, value: r.u64()?, delta: r.u64()? };
    }
    Some(PortCounters { t_ns, interval_ns, over_cap, count, values })
}

/// Kind 22: a device context the verbs door (SF_VERBS=1) saw change state. `device` is the
/// id its work requests carry (`QpKey::device` with source verbs); -1 for one it left alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct VerbsDevice {
    pub t_ns: u64,
    pub device: i32,
    #[serde(serialize_with = "state_name")]
    pub state: DeviceState,
    /// Queue pairs that found the door's QP table full so far (their unsignaled sends'
    /// bytes are not folded).
    pub qp_table_full: u64,
    /// Device notes that did not fit the door's note list since the last record.
    pub notes_lost: u64,
    pub name: Text<64>,
}

fn state_name<S: Serializer>(state: &DeviceState, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(state.name())
}

pub(super) fn encode_verbs_device(d: &VerbsDevice, w: &mut Encoder) {
    w.u64(d.t_ns);
    w.u32(d.device as u32);
    w.u8(d.state as u8);
    w.u64(d.qp_table_full);
    w.u64(d.notes_lost);
    d.name.encode(w);
}

pub(super) fn decode_verbs_device(r: &mut Decoder) -> Option<VerbsDevice> {
    Some(VerbsDevice {
        t_ns: r.u64()?,
        device: r.u32()? as i32,
        state: DeviceState::from_u8(r.u8()?)?,
        qp_table_full: r.u64()?,
        notes_lost: r.u64()?,
        name: Text::decode(r)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::log::format::PAYLOAD_CAPACITY;
    use crate::core::log::records::RecordBody;

    fn round_trip(body: RecordBody) {
        let mut payload = [0u8; PAYLOAD_CAPACITY];
        let len = body.encode(&mut payload);
        assert_eq!(RecordBody::decode(body.kind(), &payload[..len]), Some(body));
    }

    #[test]
    fn the_longest_records_fit_and_round_trip() {
        round_trip(RecordBody::PortCounterName(PortCounterName {
            t_ns: 1,
            name_id: 1023,
            port: 2,
            hw: true,
            state: CounterState::Unreadable,
            device: Text::new(&[b'd'; 40]),
            counter: Text::new(&[b'c'; 80]),
        }));
        let values = [CounterValue { name_id: 7, value: u64::MAX, delta: u64::MAX - 1 }; PortCounters::CAPACITY];
        round_trip(RecordBody::PortCounters(PortCounters {
            t_ns: 5,
            interval_ns: 1_000_000_000,
            over_cap: 3,
            count: PortCounters::CAPACITY as u8,
            values,
        }));
        round_trip(RecordBody::VerbsDevice(VerbsDevice {
            t_ns: 9,
            device: -1,
            state: DeviceState::Refused,
            qp_table_full: 2,
            notes_lost: 1,
            name: Text::new(&[b'n'; 70]),
        }));
    }

    #[test]
    fn names_are_truncated_not_refused() {
        let text: Text<32> = Text::new(&[b'x'; 40]);
        assert_eq!(text.as_bytes().len(), 32);
        let json = serde_json::to_string(&Text::<8>::new(b"mlx5_0")).unwrap();
        assert_eq!(json, "\"mlx5_0\"");
    }
}
