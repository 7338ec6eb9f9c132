//! The fast path of [`super::read`]: the input read block by block into one reused buffer
//! (the file is never held whole), split into lines on bytes, a line in the form
//! `sf steps --csv` writes read in one pass (csv_quick.rs), numbers in the forms it writes
//! parsed by hand. It gives exactly what the RFC 4180 reader gives (the same rows, errors
//! and line numbers). At a line it does not take (a quote anywhere but around a whole
//! one-line field, a stage name that is not UTF-8, a line over [`MAX_LINE`] bytes) it
//! hands that reader what it has read and the input from that line on, and the reader goes
//! on from there.

use std::io::{BufRead, Read};

use super::{parse, text, Columns, CsvError, DeviceTime, Resume, Row, StageTable, WaitKeyed, WAIT_COLUMNS};
use crate::analysis::blame::{Attribution, StageSeconds};

/// Bytes read at a time into the reused buffer.
const BLOCK: usize = 1 << 20;

/// Lines of at least this many bytes at once are read on two cores, their second half on
/// another thread (a block's worth of rows is far more than a thread's start costs).
const SPLIT_MIN: usize = 256 << 10;

/// The longest line the buffer holds (law 5: nothing in the file is trusted): a longer one
/// goes to the RFC 4180 reader, which streams.
pub(super) const MAX_LINE: usize = 1 << 20;

/// What the fast path made of the input: a table or an error the RFC 4180 reader would
/// give too, or the input from the line it declined on (what was read, then the rest) and
/// what it read before that line, for that reader to go on.
pub(super) enum Outcome<R> {
    Done(Result<StageTable, CsvError>),
    Declined(std::io::Chain<std::io::Cursor<Vec<u8>>, R>, Resume),
}

/// A line the fast path does not take.
struct Decline;

/// Parses `input` when it can. `stages` is the checked `--stages` list.
pub(super) fn read<R: BufRead>(input: R, stages: Option<&[String]>) -> Outcome<R> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    read_blocks(input, stages, BLOCK, if cores > 1 { SPLIT_MIN } else { usize::MAX })
}

/// [`read`], `block` bytes at a time (tests cut lines at every place with small blocks),
/// runs of lines of `split_min` bytes or more on two cores.
fn read_blocks<R: BufRead>(mut input: R, stages: Option<&[String]>, block: usize, split_min: usize) -> Outcome<R> {
    let fixed = stages.is_some();
    let mut buf: Vec<u8> = Vec::with_capacity(block);
    // Where the unparsed bytes start in `buf`, and the lines of the file before them.
    let (mut start, mut lines) = (0, 0);
    let mut eof = false;
    let mut fields = Fields::default();
    let mut reading: Option<(Columns, quick::Plan, Chunk)> = None;
    while !eof {
        // The partial line left moves to the front; a block is read after it.
        buf.drain(..start);
        start = 0;
        match (&mut input).take(block as u64).read_to_end(&mut buf) {
            Ok(n) => eof = n < block,
            Err(e) => return Outcome::Done(Err(CsvError::Io(e.to_string()))),
        }
        // Whole lines only, but for the last one at the end of the input.
        let end = match buf.iter().rposition(|&b| b == b'\n') {
            _ if eof => buf.len(),
            Some(i) => i + 1,
            None if buf.len() > MAX_LINE => return declined(buf, 0, input, lines, reading),
            None => continue,
        };
        let bytes = &buf[..end];
        while start < end {
            let Some((columns, plan, chunk)) = &mut reading else {
                // The header: the first line that is not blank.
                let Ok(newline) = fields.split(bytes, start) else {
                    return declined(buf, start, input, lines, reading);
                };
                start = newline + 1;
                lines += 1;
                if !fields.blank(bytes) {
                    let header =
                        csv::ByteRecord::from((0..fields.len()).map(|i| fields.raw(bytes, i)).collect::<Vec<_>>());
                    let columns = match Columns::of(&header) {
                        Ok(columns) => columns,
                        Err(e) => return Outcome::Done(Err(e)),
                    };
                    let (plan, chunk) = (quick::plan(&columns), Chunk::new(stages, lines));
                    reading = Some((columns, plan, chunk));
                }
                continue;
            };
            let reader = Lines { columns, plan, fixed, split_min };
            match reader.parse(chunk, bytes, start, &mut fields) {
                Ok(Ok(())) => start = end,
                Ok(Err(e)) => return Outcome::Done(Err(e)),
                Err(at) => return declined(buf, at, input, lines, reading),
            }
        }
        if buf.len().saturating_sub(start) > MAX_LINE {
            return declined(buf, start, input, lines, reading);
        }
    }
    match reading {
        Some((columns, _, chunk)) => Outcome::Done(finish(chunk, &columns)),
        None => Outcome::Done(Err(CsvError::Empty)),
    }
}

/// How the lines after the header are read.
struct Lines<'a> {
    columns: &'a Columns,
    plan: &'a quick::Plan,
    fixed: bool,
    split_min: usize,
}

impl Lines<'_> {
    /// [`Chunk::parse_lines`] over the lines of `bytes` from `at`, with the same outcome:
    /// when they are `split_min` bytes or more, the second half is read on another thread
    /// into a fork of the chunk, joined to it once the first half read without a fault. A
    /// second half that holds an error or a line this path declines is read again here,
    /// after the first, which gives that error's line number or hands over exactly as a
    /// single pass would.
    fn parse(
        &self,
        chunk: &mut Chunk,
        bytes: &[u8],
        at: usize,
        fields: &mut Fields,
    ) -> Result<Result<(), CsvError>, usize> {
        let Lines { columns, plan, fixed, split_min } = *self;
        let half = at + (bytes.len() - at) / 2;
        let mid = match bytes[half..].iter().position(|&b| b == b'\n') {
            Some(i) if bytes.len() - at >= split_min && half + i + 1 < bytes.len() => half + i + 1,
            _ => return chunk.parse_lines(bytes, at, columns, plan, fixed, fields),
        };
        let known = chunk.names.len();
        let mut later = chunk.fork();
        std::thread::scope(|scope| {
            let second = std::thread::Builder::new().spawn_scoped(scope, move || {
                let read = later.parse_lines(bytes, mid, columns, plan, fixed, &mut Fields::default());
                (later, read)
            });
            let Ok(second) = second else {
                return chunk.parse_lines(bytes, at, columns, plan, fixed, fields);
            };
            match chunk.parse_lines(&bytes[..mid], at, columns, plan, fixed, fields) {
                Ok(Ok(())) => {}
                fault => return fault,
            }
            match second.join() {
                Ok((later, Ok(Ok(())))) => {
                    chunk.join(later, known);
                    Ok(Ok(()))
                }
                _ => chunk.parse_lines(bytes, mid, columns, plan, fixed, fields),
            }
        })
    }
}

/// The input from `buf[at..]` on, for the RFC 4180 reader, with what was read before it;
/// `lines` counts the lines before it while no header was read.
fn declined<R: Read>(
    buf: Vec<u8>,
    at: usize,
    input: R,
    lines: usize,
    reading: Option<(Columns, quick::Plan, Chunk)>,
) -> Outcome<R> {
    let rest = std::io::Cursor::new(buf[at..].to_vec()).chain(input);
    let lines = reading.as_ref().map_or(lines, |(_, _, chunk)| chunk.lines);
    let read = reading.map(|(columns, _, c)| (columns, c.names, c.rows, c.devices, c.overlaps, c.waits, c.caused));
    Outcome::Declined(rest, Resume { lines, read })
}

/// The index of the `\n` ending the line that holds `at`, or the input's length.
fn line_end(bytes: &[u8], at: usize) -> usize {
    bytes[at..].iter().position(|&b| b == b'\n').map_or(bytes.len(), |i| at + i)
}

/// Bytes below `-`: the only ones a line's splitting looks at are among them (`,`, `"`,
/// `\n`); digits, letters, `.` and `-` are not.
const BELOW_DASH: u64 = 0x2d2d_2d2d_2d2d_2d2d;
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

/// One line's fields: ranges into the input, or for a line with quoted fields, their
/// unquoted contents.
#[derive(Default)]
struct Fields {
    ranges: Vec<(usize, usize)>,
    quoted: Option<Vec<Vec<u8>>>,
}

impl Fields {
    /// Splits the line starting at `at` on commas as the RFC 4180 reader does, declining a
    /// quote it cannot place; returns the index of the line's `\n` (or the input's end).
    fn split(&mut self, bytes: &[u8], at: usize) -> Result<usize, Decline> {
        self.ranges.clear();
        self.quoted = None;
        let (mut start, mut i) = (at, at);
        loop {
            // Eight bytes at a time while none is below `-` (the lowest such byte of a
            // word is found exactly: a borrow only runs upwards).
            while let Some(word) = bytes.get(i..i + 8) {
                let w = u64::from_le_bytes(word.try_into().unwrap_or_default());
                let low = w.wrapping_sub(BELOW_DASH) & !w & HIGH_BITS;
                if low != 0 {
                    i += low.trailing_zeros() as usize / 8;
                    break;
                }
                i += 8;
            }
            match bytes.get(i) {
                None | Some(b'\n') => {
                    self.ranges.push((start, i));
                    return Ok(i);
                }
                Some(b',') => {
                    self.ranges.push((start, i));
                    start = i + 1;
                }
                Some(b'"') => {
                    let end = line_end(bytes, i);
                    self.quoted = Some(split_quoted(&bytes[at..end])?);
                    return Ok(end);
                }
                Some(_) => {}
            }
            i += 1;
        }
    }

    fn len(&self) -> usize {
        self.quoted.as_ref().map_or(self.ranges.len(), Vec::len)
    }

    /// Field `i` of the line last split from `bytes`, as the reader hands it out
    /// (untrimmed).
    fn raw<'a>(&'a self, bytes: &'a [u8], i: usize) -> &'a [u8] {
        match &self.quoted {
            Some(q) => &q[i],
            None => &bytes[self.ranges[i].0..self.ranges[i].1],
        }
    }

    /// A line the RFC 4180 reader skips: one field of blanks.
    fn blank(&self, bytes: &[u8]) -> bool {
        self.len() == 1 && self.raw(bytes, 0).trim_ascii().is_empty()
    }
}

/// The fields of a line holding quotes, when each quote opens or closes a whole field (or
/// doubles inside one) and every quoted field ends on this line.
fn split_quoted(line: &[u8]) -> Result<Vec<Vec<u8>>, Decline> {
    let mut fields = Vec::new();
    let mut i = 0;
    loop {
        let mut field = Vec::new();
        if line.get(i) == Some(&b'"') {
            i += 1;
            loop {
                match line.get(i) {
                    // The field goes on past this line.
                    None => return Err(Decline),
                    Some(b'"') if line.get(i + 1) == Some(&b'"') => {
                        field.push(b'"');
                        i += 2;
                    }
                    Some(b'"') => {
                        i += 1;
                        break;
                    }
                    Some(&b) => {
                        field.push(b);
                        i += 1;
                    }
                }
            }
            // After the closing quote: a comma, the line's end, or the `\r` of a CRLF (kept,
            // as the reader keeps it, and trimmed with the field).
            if line.get(i) == Some(&b'\r') && i + 1 == line.len() {
                field.push(b'\r');
                i += 1;
            }
            if !matches!(line.get(i), None | Some(b',')) {
                return Err(Decline);
            }
        } else {
            while let Some(&b) = line.get(i) {
                match b {
                    b',' => break,
                    b'"' => return Err(Decline),
                    _ => field.push(b),
                }
                i += 1;
            }
        }
        fields.push(field);
        if i >= line.len() {
            return Ok(fields);
        }
        // Past the comma: another field follows, empty at the line's end.
        i += 1;
    }
}

/// What the lines read so far held, stages numbered by first appearance (or as `--stages`
/// lists them).
struct Chunk {
    rows: Vec<Row>,
    /// One per row when the file has a device column, else empty.
    devices: Vec<Option<DeviceTime>>,
    names: Vec<String>,
    /// Per name, whether the quick path may match it without finding the field's end.
    plain: Vec<bool>,
    overlaps: Vec<((u64, u32), f64)>,
    waits: Vec<WaitKeyed>,
    caused: Vec<WaitKeyed>,
    /// Lines of the file read, the header and blank lines included.
    lines: usize,
    /// The stage of the previous row: the next row's is most often the one after it.
    last_stage: usize,
}

impl Chunk {
    /// Nothing read yet after the header, which is line `lines`.
    fn new(stages: Option<&[String]>, lines: usize) -> Chunk {
        Chunk {
            rows: Vec::new(),
            devices: Vec::new(),
            plain: stages.unwrap_or_default().iter().map(|n| quick::plain(n.as_bytes())).collect(),
            names: stages.map(<[String]>::to_vec).unwrap_or_default(),
            overlaps: Vec::new(),
            waits: Vec::new(),
            caused: Vec::new(),
            lines,
            last_stage: 0,
        }
    }

    /// An empty chunk going on from this one's stage names, to read lines after the ones
    /// this chunk will read (its line numbers count from 0 until joined).
    fn fork(&self) -> Chunk {
        Chunk {
            rows: Vec::new(),
            devices: Vec::new(),
            names: self.names.clone(),
            plain: self.plain.clone(),
            overlaps: Vec::new(),
            waits: Vec::new(),
            caused: Vec::new(),
            lines: 0,
            last_stage: self.last_stage,
        }
    }

    /// Appends what `later`, forked when this chunk knew `known` stage names, read after
    /// this chunk's lines: its line numbers follow this chunk's, and the names it found
    /// take the numbers first appearance in the whole file gives them (a name this chunk
    /// found meanwhile keeps this chunk's number).
    fn join(&mut self, mut later: Chunk, known: usize) {
        let numbers: Vec<usize> = later.names[known..]
            .iter()
            .map(|name| {
                self.names.iter().position(|n| n == name).unwrap_or_else(|| {
                    self.names.push(name.clone());
                    self.plain.push(quick::plain(name.as_bytes()));
                    self.names.len() - 1
                })
            })
            .collect();
        let number = |stage: usize| stage.checked_sub(known).and_then(|i| numbers.get(i).copied()).unwrap_or(stage);
        let renumbered = numbers.iter().enumerate().any(|(i, &n)| n != known + i);
        for row in &mut later.rows {
            row.line += self.lines;
            if renumbered {
                row.stage = number(row.stage as usize) as u32;
            }
        }
        if renumbered {
            for ((_, _, stage), _) in later.waits.iter_mut().chain(later.caused.iter_mut()) {
                *stage = number(*stage);
            }
        }
        self.rows.append(&mut later.rows);
        self.devices.append(&mut later.devices);
        self.overlaps.append(&mut later.overlaps);
        self.waits.append(&mut later.waits);
        self.caused.append(&mut later.caused);
        self.lines += later.lines;
        self.last_stage = number(later.last_stage);
    }

    /// Reads the lines of `bytes` from `at` on (each ends in `\n` or at the end of
    /// `bytes`); stops at the first bad line, as the RFC 4180 reader does, or at the first
    /// line this path does not take, whose start it returns (that line not counted).
    fn parse_lines(
        &mut self,
        bytes: &[u8],
        mut at: usize,
        columns: &Columns,
        plan: &quick::Plan,
        fixed: bool,
        fields: &mut Fields,
    ) -> Result<Result<(), CsvError>, usize> {
        while at < bytes.len() {
            self.lines += 1;
            if let Some(next) = self.quick_row(bytes, at, self.lines, plan) {
                at = next;
                continue;
            }
            let line = at;
            let read = fields.split(bytes, at).and_then(|end| {
                at = end + 1;
                if fields.blank(bytes) {
                    return Ok(Ok(()));
                }
                self.row(fields, bytes, self.lines, columns, fixed)
            });
            match read {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Ok(Err(e)),
                Err(Decline) => {
                    self.lines -= 1;
                    return Err(line);
                }
            }
        }
        Ok(Ok(()))
    }

    /// One data line, checked as the RFC 4180 reader checks it, in the same order.
    fn row(
        &mut self,
        fields: &Fields,
        bytes: &[u8],
        n: usize,
        columns: &Columns,
        fixed: bool,
    ) -> Result<Result<(), CsvError>, Decline> {
        if fields.len() < columns.want {
            return Ok(Err(CsvError::FieldCount { line: n, got: fields.len(), want: columns.want }));
        }
        let field = |at: usize| fields.raw(bytes, at).trim_ascii();
        let [step_at, rank_at, stage_at, seconds_at] = columns.required;
        let bad_integer = |at: usize, column| CsvError::BadInteger { line: n, column, text: text(field(at)).into() };
        let Some(step) = integer(field(step_at), 19).or_else(|| parse::<u64>(field(step_at))) else {
            return Ok(Err(bad_integer(step_at, "step")));
        };
        let Some(rank) = integer(field(rank_at), 9).map(|r| r as u32).or_else(|| parse::<u32>(field(rank_at))) else {
            return Ok(Err(bad_integer(rank_at, "rank")));
        };
        let stage_name = field(stage_at);
        if stage_name.is_empty() {
            return Ok(Err(CsvError::BlankStage { line: n }));
        }
        let seconds = match number(field(seconds_at)) {
            Some(v) if v.is_finite() => v,
            _ => return Ok(Err(CsvError::BadSeconds { line: n, text: text(field(seconds_at)).into() })),
        };
        if seconds < 0.0 {
            return Ok(Err(CsvError::Negative { line: n, seconds }));
        }
        let next = (self.last_stage + 1) % self.names.len().max(1);
        let guess = [self.last_stage, next]
            .into_iter()
            .find(|&s| self.names.get(s).is_some_and(|s| s.as_bytes() == stage_name));
        let stage = match guess.or_else(|| self.names.iter().position(|s| s.as_bytes() == stage_name)) {
            Some(s) => s,
            None if fixed => {
                return Ok(Err(CsvError::UnknownStage {
                    line: n,
                    stage: text(stage_name).into(),
                    known: self.names.clone(),
                }));
            }
            None => {
                // A name that is not UTF-8 would be stored lossily and never match again.
                let name = std::str::from_utf8(stage_name).map_err(|_| Decline)?;
                self.names.push(name.to_string());
                self.plain.push(quick::plain(name.as_bytes()));
                self.names.len() - 1
            }
        };
        let device = match device_cells(&field, columns.device, n) {
            Ok(d) => d,
            Err(e) => return Ok(Err(e)),
        };
        if let Some(at) = columns.overlap.filter(|&at| !field(at).is_empty()) {
            match number(field(at)) {
                // The first of a (step, rank) counts: its stages' rows repeat it.
                Some(_) if self.overlaps.last().is_some_and(|(key, _)| *key == (step, rank)) => {}
                Some(v) if v.is_finite() && v >= 0.0 => self.overlaps.push(((step, rank), v + 0.0)),
                _ => return Ok(Err(CsvError::BadOverlap { line: n, text: text(field(at)).into() })),
            }
        }
        if columns.waits.iter().any(Option::is_some) {
            let key = (rank, step, stage);
            for ((at, column), out) in columns.waits.iter().zip(WAIT_COLUMNS).zip([&mut self.waits, &mut self.caused]) {
                let Some(f) = at.map(field).filter(|f| !f.is_empty()) else { continue };
                match number(f) {
                    Some(v) if v.is_finite() && v >= 0.0 => out.push((key, v + 0.0)),
                    _ => return Ok(Err(CsvError::BadWait { line: n, column, text: text(f).into() })),
                }
            }
        }
        self.rows.push(Row { step, seconds: seconds + 0.0, line: n, rank, stage: stage as u32 });
        if columns.device[0].is_some() {
            self.devices.push(device);
        }
        self.last_stage = stage;
        Ok(Ok(()))
    }
}

/// As `super::device_cells`, on this path's fields.
fn device_cells<'a>(
    field: &impl Fn(usize) -> &'a [u8],
    columns: [Option<usize>; 2],
    line: usize,
) -> Result<Option<DeviceTime>, CsvError> {
    let Some(device_column) = columns[0] else { return Ok(None) };
    let device_text = field(device_column);
    if device_text.is_empty() {
        return Ok(None);
    }
    let bad = |text: String| CsvError::BadDevice { line, text };
    let device_s = number(device_text).ok_or_else(|| bad(text(device_text).into()))?;
    let spill_text = columns[1].map_or(&b""[..], field);
    let spill_s =
        if spill_text.is_empty() { 0.0 } else { number(spill_text).ok_or_else(|| bad(text(spill_text).into()))? };
    if !(device_s.is_finite() && spill_s >= 0.0 && spill_s <= device_s) {
        return Err(bad(format!("{},{}", text(device_text), text(spill_text))));
    }
    Ok(Some(DeviceTime { device_s: device_s + 0.0, spill_s: spill_s + 0.0 }))
}

/// The table of what was read, sorted and checked as the RFC 4180 reader's rows are. The
/// waits are put in the attribution's order on a second thread meanwhile (each of the
/// three is a pass over a table of millions).
fn finish(chunk: Chunk, columns: &Columns) -> Result<StageTable, CsvError> {
    let Chunk { rows, devices, names, mut overlaps, waits, caused, .. } = chunk;
    let mut attribution = columns.waits.iter().any(Option::is_some).then_some((waits, caused));
    let in_order = |(waits, caused)| Attribution {
        waits: StageSeconds::summed(rank_major(waits)),
        caused: StageSeconds::summed(rank_major(caused)),
        ..Attribution::default()
    };
    let (table, ordered) = std::thread::scope(|scope| {
        let slot = &mut attribution;
        let ordering = std::thread::Builder::new().spawn_scoped(scope, move || slot.take().map(in_order));
        let table = super::assemble(rows, devices, names, None);
        let ordered = ordering.ok().map(|t| t.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)));
        (table, ordered.flatten())
    });
    let mut table = table?;
    // No thread could start: the same work here.
    table.attribution = ordered.or_else(|| attribution.take().map(in_order));
    // One overlap per (step, rank): the rows of its stages repeat it; the first counts.
    if !overlaps.is_sorted_by_key(|(key, _)| *key) {
        overlaps.sort_by_key(|(key, _)| *key);
    }
    overlaps.dedup_by_key(|(key, _)| *key);
    table.overlaps = overlaps;
    Ok(table)
}

/// Waits keyed (rank, step, stage), each key once (a duplicate row failed), in the
/// attribution's order. Rows as `sf steps --csv` writes them come by step, then rank, with
/// ranks numbered from 0: one stable counting pass by rank orders them, where a sort would
/// compare each key some twenty times; any other order or numbering is sorted.
fn rank_major(mut waits: Vec<WaitKeyed>) -> Vec<WaitKeyed> {
    let step_major = |((r, t, s), _): &WaitKeyed| (*t, *r, *s);
    let top = waits.iter().map(|((rank, _, _), _)| *rank as usize).max().unwrap_or(0);
    // A count per rank up to the highest, bounded by the waits held.
    if top >= 4 * waits.len() || !waits.is_sorted_by_key(step_major) {
        waits.sort_unstable_by_key(|(key, _)| *key);
        return waits;
    }
    let mut starts = vec![0usize; top + 2];
    for ((rank, _, _), _) in &waits {
        starts[*rank as usize + 1] += 1;
    }
    for k in 1..starts.len() {
        starts[k] += starts[k - 1];
    }
    let mut out = vec![((0, 0, 0), 0.0); waits.len()];
    for wait in waits {
        let slot = &mut starts[wait.0 .0 as usize];
        out[*slot] = wait;
        *slot += 1;
    }
    out
}

/// Up to `digits` ASCII digits as a number; anything else is left to `str::parse`.
fn integer(field: &[u8], digits: usize) -> Option<u64> {
    quick::digits_at(field, 0, digits).filter(|&(_, end)| end == field.len()).map(|(value, _)| value)
}

/// A number as `str::parse::<f64>` reads it, bit for bit: [`quick::decimal_at`] for the
/// forms it takes, `str::parse` for every other.
fn number(field: &[u8]) -> Option<f64> {
    quick::decimal_at(field, 0).filter(|&(_, end)| end == field.len()).map(|(value, _)| value).or_else(|| parse(field))
}

#[path = "csv_quick.rs"]
mod quick;
pub use quick::decimal_at;

#[cfg(test)]
#[path = "csv_fast_tests.rs"]
mod tests;
