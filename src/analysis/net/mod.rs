//! Network evidence judged across ranks: port-counter deltas.

pub mod ports;
