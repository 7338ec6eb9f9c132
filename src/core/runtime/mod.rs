//! The top of core: starts the recording on the first call (config, rank identity, where
//! the log goes), drives every family from the collector thread, and stops at exit within
//! a bound. Imported only by doors and `sf`; nothing in core imports it. Everything slow
//! happens here, in the collector, never on an application thread.

pub mod collector;
pub mod config;
pub mod declared;
pub mod identity;
pub mod opened_through;
pub mod place;
pub mod process_end;
pub mod retention;
pub mod start;
