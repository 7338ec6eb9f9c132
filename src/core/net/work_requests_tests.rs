use super::*;

fn qp(n: u32) -> QpKey {
    QpKey { source: WrSource::Profiler, device: 0, qp_num: n }
}

#[test]
fn keys_round_trip_through_the_packed_word() {
    for key in [
        qp(0),
        QpKey { source: WrSource::Verbs, device: -1, qp_num: u32::MAX },
        QpKey { source: WrSource::Verbs, device: 8_388_607, qp_num: 7 },
        QpKey { source: WrSource::Profiler, device: -8_388_608, qp_num: 0x100 },
    ] {
        assert_ne!(key.pack(), 0, "0 marks a free slot");
        assert_eq!(QpKey::unpack(key.pack()), Some(key));
    }
}

#[test]
fn counts_bytes_latency_and_in_flight() {
    let t: WrTable<8> = WrTable::new();
    t.posted(qp(1), 100, 1_000);
    t.posted(qp(1), 200, 1_100);
    t.posted(qp(1), 300, 1_200);
    assert_eq!(t.qps().count(), 1);
    let (_, key, e) = t.qps().next().unwrap();
    assert_eq!(key, qp(1));
    assert_eq!(e.oldest_in_flight(), Some(1_000));
    // The door knows the first post time; the second is matched in order.
    t.completed(qp(1), 100, Some(1_000), 1_500, true);
    t.completed(qp(1), 200, None, 1_700, true);
    assert_eq!(e.oldest_in_flight(), Some(1_200), "the third is still out");
    let c = e.counters();
    assert_eq!((c.posted, c.completed, c.in_flight(), c.errors), (3, 2, 1, 0));
    assert_eq!((c.bytes_posted, c.bytes_completed), (600, 300));
    assert_eq!((c.latency_sum, c.latency_count, c.latency_max), (500 + 600, 2, 600));
    assert_eq!(e.take_recent_latency_max(), 600);
    assert_eq!(e.take_recent_latency_max(), 0, "taken");
    t.completed(qp(1), 300, None, 1_800, false);
    let c = e.counters();
    assert_eq!((c.completed, c.errors, c.bytes_completed, c.in_flight()), (3, 1, 300, 0));
    assert_eq!(e.oldest_in_flight(), None);
}

#[test]
fn window_bandwidth_counts_busy_time_only() {
    let t: WrTable<4> = WrTable::new();
    // Two back-to-back transfers: 1000 bytes each, 100 ticks of busy time each; the
    // second was queued behind the first from tick 0, which is not charged to it.
    t.posted(qp(2), 1000, 0);
    t.posted(qp(2), 1000, 0);
    t.completed(qp(2), 1000, None, 100, true);
    t.completed(qp(2), 1000, None, 200, true);
    // An idle gap (nothing in flight from 200 to 10_000) is charged to nothing.
    t.posted(qp(2), 1000, 10_000);
    t.completed(qp(2), 1000, None, 10_100, true);
    let (_, _, e) = t.qps().next().unwrap();
    let w = e.window(3);
    assert_eq!(w, WindowSum { n: 3, bytes: 3000, busy_ticks: 300 });
    assert_eq!(w.bandwidth(1e9), Some(1e10), "10 bytes per ns = 10 GB/s");
    assert_eq!(e.window(2).n, 2, "the last two only");
    assert_eq!(e.window(64).n, 3, "no more than happened");
    assert_eq!(WindowSum::default().bandwidth(1e9), None);
    let sizeless = WindowSum { n: 64, bytes: 0, busy_ticks: 5_000 };
    assert_eq!(sizeless.bandwidth(1e9), None, "receive events without a length: unknown, not 0 B/s");
}

#[test]
fn the_window_holds_the_latest_completions_after_wrapping() {
    let t: WrTable<2> = WrTable::new();
    let n = WINDOW_MAX as u64 * 3 + 5;
    for i in 0..n {
        t.posted(qp(3), i, i * 10);
        t.completed(qp(3), i, None, i * 10 + 5, true);
    }
    let (_, _, e) = t.qps().next().unwrap();
    let w = e.window(WINDOW_MAX);
    assert_eq!(w.n, WINDOW_MAX);
    assert_eq!(w.bytes, (n - WINDOW_MAX as u64..n).sum::<u64>());
    assert_eq!(w.busy_ticks, 5 * WINDOW_MAX as u64);
    assert_eq!(e.counters().latency_count, n, "matched through the post ring");
}

#[test]
fn a_full_table_drops_and_counts() {
    let t: WrTable<4> = WrTable::new();
    for n in 0..4 {
        t.posted(qp(n), 1, 1);
    }
    assert_eq!(t.dropped(), 0);
    t.posted(qp(99), 1, 1);
    t.completed(qp(99), 1, None, 2, true);
    assert_eq!(t.dropped(), 2, "one post and one completion lost");
    assert_eq!(t.qps().count(), 4);
    t.posted(qp(3), 1, 1);
    assert_eq!(t.dropped(), 2, "known QPs still find their slot");
}

#[test]
fn concurrent_posters_and_completers_lose_nothing() {
    const THREADS: u32 = 4;
    const QPS: u32 = 3;
    const PER_THREAD: u64 = 20_000;
    let t: &'static WrTable<16> = Box::leak(Box::new(WrTable::new()));
    let workers: Vec<_> = (0..THREADS)
        .map(|w| {
            std::thread::spawn(move || {
                for i in 0..PER_THREAD {
                    let key = qp((w + i as u32) % QPS);
                    t.posted(key, 8, i);
                    t.completed(key, 8, Some(i), i + 3, i % 1000 != 0);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(t.qps().count(), QPS as usize, "each QP claimed one slot, racing or not");
    let total = |f: fn(&QpCounters) -> u64| t.qps().map(|(_, _, e)| f(&e.counters())).sum::<u64>();
    let n = THREADS as u64 * PER_THREAD;
    assert_eq!(total(|c| c.posted), n);
    assert_eq!(total(|c| c.completed), n);
    assert_eq!(total(|c| c.errors), THREADS as u64 * PER_THREAD.div_ceil(1000));
    assert_eq!(total(|c| c.bytes_posted), 8 * n);
    assert_eq!(total(|c| c.bytes_completed), 8 * (n - total(|c| c.errors)));
    assert_eq!(total(|c| c.latency_sum), 3 * n);
    assert_eq!(t.qps().map(|(_, _, e)| e.counters().latency_max).max(), Some(3));
    assert_eq!(t.dropped(), 0);
}

#[test]
fn probing_never_overflows_whatever_the_hash() {
    // A hash near u64::MAX plus the probe step used to overflow (a panic in debug builds,
    // inside a door's callback).
    for hash in [u64::MAX, u64::MAX - 1, 0] {
        for k in 0..PROBE {
            assert!(probe_slot(hash, k, QP_CAPACITY) < QP_CAPACITY);
        }
    }
    assert_eq!(probe_slot(u64::MAX, 1, 8), 0, "u64::MAX is slot 7 of 8; the next probe wraps to 0");
}

#[test]
fn huge_byte_counts_saturate_the_window_instead_of_panicking() {
    let t: WrTable<4> = WrTable::new();
    for i in 0..3 {
        t.posted(qp(5), u64::MAX / 2, i * 10);
        t.completed(qp(5), u64::MAX / 2, None, i * 10 + 5, true);
    }
    let (_, _, e) = t.qps().next().unwrap();
    assert_eq!(e.window(3), WindowSum { n: 3, bytes: u64::MAX, busy_ticks: 15 });
}
