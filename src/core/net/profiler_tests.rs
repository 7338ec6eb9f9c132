use super::*;

/// Tests that claim slots take it shared; the one that fills the pool, alone.
static POOL: std::sync::RwLock<()> = std::sync::RwLock::new(());

#[test]
fn names_map_to_nccl_numbering() {
    assert_eq!(func_code(b"AllReduce"), 4);
    assert_eq!(func_code(b"Send"), 6);
    assert_eq!(func_code(b"Nope"), UNKNOWN);
    assert_eq!(dtype_code(b"ncclFloat32"), 7);
    assert_eq!(dtype_code(b"float32"), -1);
    assert_eq!(algo_code(b"RING"), 1);
    assert_eq!(algo_code(b"Ring"), 1);
    assert_eq!(algo_code(b"NVLSTree"), 5);
    assert_eq!(proto_code(b"Simple"), 2);
    assert_eq!(func_name(4), "AllReduce");
}

#[test]
fn foreign_addresses_are_not_ours() {
    let x = 5u64;
    assert!(event(&x as *const u64 as usize).is_none());
    assert!(context(0).is_none());
    let inside = SLOT_POOL.as_ptr() as usize + GENS;
    assert!(event(inside).is_none(), "not a handle's address");
}

#[test]
fn children_keep_their_parent_alive() {
    let _pool = POOL.read().unwrap_or_else(|e| e.into_inner());
    // Without a runtime nothing is recorded, so exercise the pool directly.
    let parent = claim().unwrap();
    SLOT_POOL[parent].refs.store(1, Ordering::Release);
    let child = claim().unwrap();
    SLOT_POOL[parent].refs.fetch_add(1, Ordering::AcqRel);
    SLOT_POOL[child].parent.store(parent + 1, Ordering::Relaxed);
    SLOT_POOL[child].refs.store(1, Ordering::Release);
    release(parent);
    assert!(SLOT_POOL[parent].busy.load(Ordering::Acquire), "child still running");
    release(child);
    assert!(!SLOT_POOL[parent].busy.load(Ordering::Acquire));
    assert!(!SLOT_POOL[child].busy.load(Ordering::Acquire));
}

/// A slot holding a live event of a new generation, as `start` leaves it.
fn started() -> (usize, usize) {
    let index = claim().unwrap();
    let slot = &SLOT_POOL[index];
    slot.refs.store(1, Ordering::Release);
    let generation = (slot.life.load(Ordering::Relaxed) >> 1) + 1;
    slot.life.store(live_word(generation), Ordering::Release);
    (index, handle_address(index, generation))
}

#[test]
fn a_second_stop_of_one_handle_does_nothing() {
    let _pool = POOL.read().unwrap_or_else(|e| e.into_inner());
    let (index, handle) = started();
    let event = event(handle).unwrap();
    assert!(event.live());
    assert!(stop(event), "the first stop ends the event");
    assert!(!SLOT_POOL[index].busy.load(Ordering::Acquire));
    assert!(!stop(event), "NCCL's IB transport stops a QP event twice");
    assert!(!stop(super::event(handle).unwrap()), "looked up again, still stopped");
    assert_eq!(SLOT_POOL[index].refs.load(Ordering::Acquire), 0, "released once, not wrapped");
}

#[test]
fn a_stale_handle_does_not_touch_the_event_now_in_its_slot() {
    let _pool = POOL.read().unwrap_or_else(|e| e.into_inner());
    let (index, old) = started();
    assert!(stop(event(old).unwrap()));
    // The slot is reused for a new event (after the cursor came round, here at once).
    SLOT_POOL[index].busy.store(true, Ordering::Release);
    SLOT_POOL[index].refs.store(1, Ordering::Release);
    let generation = (SLOT_POOL[index].life.load(Ordering::Relaxed) >> 1) + 1;
    SLOT_POOL[index].life.store(live_word(generation), Ordering::Release);
    let new = handle_address(index, generation);
    assert_ne!(old, new);
    let stale = event(old).unwrap();
    assert!(!stale.live() && stale.chain() == 0);
    state(stale, 3, Some(7));
    assert_eq!(SLOT_POOL[index].transitions.load(Ordering::Relaxed), 0, "stale state ignored");
    assert!(!stop(stale));
    assert!(event(new).unwrap().live(), "the new event is untouched");
    assert!(stop(event(new).unwrap()));
}

#[test]
fn a_handle_never_started_is_not_stopped() {
    let _pool = POOL.read().unwrap_or_else(|e| e.into_inner());
    let index = claim().unwrap();
    let never = handle_address(index, (SLOT_POOL[index].life.load(Ordering::Relaxed) >> 1) + 5);
    assert!(!stop(event(never).unwrap()));
    assert!(SLOT_POOL[index].busy.load(Ordering::Acquire), "the claimed slot is untouched");
    SLOT_POOL[index].busy.store(false, Ordering::Release);
}

#[test]
fn nccl_starts_the_parents_of_every_type_asked_for() {
    use ty::*;
    // NVIDIA's example asking for Coll only gets GroupApi, CollApi, Group and Coll.
    assert_eq!(started_types(COLL, 6), GROUP_API | COLL_API | GROUP | COLL);
    assert_eq!(started_types(COLL, 4) & (GROUP | COLL), GROUP | COLL);
    assert_eq!(
        started_types(PROXY_STEP, 6),
        GROUP_API | COLL_API | P2P_API | GROUP | COLL | P2P | PROXY_OP | PROXY_STEP
    );
    assert_eq!(started_types(NET_PLUGIN, 4) & P2P, 0, "v2.26.2: no p2p task for NetPlugin alone");
    assert_eq!(started_types(NET_PLUGIN, 5) & P2P, P2P);
    assert_eq!(started_types(KERNEL_LAUNCH, 5), GROUP_API | KERNEL_LAUNCH);
    assert_eq!(started_types(PROXY_CTRL, 5), PROXY_CTRL);
    assert_eq!(started_types(CE_SYNC, 6), GROUP_API | COLL_API | CE_COLL | CE_SYNC);
}

#[test]
fn a_freed_slot_is_reused_only_after_the_cursor_came_round() {
    let _pool = POOL.read().unwrap_or_else(|e| e.into_inner());
    let freed = claim().unwrap();
    SLOT_POOL[freed].refs.store(1, Ordering::Release);
    release(freed);
    let next = claim().unwrap();
    assert_ne!(next, freed, "a late child may still read the freed task");
    SLOT_POOL[next].refs.store(1, Ordering::Release);
    release(next);
}

#[test]
fn a_full_pool_counts_every_event_it_cannot_keep() {
    let _alone = POOL.write().unwrap_or_else(|e| e.into_inner());
    let held: Vec<usize> = (0..SLOTS).filter_map(|_| claim()).collect();
    assert_eq!(held.len(), SLOTS, "every slot taken");
    let before = dropped();
    assert!(claim_or_count().is_none() && claim_or_count().is_none());
    assert_eq!(dropped() - before, 2, "each lost event counted");
    for i in held {
        SLOT_POOL[i].busy.store(false, Ordering::Release);
    }
    assert!(claim_or_count().is_some_and(|i| {
        SLOT_POOL[i].busy.store(false, Ordering::Release);
        true
    }));
    assert_eq!(dropped() - before, 2);
}
