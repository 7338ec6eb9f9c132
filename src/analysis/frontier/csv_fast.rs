//! The fast path of [`super::read`]: the whole input in memory, split into lines on bytes,
//! numbers in the forms `sf steps --csv` writes parsed by hand, chunks of lines parsed on
//! every core. It gives exactly what the RFC 4180 reader gives (the same rows, errors and
//! line numbers) or declines, and that reader takes the file: a quote anywhere but around
//! a whole one-line field, a stage name that is not UTF-8, or an input over
//! [`MAX_IN_MEMORY`].

use std::collections::BTreeMap;
use std::io::{BufRead, Read};

use super::{parse, text, Columns, CsvError, DeviceTime, Row, StageTable, WAIT_COLUMNS};
use crate::analysis::blame::Attribution;

/// The most input held in memory at once (law 5: the file's size is not trusted). A larger
/// file goes to the RFC 4180 reader, which streams the rest after what was read.
pub(super) const MAX_IN_MEMORY: u64 = 1 << 30;

/// Below this many bytes one thread parses everything: threads would cost more than they save.
const PARALLEL_FROM: usize = 4 << 20;

/// What the fast path made of the input: a table or an error the RFC 4180 reader would
/// give too, or the input handed back (what was read, then the rest) for that reader.
pub(super) enum Outcome<R> {
    Done(Result<StageTable, CsvError>),
    Declined(std::io::Chain<std::io::Cursor<Vec<u8>>, R>),
}

/// A line the fast path does not take.
struct Decline;

/// Parses `input` when it can. `stages` is the checked `--stages` list.
pub(super) fn read<R: BufRead>(mut input: R, stages: Option<&[String]>) -> Outcome<R> {
    let mut bytes = Vec::new();
    if let Err(e) = (&mut input).take(MAX_IN_MEMORY + 1).read_to_end(&mut bytes) {
        return Outcome::Done(Err(CsvError::Io(e.to_string())));
    }
    if bytes.len() as u64 > MAX_IN_MEMORY {
        return Outcome::Declined(std::io::Cursor::new(bytes).chain(input));
    }
    match parse_all(&bytes, stages) {
        Ok(result) => Outcome::Done(result),
        Err(Decline) => Outcome::Declined(std::io::Cursor::new(bytes).chain(input)),
    }
}

/// The header, then the rows on every core.
fn parse_all(bytes: &[u8], stages: Option<&[String]>) -> Result<Result<StageTable, CsvError>, Decline> {
    let (mut at, mut line) = (0, 0);
    let mut fields = Fields::default();
    let columns = loop {
        if at >= bytes.len() {
            return Ok(Err(CsvError::Empty));
        }
        let end = fields.split(bytes, at)?;
        line += 1;
        at = end + 1;
        if !fields.blank(bytes) {
            let header = csv::ByteRecord::from((0..fields.len()).map(|i| fields.raw(bytes, i)).collect::<Vec<_>>());
            match Columns::of(&header) {
                Ok(columns) => break columns,
                Err(e) => return Ok(Err(e)),
            }
        }
    };
    let body = bytes.get(at..).unwrap_or_default();
    let chunks = split_chunks(body);
    let fixed = stages.is_some();
    let names = stages.map(<[String]>::to_vec).unwrap_or_default();
    // Every chunk but the first numbers its lines from 0 (counting the lines before it
    // would cost a pass over the file); they are shifted below.
    // The first chunk's rows take the others' after them: room for all, reserved only.
    let room = |k: usize| if k == 0 { body.len() } else { chunks[k].len() };
    let parse = |k: usize, base: usize| Chunk::parse(chunks[k], room(k), base, &columns, &names, fixed);
    let parsed: Vec<Result<Result<Chunk, CsvError>, Decline>> = if chunks.len() == 1 {
        vec![parse(0, line)]
    } else {
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..chunks.len())
                .map(|k| {
                    let parse = &parse;
                    scope.spawn(move || parse(k, if k == 0 { line } else { 0 }))
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap_or(Err(Decline))).collect()
        })
    };
    // The first chunk that declines or fails decides, as the first bad line would.
    let mut done = Vec::with_capacity(parsed.len());
    // Lines before the chunk at hand; the first chunk numbered its own from there.
    let mut before = line;
    for (k, p) in parsed.into_iter().enumerate() {
        let shift = if k == 0 { 0 } else { before };
        match p? {
            Ok(mut chunk) => {
                if shift > 0 {
                    chunk.rows.iter_mut().for_each(|r| r.line += shift);
                }
                before += chunk.lines;
                done.push(chunk);
            }
            // Parsed again from its true first line, to name the line in the file.
            Err(e) if k > 0 => return Ok(Err(parse(k, shift)?.err().unwrap_or(e))),
            Err(e) => return Ok(Err(e)),
        }
    }
    Ok(merge(done, names, fixed, &columns))
}

/// `body` in chunks of whole lines, one per core for a large body.
fn split_chunks(body: &[u8]) -> Vec<&[u8]> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()).min(8);
    let parts = if body.len() < PARALLEL_FROM { 1 } else { cores };
    let mut chunks = Vec::with_capacity(parts);
    let mut start = 0;
    for k in 1..=parts {
        let target = (body.len() * k / parts).max(start);
        let end = if k == parts { body.len() } else { (line_end(body, target) + 1).min(body.len()) };
        chunks.push(&body[start..end]);
        start = end;
    }
    chunks
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

/// What one chunk of lines held, its stages numbered by first appearance in it (or as
/// `--stages` lists them).
struct Chunk {
    rows: Vec<Row>,
    names: Vec<String>,
    overlaps: Vec<((u64, u32), f64)>,
    waits: Vec<((u32, u64, usize), f64)>,
    caused: Vec<((u32, u64, usize), f64)>,
    /// Lines read.
    lines: usize,
    /// The stage of the previous row: the next row's is most often the one after it.
    last_stage: usize,
}

impl Chunk {
    /// The rows of `bytes`, whose first line is line `line + 1` of the file, with room for
    /// the rows of `room` bytes; stops at the first bad line, as the RFC 4180 reader does.
    fn parse(
        bytes: &[u8],
        room: usize,
        line: usize,
        columns: &Columns,
        names: &[String],
        fixed: bool,
    ) -> Result<Result<Chunk, CsvError>, Decline> {
        let mut chunk = Chunk {
            rows: Vec::with_capacity(room / 24),
            names: names.to_vec(),
            overlaps: Vec::new(),
            waits: Vec::new(),
            caused: Vec::new(),
            lines: 0,
            last_stage: 0,
        };
        let mut fields = Fields::default();
        let mut at = 0;
        while at < bytes.len() {
            at = fields.split(bytes, at)? + 1;
            chunk.lines += 1;
            if fields.blank(bytes) {
                continue;
            }
            if let Err(e) = chunk.row(&fields, bytes, line + chunk.lines, columns, fixed)? {
                return Ok(Err(e));
            }
        }
        Ok(Ok(chunk))
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
        self.rows.push(Row { step, seconds: seconds + 0.0, line: n, rank, stage: stage as u32, device });
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

/// Joins the chunks in file order: stages renumbered by first appearance in the file,
/// then sorted and checked as the RFC 4180 reader's rows are.
fn merge(chunks: Vec<Chunk>, fixed_names: Vec<String>, fixed: bool, columns: &Columns) -> Result<StageTable, CsvError> {
    let mut names = fixed_names;
    let mut chunks = chunks.into_iter();
    let Some(first) = chunks.next() else { return super::assemble(Vec::new(), names, None) };
    let (mut rows, mut overlaps, mut waits, mut caused) = (first.rows, first.overlaps, first.waits, first.caused);
    if !fixed {
        names = first.names;
    }
    for mut chunk in chunks {
        if !fixed {
            let map: Vec<usize> = chunk
                .names
                .iter()
                .map(|name| match names.iter().position(|s| s == name) {
                    Some(s) => s,
                    None => {
                        names.push(name.clone());
                        names.len() - 1
                    }
                })
                .collect();
            if map.iter().enumerate().any(|(i, &s)| i != s) {
                for row in &mut chunk.rows {
                    row.stage = map[row.stage as usize] as u32;
                }
                for ((_, _, stage), _) in chunk.waits.iter_mut().chain(chunk.caused.iter_mut()) {
                    *stage = map[*stage];
                }
            }
        }
        rows.append(&mut chunk.rows);
        overlaps.append(&mut chunk.overlaps);
        waits.append(&mut chunk.waits);
        caused.append(&mut chunk.caused);
    }
    let mut table = super::assemble(rows, names, None)?;
    if columns.waits.iter().any(Option::is_some) {
        // Keys are unique (a duplicate row failed above): an unstable sort leaves the
        // same map, and the map's own sort then finds its input in order.
        waits.sort_unstable_by_key(|(key, _)| *key);
        caused.sort_unstable_by_key(|(key, _)| *key);
        table.attribution = Some(Attribution {
            waits: BTreeMap::from_iter(waits),
            caused: BTreeMap::from_iter(caused),
            ..Attribution::default()
        });
    }
    // One overlap per (step, rank): the rows of its stages repeat it; the first counts.
    overlaps.sort_by_key(|(key, _)| *key);
    overlaps.dedup_by_key(|(key, _)| *key);
    table.overlaps = overlaps;
    Ok(table)
}

/// Up to `digits` ASCII digits as a number; anything else is left to `str::parse`.
fn integer(field: &[u8], digits: usize) -> Option<u64> {
    if field.is_empty() || field.len() > digits {
        return None;
    }
    let mut value = 0u64;
    for &b in field {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        value = value * 10 + u64::from(d);
    }
    Some(value)
}

/// Powers of ten a double holds exactly.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20,
    1e21, 1e22,
];

/// A number as `str::parse::<f64>` reads it, bit for bit. `DIGITS[.DIGITS]` whose digits
/// fit in 53 bits is one exact integer divided by an exact power of ten, which IEEE
/// division rounds correctly (Clinger's fast path); every other form goes to `str::parse`.
fn number(field: &[u8]) -> Option<f64> {
    decimal(field).or_else(|| parse::<f64>(field))
}

fn decimal(field: &[u8]) -> Option<f64> {
    if field.len() > 19 {
        return None;
    }
    let (mut mantissa, mut fraction, mut point) = (0u64, 0usize, false);
    for (i, &b) in field.iter().enumerate() {
        if b == b'.' && !point && i > 0 {
            point = true;
            continue;
        }
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        mantissa = mantissa * 10 + u64::from(d);
        fraction += usize::from(point);
    }
    if field.is_empty() || (point && fraction == 0) || mantissa > 1 << 53 {
        return None;
    }
    Some(mantissa as f64 / POW10[fraction])
}

#[cfg(test)]
#[path = "csv_fast_tests.rs"]
mod tests;
