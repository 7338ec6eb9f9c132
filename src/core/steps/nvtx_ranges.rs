//! NVTX ranges turned into step and stage markers, behind the NVTX door.
//!
//! `nvtxRangePop` names no range, so each thread keeps a small stack of what it opened, per
//! NVTX domain (each domain has its own thread range stack). `nvtxRangeStart` returns an id
//! that comes back in `nvtxRangeEnd`, so the id itself carries what the range was; strings
//! registered with `nvtxDomainRegisterString` likewise come back as handles that carry
//! their classification. Nothing here allocates or locks once [`install`] has run.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::core::record::once::LeakedOnce;
use crate::core::steps::markers;
use crate::core::steps::nvtx_stages::{RangeClass, StageNaming};

/// Set without a lock (see `core::record::once`).
static NAMING: LeakedOnce<StageNaming> = LeakedOnce::new();

/// Sets the naming convention (SF_NVTX_STEP, SF_NVTX_STAGES) once per process; later
/// NVTX modules attaching reuse it.
pub fn install(step: &str, stages: &[(String, String)]) {
    NAMING.get_or_init(|| StageNaming::new(step, stages));
}

/// `NVTX_NO_PUSH_POP_TRACKING`: the level is unknown (the stack overflowed).
pub const NO_TRACKING: i32 = -2;

/// A range's message, as the door decoded it.
#[derive(Clone, Copy, Debug)]
pub enum Message<'a> {
    Ascii(&'a [u8]),
    /// A handle from [`register_string`].
    Registered(usize),
    /// Wide strings, missing or unknown message types: never a step or stage.
    Ignored,
}

/// What a closing range must end, packed in a u16: 0 nothing, 1 the step, 2+i stage i.
type Code = u16;
const CODE_OTHER: Code = 0;
const CODE_STEP: Code = 1;

fn classify(message: Message) -> RangeClass {
    let Some(naming) = NAMING.get() else { return RangeClass::Other };
    match message {
        Message::Ascii(text) => naming.classify(text),
        Message::Registered(handle) => decode_string_handle(handle),
        Message::Ignored => RangeClass::Other,
    }
}

/// Whether an NVTX range has opened a step in this process.
static STEPS_MARKED: AtomicBool = AtomicBool::new(false);

/// True once the program's NVTX ranges mark its steps: automatic markers (the Python
/// door) then stand down, as they do for the program's own `sf_step_begin`.
pub fn marks_steps() -> bool {
    STEPS_MARKED.load(Ordering::Relaxed)
}

/// What a closing range must end.
fn code_of(class: RangeClass) -> Code {
    match class {
        RangeClass::Other => CODE_OTHER,
        RangeClass::Step(_) => CODE_STEP,
        RangeClass::Stage(i) => match NAMING.get().and_then(|n| n.stage_name(i)) {
            Some(_) => CODE_STEP + 1 + i,
            None => CODE_OTHER,
        },
    }
}

/// Emits the opening marker: only for a range whose close will be seen.
fn begin(class: RangeClass) {
    match class {
        RangeClass::Other => {}
        RangeClass::Step(index) => {
            STEPS_MARKED.store(true, Ordering::Relaxed);
            markers::step_begin(index.map_or(-1, |i| i as i64));
        }
        RangeClass::Stage(i) => {
            if let Some(name) = NAMING.get().and_then(|n| n.stage_name(i)) {
                markers::stage_begin(name);
            }
        }
    }
}

fn close(code: Code) {
    match code {
        CODE_OTHER => {}
        CODE_STEP => markers::step_end(),
        stage => {
            if let Some(name) = NAMING.get().and_then(|n| n.stage_name(stage - CODE_STEP - 1)) {
                markers::stage_end(name);
            }
        }
    }
}

#[derive(Clone, Copy)]
struct Entry {
    domain: usize,
    code: Code,
    /// Nested ranges of this domain that are not ours share one entry, so deep trees of
    /// foreign ranges (per-op ranges of a profiler) take little room.
    count: u16,
}

const STACK_ENTRIES: usize = 32;
const EMPTY: Entry = Entry { domain: 0, code: CODE_OTHER, count: 0 };

/// One thread's open push/pop ranges, all domains interleaved in push order.
struct RangeStack {
    len: Cell<usize>,
    /// Pushes that found the stack full. They are the innermost ranges, so the next pops
    /// are theirs; a pop of another domain in between is taken for one of them, the one
    /// inexactness of a full stack.
    lost: Cell<u32>,
    entries: [Cell<Entry>; STACK_ENTRIES],
}

impl RangeStack {
    const fn new() -> RangeStack {
        RangeStack { len: Cell::new(0), lost: Cell::new(0), entries: [const { Cell::new(EMPTY) }; STACK_ENTRIES] }
    }

    fn depth(&self, domain: usize) -> i32 {
        let entries = &self.entries[..self.len.get()];
        entries.iter().map(Cell::get).filter(|e| e.domain == domain).map(|e| e.count as i32).sum()
    }

    /// Returns the 0-based level of the new range within its domain.
    fn push(&self, domain: usize, code: Code) -> i32 {
        let level = self.depth(domain);
        let len = self.len.get();
        if self.lost.get() > 0 {
            self.lost.set(self.lost.get().saturating_add(1));
            return NO_TRACKING;
        }
        if let Some(top) = len.checked_sub(1).map(|i| &self.entries[i]) {
            let mut entry = top.get();
            if code == CODE_OTHER && entry.code == CODE_OTHER && entry.domain == domain && entry.count < u16::MAX {
                entry.count += 1;
                top.set(entry);
                return level;
            }
        }
        if len == STACK_ENTRIES {
            self.lost.set(1);
            return NO_TRACKING;
        }
        self.entries[len].set(Entry { domain, code, count: 1 });
        self.len.set(len + 1);
        level
    }

    /// Returns the level of the range ended and what it was; a negative level when the
    /// domain has no open range here (an unmatched pop).
    fn pop(&self, domain: usize) -> (i32, Code) {
        if self.lost.get() > 0 {
            self.lost.set(self.lost.get() - 1);
            return (NO_TRACKING, CODE_OTHER);
        }
        let len = self.len.get();
        let Some(at) = (0..len).rev().find(|&i| self.entries[i].get().domain == domain) else {
            return (-1, CODE_OTHER);
        };
        let mut entry = self.entries[at].get();
        if entry.count > 1 {
            entry.count -= 1;
            self.entries[at].set(entry);
        } else {
            for i in at..len - 1 {
                self.entries[i].set(self.entries[i + 1].get());
            }
            self.len.set(len - 1);
        }
        (self.depth(domain), entry.code)
    }
}

thread_local! {
    // Const-initialised and without a destructor: reaching it never allocates.
    static STACK: RangeStack = const { RangeStack::new() };
}

/// `nvtxRangePush*` / `nvtxDomainRangePushEx`; `domain` 0 is the default domain.
pub fn push(domain: usize, message: Message) -> i32 {
    let class = classify(message);
    let level = STACK.try_with(|s| s.push(domain, code_of(class))).unwrap_or(NO_TRACKING);
    // A range the stack could not hold has no close: it opens no step or stage either.
    if level != NO_TRACKING {
        begin(class);
    }
    level
}

/// `nvtxRangePop` / `nvtxDomainRangePop`.
pub fn pop(domain: usize) -> i32 {
    let (level, code) = STACK.try_with(|s| s.pop(domain)).unwrap_or((NO_TRACKING, CODE_OTHER));
    close(code);
    level
}

/// Range ids are unique (a counter) and carry the range's code in their low 16 bits.
static NEXT_RANGE: AtomicU64 = AtomicU64::new(1);

/// `nvtxRangeStart*` / `nvtxDomainRangeStartEx`: the id `nvtxRangeEnd` will bring back.
pub fn start(message: Message) -> u64 {
    let class = classify(message);
    begin(class);
    let code = code_of(class);
    NEXT_RANGE.fetch_add(1, Ordering::Relaxed) << 16 | code as u64
}

/// `nvtxRangeEnd` / `nvtxDomainRangeEnd`.
pub fn end(id: u64) {
    close(id as Code);
}

/// Registered string handles: a tag in the low byte (never a null handle), the kind
/// (0 other, 1 step, 2 indexed step, 3 stage) above it, the step index or stage above that.
const HANDLE_TAG: usize = 0x5f;

/// `nvtxDomainRegisterStringA`: a handle that is the string's classification, so a
/// REGISTERED message needs no table lookup. The handle is opaque to the application.
pub fn register_string(text: &[u8]) -> usize {
    let (kind, value) = match NAMING.get().map_or(RangeClass::Other, |n| n.classify(text)) {
        RangeClass::Other => (0, 0),
        RangeClass::Step(None) => (1, 0),
        // An index beyond 2^48 does not fit beside the tag; such a step counts on.
        RangeClass::Step(Some(i)) if i < 1 << 48 => (2, i as usize),
        RangeClass::Step(Some(_)) => (1, 0),
        RangeClass::Stage(i) => (3, i as usize),
    };
    HANDLE_TAG | kind << 8 | value << 16
}

/// A handle that is not one of ours (or none at all) is some other range.
fn decode_string_handle(handle: usize) -> RangeClass {
    if handle & 0xff != HANDLE_TAG {
        return RangeClass::Other;
    }
    let value = handle >> 16;
    match (handle >> 8) & 0xff {
        1 => RangeClass::Step(None),
        2 => RangeClass::Step(Some(value as u64)),
        3 => RangeClass::Stage(value as u16),
        _ => RangeClass::Other,
    }
}

/// `nvtxDomainCreate*`: a handle per domain name (its hash, odd so never null and never
/// the default domain's 0). Nothing is stored: the handle only has to keep domains apart.
pub fn domain_handle(name: &[u8]) -> usize {
    crate::core::fnv::fnv1a(name) as usize | 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_find_their_own_domain() {
        let s = RangeStack::new();
        assert_eq!(s.push(0, CODE_STEP), 0);
        assert_eq!(s.push(0, 5), 1);
        assert_eq!(s.push(7, CODE_OTHER), 0, "another domain starts at level 0");
        assert_eq!(s.push(0, CODE_OTHER), 2);
        assert_eq!(s.pop(0), (2, CODE_OTHER), "a pop gives the level of the range it ends");
        assert_eq!(s.pop(0), (1, 5), "the stage, under the other domain's open range");
        assert_eq!(s.pop(7), (0, CODE_OTHER));
        assert_eq!(s.pop(0), (0, CODE_STEP));
        assert_eq!(s.pop(0), (-1, CODE_OTHER), "unmatched");
        assert_eq!(s.len.get(), 0);
    }

    #[test]
    fn foreign_nesting_shares_an_entry() {
        let s = RangeStack::new();
        s.push(0, 3);
        for level in 1..1000 {
            assert_eq!(s.push(0, CODE_OTHER), level);
        }
        assert_eq!(s.len.get(), 2);
        for _ in 1..1000 {
            assert_eq!(s.pop(0).1, CODE_OTHER);
        }
        assert_eq!(s.pop(0), (0, 3));
    }

    #[test]
    fn a_full_stack_loses_only_the_innermost_ranges() {
        let s = RangeStack::new();
        s.push(0, CODE_STEP);
        for i in 1..STACK_ENTRIES {
            s.push(i % 2, CODE_OTHER);
        }
        assert_eq!(s.push(0, 4), NO_TRACKING);
        assert_eq!(s.push(1, CODE_OTHER), NO_TRACKING);
        assert_eq!(s.pop(1).0, NO_TRACKING);
        assert_eq!(s.pop(0), (NO_TRACKING, CODE_OTHER), "the lost stage cannot be ended");
        for i in (1..STACK_ENTRIES).rev() {
            assert_eq!(s.pop(i % 2).1, CODE_OTHER);
        }
        assert_eq!(s.pop(0), (0, CODE_STEP));
    }

    #[test]
    fn a_step_range_the_full_stack_cannot_hold_opens_no_step() {
        NAMING.get_or_init(|| StageNaming::new("step", &[]));
        // A thread of its own: a fresh stack, filled with ranges of two foreign domains.
        std::thread::spawn(|| {
            for i in 0..STACK_ENTRIES {
                assert_eq!(push(1 + i % 2, Message::Ignored), (i / 2) as i32);
            }
            assert_eq!(push(0, Message::Ascii(b"step 7")), NO_TRACKING);
            // STEPS_MARKED is the process's: no other test of this binary may open a step
            // range, or this one reads its mark.
            assert!(!marks_steps(), "no step opened: its close would never come");
            assert_eq!(pop(0), NO_TRACKING);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn range_ids_and_string_handles_carry_the_class() {
        NAMING.get_or_init(|| StageNaming::new("step", &[]));
        for (text, class) in [
            ("step", RangeClass::Step(None)),
            ("step 41", RangeClass::Step(Some(41))),
            ("optim.step_cpu_wall", RangeClass::Stage(4)),
            ("aten::mm", RangeClass::Other),
        ] {
            let handle = register_string(text.as_bytes());
            assert_ne!(handle, 0);
            assert_eq!(decode_string_handle(handle), class, "{text}");
            assert_eq!(classify(Message::Registered(handle)), class);
        }
        assert_eq!(decode_string_handle(0), RangeClass::Other);
        assert_eq!(decode_string_handle(0x7fff_1234_5678), RangeClass::Other);
        let (a, b) = (start(Message::Ignored), start(Message::Ignored));
        assert_ne!(a, b);
        assert_eq!((a as Code, b as Code), (CODE_OTHER, CODE_OTHER));
    }

    #[test]
    fn domain_handles_are_distinct_and_never_default() {
        assert_ne!(domain_handle(b"NCCL"), domain_handle(b"app"));
        assert_eq!(domain_handle(b"NCCL"), domain_handle(b"NCCL"));
        assert_eq!(domain_handle(b"") & 1, 1);
    }
}
