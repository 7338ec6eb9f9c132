//! The floor under any reader of this file on this machine: the least a reader must do,
//! done as cheaply as this code knows how. The file is mapped (no copy), its body split in
//! two at a line and each half read on its own core, every line cut into its fields and
//! its numbers read (the fast path's number reader, `str::parse` for the sums it declines)
//! into plain columns. Nothing else: no check of any field, no line numbers, no table, no
//! order, no error a user could act on. What `sf frontier --csv` does on top of this is
//! what makes it trustworthy; this only shows how much time that leaves.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

use stagefrontier::analysis::frontier::csv::decimal_at;

/// What one half of the file held.
#[derive(Default)]
struct Columns {
    steps: Vec<u64>,
    ranks: Vec<u32>,
    stages: Vec<u8>,
    seconds: Vec<f64>,
    overlaps: Vec<f64>,
    /// (row, seconds) for the rows with a wait, and with a caused wait.
    waits: Vec<(u32, f64)>,
    caused: Vec<(u32, f64)>,
}

/// The file at `path` (as `write_file` writes it, with these stage names) read into
/// columns; returns the rows read and the sum of their seconds.
pub fn read(path: &Path, stages: &[&str]) -> (usize, f64) {
    let file = File::open(path).expect("open the file");
    let len = file.metadata().expect("the file's size").len() as usize;
    // SAFETY: a private read-only mapping of a file this process opened and nobody writes
    // while the bench runs; it is unmapped below, after the last read of `bytes`.
    let map = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE, file.as_raw_fd(), 0) };
    assert_ne!(map, libc::MAP_FAILED, "mmap the file");
    // SAFETY: the mapping above is `len` readable bytes and lives until the munmap below.
    let bytes = unsafe { std::slice::from_raw_parts(map as *const u8, len) };
    let body = &bytes[line_end(bytes, 0) + 1..];
    let mid = (line_end(body, body.len() / 2) + 1).min(body.len());
    let (first, second) = std::thread::scope(|scope| {
        let later = scope.spawn(|| columns(&body[mid..], stages));
        (columns(&body[..mid], stages), later.join().expect("the second half"))
    });
    let rows = first.seconds.len() + second.seconds.len();
    let sum = first.seconds.iter().chain(&second.seconds).sum();
    // SAFETY: `map` is the mapping made above, of `len` bytes; nothing borrows it now.
    unsafe { libc::munmap(map, len) };
    (rows, sum)
}

fn line_end(bytes: &[u8], at: usize) -> usize {
    bytes[at..].iter().position(|&b| b == b'\n').map_or(bytes.len(), |i| at + i)
}

/// The lines of `bytes`: step, rank, stage, seconds, overlap, wait, caused wait.
fn columns(bytes: &[u8], stages: &[&str]) -> Columns {
    // Room for the rows of this half, at 30 bytes or more a line.
    let rows = bytes.len() / 30;
    let mut c = Columns {
        steps: Vec::with_capacity(rows),
        ranks: Vec::with_capacity(rows),
        stages: Vec::with_capacity(rows),
        seconds: Vec::with_capacity(rows),
        overlaps: Vec::with_capacity(rows),
        ..Columns::default()
    };
    let (mut at, mut stage) = (0, stages.len() - 1);
    while at < bytes.len() {
        let row = c.seconds.len() as u32;
        let (step, p) = integer(bytes, at);
        let (rank, p) = integer(bytes, p + 1);
        // The stage after the last one, or any other by name.
        let named = |s: usize| bytes[p + 1..].starts_with(stages[s].as_bytes());
        stage = Some((stage + 1) % stages.len())
            .filter(|&s| named(s))
            .or_else(|| (0..stages.len()).find(|&s| named(s)))
            .expect("a known stage");
        let (seconds, p) = number(bytes, p + 2 + stages[stage].len());
        let (overlap, mut p) = number(bytes, p + 1);
        for out in [&mut c.waits, &mut c.caused] {
            p += 1;
            if !matches!(bytes[p], b',' | b'\n') {
                let value;
                (value, p) = number(bytes, p);
                out.push((row, value));
            }
        }
        c.steps.push(step);
        c.ranks.push(rank as u32);
        c.stages.push(stage as u8);
        c.seconds.push(seconds);
        c.overlaps.push(overlap);
        at = p + 1;
    }
    c
}

#[inline(always)]
fn integer(bytes: &[u8], at: usize) -> (u64, usize) {
    let (mut n, mut i) = (0, at);
    while let Some(d) = bytes.get(i).map(|b| b.wrapping_sub(b'0')).filter(|&d| d < 10) {
        (n, i) = (n * 10 + u64::from(d), i + 1);
    }
    (n, i)
}

/// The number from `at` and where it ends.
#[inline(always)]
fn number(bytes: &[u8], at: usize) -> (f64, usize) {
    match decimal_at(bytes, at) {
        Some((value, end)) if matches!(bytes.get(end), Some(b',' | b'\n') | None) => (value, end),
        _ => {
            let end = at + bytes[at..].iter().position(|&b| matches!(b, b',' | b'\n')).unwrap_or(bytes.len() - at);
            let text = std::str::from_utf8(&bytes[at..end]).expect("ASCII");
            (text.parse().expect("a number"), end)
        }
    }
}
