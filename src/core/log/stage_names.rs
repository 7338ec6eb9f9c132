//! Stage names interned into the log's stage-name table, so events carry a small id and
//! readers resolve it from the file itself. Interning claims a slot with a CAS and never
//! allocates; a full table (64 names) makes further names unrecorded, not an error.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::core::log::format::stage_names::{EMPTY, NAME_CAPACITY, NAME_OFFSET, OFFSET, SLOTS, SLOT_SIZE, WRITING};
use crate::core::log::mapping::SharedMap;

#[derive(Clone, Copy)]
pub struct StageNames {
    map: &'static SharedMap,
}

/// FNV-1a of the name with the top bit set, so a tag is never EMPTY or WRITING.
fn tag_of(name: &[u8]) -> u64 {
    crate::core::fnv::fnv1a(name) | 1 << 63
}

impl StageNames {
    pub fn in_map(map: &'static SharedMap) -> StageNames {
        StageNames { map }
    }

    fn tag(&self, slot: usize) -> &AtomicU64 {
        self.map.atomic_u64(OFFSET + slot * SLOT_SIZE)
    }

    fn name_ptr(&self, slot: usize) -> *mut u8 {
        self.map.ptr(OFFSET + slot * SLOT_SIZE + NAME_OFFSET, NAME_CAPACITY)
    }

    fn name_is(&self, slot: usize, name: &[u8]) -> bool {
        let stored = self.name_ptr(slot);
        // SAFETY: the name area is in bounds; a slot whose tag is published (release) is
        // never written again, and we read it after an acquire load of that tag.
        (0..NAME_CAPACITY).all(|i| unsafe { *stored.add(i) } == name.get(i).copied().unwrap_or(0))
    }

    /// The name interned under `id`, copied into a fixed buffer (no allocation), with its
    /// length.
    pub fn name(&self, id: u16) -> Option<([u8; NAME_CAPACITY], usize)> {
        let slot = id as usize;
        if slot >= SLOTS || self.tag(slot).load(Ordering::Acquire) <= WRITING {
            return None;
        }
        let mut name = [0u8; NAME_CAPACITY];
        // SAFETY: in bounds; a published slot is never written again (see `name_is`).
        unsafe { std::ptr::copy_nonoverlapping(self.name_ptr(slot), name.as_mut_ptr(), NAME_CAPACITY) };
        let len = name.iter().position(|&b| b == 0).unwrap_or(NAME_CAPACITY);
        Some((name, len))
    }

    /// Whether no stage name was ever interned: the rank has recorded no stage marker.
    pub fn is_empty(&self) -> bool {
        (0..SLOTS).all(|slot| self.tag(slot).load(Ordering::Acquire) == EMPTY)
    }

    /// The id of `name` (truncated to 39 bytes), interning it on first sight.
    pub fn intern(&self, name: &[u8]) -> Option<u16> {
        let name = &name[..name.len().min(NAME_CAPACITY - 1)];
        let tag = tag_of(name);
        let home = (tag as usize) % SLOTS;
        for probe in 0..SLOTS {
            let slot = (home + probe) % SLOTS;
            let mut current = self.tag(slot).load(Ordering::Acquire);
            if current == EMPTY {
                match self.tag(slot).compare_exchange(EMPTY, WRITING, Ordering::Acquire, Ordering::Acquire) {
                    Ok(_) => {
                        // SAFETY: winning the CAS makes this thread the slot's only writer;
                        // the name fits (truncated above, the rest stays NUL).
                        unsafe { std::ptr::copy_nonoverlapping(name.as_ptr(), self.name_ptr(slot), name.len()) };
                        self.tag(slot).store(tag, Ordering::Release);
                        return Some(slot as u16);
                    }
                    Err(now) => current = now,
                }
            }
            // Another thread is writing this slot: it may be this very name. Waiting would
            // block a hook, so probe on; at worst a name takes two slots.
            if current == tag && self.name_is(slot, name) {
                return Some(slot as u16);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::log::format;

    fn table() -> StageNames {
        let path = std::env::temp_dir().join(format!(
            "sf-stage-names-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        let map = SharedMap::create(&file, format::HEADER_SIZE, 0, &path).unwrap();
        let _ = std::fs::remove_file(&path);
        StageNames::in_map(map)
    }

    #[test]
    fn same_name_same_id_across_threads() {
        let names = table();
        let ids: Vec<Vec<u16>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(move || {
                        ["data.next_wait", "model.fwd_loss_cpu_wall", "optim.step_cpu_wall"]
                            .iter()
                            .map(|n| names.intern(n.as_bytes()).unwrap())
                            .collect()
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        assert!(ids.windows(2).all(|w| w[0] == w[1]), "{ids:?}");
        assert_eq!(names.intern(b"data.next_wait"), Some(ids[0][0]));
    }

    #[test]
    fn the_table_fills_up_gracefully() {
        let names = table();
        let ids: Vec<_> = (0..70).map(|i| names.intern(format!("stage{i}").as_bytes())).collect();
        assert_eq!(ids.iter().filter(|id| id.is_some()).count(), SLOTS);
        assert_eq!(names.intern(b"stage3"), ids[3]);
        let long = [b'x'; 100];
        assert_eq!(names.intern(&long), None, "full");
    }
}
