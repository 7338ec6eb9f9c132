//! NCCL communication evidence: the tracer that records each intercepted call and
//! communicator on the hot path (and queues what arrives while the runtime starts), and
//! communicator ids that every rank agrees on. Imports
//! live, inject, log and record; steps and runtime may import it. Never calls NCCL itself
//! and never blocks a call it records.

pub mod comm_identity;
pub mod early;
pub mod python_calls;
pub mod tracer;
