//! The running recording every hook shares: the `Runtime` (ring, log map, communicator and
//! stage tables, injector), the state machine that publishes it, and the events its ring
//! carries. Imported by the families and the runtime; imports only inject, log and record.
//! Never builds the runtime itself: `runtime::start` registers how, at load.

pub mod event;
pub mod runtime;
