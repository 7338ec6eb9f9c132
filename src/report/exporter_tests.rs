use super::super::hang::DEFAULT_HANG;
use super::super::test_logs::{call, new_log};
use super::*;
use crate::core::log::records::ProfOp;
use crate::core::log::writer::LogWriter;

/// A fresh log of `slots` event slots, the directory the exporter watches it in, and an
/// exporter that has not scraped yet.
fn watched_log(name: &str, slots: u32) -> (PathBuf, LogWriter, Dirs, Exporter) {
    let (path, writer) = new_log(name, slots);
    let dir = path.parent().unwrap().to_path_buf();
    (dir.clone(), writer, Dirs::one(dir), Exporter::default())
}

/// A record of a kind no metric uses, as the NCCL profiler writes many of.
fn unused_kind() -> RecordBody {
    RecordBody::ProfOp(ProfOp {
        t_start_ns: 1,
        t_stop_ns: 2,
        comm_hash: 3,
        seq: 0,
        count: 1024,
        rank: 0,
        peer: -1,
        func: 255,
        dtype: -1,
        algo: 255,
        proto: 255,
        n_channels: 0,
        n_warps: 0,
        abi: 4,
        p2p: false,
        api: false,
        ce: false,
    })
}

/// A busy rank: more records between two scrapes than a pass reads. The scrape reads the
/// newest `PASS_RECORDS`, counts the rest as skipped (not lost), and keeps only calls that
/// run on without a gap, so the hang analysis gets a whole span.
#[test]
fn a_pass_reads_the_newest_records_and_counts_the_ones_it_skipped() {
    let (dir, mut writer, dirs, mut exporter) = watched_log("exporter-pass", 16_384);
    let settings = DEFAULT_HANG;
    let skipped = |families: &[Family]| {
        let family = families.iter().find(|f| f.name == "sf_exporter_records_skipped").unwrap();
        family.samples[0].value as u64
    };
    let calls_of = |exporter: &Exporter| {
        let w = exporter.watched.values().next().unwrap();
        (w.calls.front().map(|c| c.seq), w.calls.len(), w.lost_among_calls)
    };
    for seq in 1..=100 {
        writer.append(&call(seq));
    }
    assert_eq!(skipped(&exporter.scrape(&dirs, &settings)), 0);
    assert_eq!(calls_of(&exporter), (Some(1), 100, 0));
    // 5,000 more records, one in five a call: a pass reads the newest 2,048 of them.
    let mut seq = 100;
    for i in 0..5000 {
        if i % 5 == 0 {
            seq += 1;
            writer.append(&call(seq));
        } else {
            writer.append(&unused_kind());
        }
    }
    assert_eq!(skipped(&exporter.scrape(&dirs, &settings)), 5000 - PASS_RECORDS);
    let (first, held, lost) = calls_of(&exporter);
    assert_eq!((held as u64, lost), (PASS_RECORDS / 5, 0), "only the calls of the records read, none lost");
    assert_eq!(first, Some(seq - held as u64 + 1), "the newest calls, with no gap up to the newest");
    // Nothing new: nothing more skipped, the same calls.
    assert_eq!(skipped(&exporter.scrape(&dirs, &settings)), 5000 - PASS_RECORDS);
    assert_eq!(calls_of(&exporter), (first, held, 0));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A running job's cadence is estimated on the first scrape and reused while it is young,
/// then made again from the newer calls; a job without one yet is estimated every scrape.
#[test]
fn a_running_jobs_cadence_is_estimated_again_only_when_it_is_old_or_missing() {
    let (dir, mut writer, dirs, mut exporter) = watched_log("exporter-cadence", 4096);
    let settings = DEFAULT_HANG;
    let mut seq = 0;
    let mut more_calls = |writer: &mut LogWriter| {
        for _ in 0..100 {
            seq += 1;
            writer.append(&call(seq));
        }
    };
    let estimated_at = |exporter: &Exporter| exporter.cadences["j"].at.unwrap();
    more_calls(&mut writer);
    exporter.scrape(&dirs, &settings);
    let first = estimated_at(&exporter);
    assert!(exporter.cadences["j"].cadence.is_some(), "100 evenly spaced calls have a cadence");
    more_calls(&mut writer);
    exporter.scrape(&dirs, &settings);
    assert_eq!(estimated_at(&exporter), first, "new calls, but the estimate is young: kept");
    // Ten seconds later (the clock of the estimate moved back), new calls: estimated again.
    let aged = first.checked_sub(CADENCE_REFRESH).unwrap();
    exporter.cadences.get_mut("j").unwrap().at = Some(aged);
    more_calls(&mut writer);
    exporter.scrape(&dirs, &settings);
    assert!(estimated_at(&exporter) > first, "an old estimate is made again");
    // No cadence found yet: every scrape with new calls tries again.
    let again = estimated_at(&exporter);
    exporter.cadences.get_mut("j").unwrap().cadence = None;
    more_calls(&mut writer);
    exporter.scrape(&dirs, &settings);
    assert!(estimated_at(&exporter) > again);
    // Nothing new: nothing estimated, however old.
    let settled = estimated_at(&exporter);
    exporter.cadences.get_mut("j").unwrap().at = settled.checked_sub(CADENCE_REFRESH);
    exporter.scrape(&dirs, &settings);
    assert_eq!(exporter.cadences["j"].at, settled.checked_sub(CADENCE_REFRESH));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Records skipped after a first scrape that found none are counted; a ring smaller than a
/// pass loses what it no longer holds without the calls kept ceasing to be whole.
#[test]
fn skips_count_after_an_empty_first_scrape_and_on_rings_smaller_than_a_pass() {
    let settings = DEFAULT_HANG;
    for (name, slots, first_calls) in [("exporter-empty-first", 16_384u32, 0u64), ("exporter-small-ring", 1024, 100)] {
        let (dir, mut writer, dirs, mut exporter) = watched_log(name, slots);
        for seq in 1..=first_calls {
            writer.append(&call(seq));
        }
        exporter.scrape(&dirs, &settings);
        for seq in first_calls + 1..=first_calls + 5000 {
            writer.append(&call(seq));
        }
        exporter.scrape(&dirs, &settings);
        let w = exporter.watched.values().next().unwrap();
        let read = PASS_RECORDS.min(u64::from(slots));
        assert_eq!(w.skipped, 5000 - read, "{name}");
        assert_eq!((w.calls.len() as u64, w.lost_among_calls), (read, 0), "{name}");
        assert_eq!(w.calls.front().map(|c| c.seq), Some(first_calls + 5000 - read + 1), "{name}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
