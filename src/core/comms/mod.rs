//! NCCL communication evidence: the call record built on the hot path, communicator ids
//! that every rank agrees on, the live communicator table in the log, and fault injection.
//! Never calls NCCL itself and never blocks a call it records.

pub mod comm_identity;
pub mod comm_table;
pub mod inject;
pub mod nccl_op;
