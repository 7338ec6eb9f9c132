//! The processing path of the CUDA door, run by the collector thread each round: flush
//! CUPTI every `SF_CUPTI_FLUSH_MS`, parse the buffers CUPTI completed, give them back to
//! the pool, and write a `cupti_status` record when the door's state or a drop count
//! changes, and once more with the final counts at exit. Nothing here runs in a forked child or from a CUPTI callback.

use std::ptr::null_mut;
use std::sync::atomic::Ordering;

use super::config::CuptiConfig;
use super::parse::{parse_buffer, ParseStats, TimeBase};
use super::{session, state, Session, RESULT, VERSION};
use crate::core::kernels::kernel_activity::Activity;
use crate::core::live::runtime;
use crate::core::log::records::{CuptiState, CuptiStatus, RecordBody};
use crate::core::log::writer::LogWriter;
use crate::core::record::clock::monotonic_ns;

/// Kernel names longer than this are cut (C++ templates can run to kilobytes).
const NAME_MAX: usize = 4096;

#[derive(Default)]
pub struct CuptiDrain {
    /// (state, dropped by CUPTI, pool refusals) last written.
    written: Option<(CuptiState, u64, u64)>,
    /// The exit flush ran: the next round writes the final counts whatever changed.
    closing: bool,
    last_flush_ns: u64,
    time: Option<TimeBase>,
    dropped_by_cupti: u64,
    buffers: u64,
    parsed: ParseStats,
}

impl CuptiDrain {
    /// One collector round, CUPTI flushed every `config.flush_ms`. `sink` gets every
    /// activity, with a kernel's name bytes valid only during the call.
    ///
    /// `force`: the flush this round hands over every buffer, also those holding records
    /// of kernels still queued or running. A plain flush keeps back any buffer with such a
    /// record, so while a kernel runs forever, no completion behind it in its buffer ever
    /// arrives and the device's state stays as it was before (seen on an H200 with CUPTI
    /// 13.0: a stalled rank's completions stopped for the whole stall). The records
    /// handed over unfinished come without an end and are never delivered again: they
    /// are counted in `skipped`, and their launches stay unfinished until a later
    /// completion on their stream retires them. Returns when the forced flush was made,
    /// if one was (every record up to then was handed over and parsed).
    pub fn round(
        &mut self,
        config: &CuptiConfig,
        writer: &mut LogWriter,
        force: bool,
        sink: &mut dyn FnMut(&Activity, Option<&[u8]>),
    ) -> Option<u64> {
        let state = state()?;
        let session = session();
        let mut forced = None;
        if let Some(session) = session.filter(|_| state == CuptiState::Enabled && runtime::is_active()) {
            forced = force.then(monotonic_ns);
            self.collect(config.flush_ms, force, session, sink);
        }
        let refusals = session.map_or(0, |s| s.pool.refused());
        let now = (state, self.dropped_by_cupti, refusals);
        if self.written != Some(now) || std::mem::take(&mut self.closing) {
            writer.append(&RecordBody::CuptiStatus(self.status(state, session, refusals, config.flush_ms)));
            self.written = Some(now);
        }
        forced
    }

    /// At exit, before the last round: CUPTI hands over every buffer, even those with
    /// records still in flight. Never in a forked child (the runtime is off there).
    pub fn flush_at_exit(&mut self) {
        if let Some(session) = session().filter(|_| state() == Some(CuptiState::Enabled) && runtime::is_active()) {
            let _ = session.cupti.flush_all(true);
            self.last_flush_ns = monotonic_ns();
            self.closing = true;
        }
    }

    fn collect(
        &mut self,
        flush_ms: u64,
        force: bool,
        session: &Session,
        sink: &mut dyn FnMut(&Activity, Option<&[u8]>),
    ) {
        let now = monotonic_ns();
        if force || self.time.is_none() || now.saturating_sub(self.last_flush_ns) >= flush_ms * 1_000_000 {
            self.time = time_base(session).or(self.time);
            let _ = session.cupti.flush_all(force);
            self.last_flush_ns = now;
        }
        let time = self.time.unwrap_or(TimeBase { offset_ns: 0 });
        while let Some(filled) = session.pool.next_filled() {
            let start = session.pool.start(filled.index);
            // SAFETY: popped just now and given back only after the parse below.
            let bytes = unsafe { session.pool.contents(&filled) };
            let mut current = null_mut();
            let walk = || {
                // SAFETY: the buffer is completed and ours until given back; `current` is
                // null or the record the previous call returned.
                current = unsafe { session.cupti.next_record(start, filled.valid, current) }?;
                Some(current as usize - start as usize)
            };
            // SAFETY: a kernel record's name pointer stays valid until its buffer is
            // given back, which happens after the parse.
            let stats = parse_buffer(bytes, walk, time, |pointer| unsafe { kernel_name(pointer) }, sink);
            session.pool.give_back(filled.index);
            self.buffers += 1;
            self.parsed.delivered += stats.delivered;
            self.parsed.unknown += stats.unknown;
            self.parsed.rejected += stats.rejected;
        }
        if let Some(dropped) = session.cupti.dropped_records() {
            self.dropped_by_cupti += dropped;
        }
    }

    fn status(&self, state: CuptiState, session: Option<&Session>, refusals: u64, flush_ms: u64) -> CuptiStatus {
        CuptiStatus {
            t_ns: monotonic_ns(),
            state,
            cupti_version: VERSION.load(Ordering::Relaxed),
            cupti_result: RESULT.load(Ordering::Relaxed),
            dropped_by_cupti: self.dropped_by_cupti,
            pool_refusals: refusals,
            buffers: self.buffers,
            records: self.parsed.delivered,
            skipped: self.parsed.unknown + self.parsed.rejected,
            pool_buffers: session.map_or(0, |s| s.pool.count() as u32),
            buffer_bytes: session.map_or(0, |s| s.pool.buffer_bytes() as u32),
            correlation: session.is_some_and(|s| s.correlation),
            flush_ms: u32::try_from(flush_ms).unwrap_or(u32::MAX),
        }
    }
}

/// CUPTI's clock against `CLOCK_MONOTONIC`: the CUPTI reading bracketed by two monotonic
/// ones, the narrowest bracket of a few kept, its midpoint taken as the same instant.
fn time_base(session: &Session) -> Option<TimeBase> {
    let mut best: Option<(u64, i64)> = None;
    for _ in 0..8 {
        let before = monotonic_ns();
        let cupti = session.cupti.timestamp()?;
        let after = monotonic_ns();
        let width = after - before;
        if best.is_none_or(|(w, _)| width < w) {
            best = Some((width, (before + width / 2) as i64 - cupti as i64));
        }
    }
    best.map(|(_, offset_ns)| TimeBase { offset_ns })
}

/// The NUL-terminated name at `pointer`, at most `NAME_MAX` bytes of it.
///
/// # Safety
/// `pointer` is a kernel record's name pointer whose buffer has not been given back.
unsafe fn kernel_name<'a>(pointer: u64) -> Option<&'a [u8]> {
    let start = pointer as *const u8;
    let mut len = 0;
    // SAFETY: CUPTI's name is NUL-terminated; reading stops at the NUL or the cap.
    while len < NAME_MAX && unsafe { *start.add(len) } != 0 {
        len += 1;
    }
    // SAFETY: the `len` bytes just read.
    Some(unsafe { std::slice::from_raw_parts(start, len) })
}
