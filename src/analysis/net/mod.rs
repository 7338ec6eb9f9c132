//! Network evidence judged across ranks: port-counter deltas, QPs against their peers.

pub mod peers;
pub mod ports;
