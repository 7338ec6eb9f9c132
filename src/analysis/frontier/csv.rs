//! Long-format stage durations, `step,rank,stage,seconds`: one row per step, rank and
//! stage, in any order, seconds measured on the rank's own clock. Optional columns
//! `device_seconds` and `spill_seconds` carry the stage's device time and the part of it
//! after the stage's host-side end (side evidence for the forward_* labels); a blank
//! `device_seconds` means the step was not sampled. Optional `overlap_seconds` carries by
//! how much a rank's explicit stages exceeded its step's wall time (`sf steps --csv`
//! writes it from the rank logs). Fields are RFC 4180: a quoted stage name may hold commas.
//!
//! Optional `wait_seconds` and `caused_seconds` carry the rank logs' wait attribution
//! (`analysis::blame`, which `sf steps --csv` writes): the seconds the rank waited inside
//! collectives it entered during that stage of that step, and the seconds of other ranks'
//! waiting it caused, charged to that stage of that step. A blank cell means none was
//! attributed there. A file naming either column is read as the logs are: each stage's
//! time is its own time, `seconds` less `wait_seconds` (`seconds` stays the stage's
//! recorded duration), and the attribution gives W_s, the blame table and the culprits
//! ([`StageTable::take_out_waits`], [`StageTable::take_attribution`]).
//!
//! The file's world is every rank it names. A rank lacking one of a step's stages is
//! missing from that step; a step whose ranks all lack a stage has a shorter schema. Both
//! close the analyzer's window, as Sec. 3 requires.

use std::fmt;
use std::io::BufRead;
use std::sync::Arc;

use super::schema::{Schema, SchemaError};
use super::step::{DeviceTime, Step};
use crate::analysis::blame::{Attribution, StageKey, StageSeconds};

const COLUMNS: [&str; 4] = ["step", "rank", "stage", "seconds"];
const DEVICE_COLUMNS: [&str; 2] = ["device_seconds", "spill_seconds"];
/// Optional: by how much the rank's explicit stages exceeded its step's wall time, the
/// same on every row of a (step, rank); the rank logs' step vectors carry it.
const OVERLAP_COLUMN: &str = "overlap_seconds";
/// Optional: the wait attribution of the (step, rank, stage), blank where none.
const WAIT_COLUMNS: [&str; 2] = ["wait_seconds", "caused_seconds"];

/// What is wrong, on which line (1-based), worded with the fix. `StageList`: the stage list
/// given to [`read`] repeats or blanks a name.
#[derive(Clone, Debug, PartialEq)]
pub enum CsvError {
    Io(String),
    StageList(SchemaError),
    Empty,
    NoRows,
    MissingColumns { columns: Vec<&'static str> },
    FieldCount { line: usize, got: usize, want: usize },
    BadInteger { line: usize, column: &'static str, text: String },
    BadSeconds { line: usize, text: String },
    BadDevice { line: usize, text: String },
    BadOverlap { line: usize, text: String },
    BadWait { line: usize, column: &'static str, text: String },
    Negative { line: usize, seconds: f64 },
    BlankStage { line: usize },
    UnknownStage { line: usize, stage: String, known: Vec<String> },
    Duplicate { line: usize, first_line: usize, step: u64, rank: u32, stage: String },
}

impl CsvError {
    /// The line the problem is on, when it is on one.
    pub fn line(&self) -> Option<usize> {
        match self {
            CsvError::Io(_) | CsvError::StageList(_) | CsvError::Empty | CsvError::NoRows => None,
            CsvError::MissingColumns { .. } => Some(1),
            CsvError::FieldCount { line, .. }
            | CsvError::BadInteger { line, .. }
            | CsvError::BadSeconds { line, .. }
            | CsvError::BadDevice { line, .. }
            | CsvError::BadOverlap { line, .. }
            | CsvError::BadWait { line, .. }
            | CsvError::Negative { line, .. }
            | CsvError::BlankStage { line }
            | CsvError::UnknownStage { line, .. }
            | CsvError::Duplicate { line, .. } => Some(*line),
        }
    }
}

impl fmt::Display for CsvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CsvError::Io(e) => write!(f, "cannot read: {e}"),
            CsvError::StageList(e) => write!(f, "bad stage list: {e}; list each stage once in --stages"),
            CsvError::Empty => {
                write!(f, "empty file: write the header step,rank,stage,seconds, then one row per step, rank and stage")
            }
            CsvError::NoRows => write!(f, "no data rows after the header: add one row per step, rank and stage"),
            CsvError::MissingColumns { columns } => write!(
                f,
                "the header lacks column {}: the first line must name step,rank,stage,seconds",
                columns.join(", ")
            ),
            CsvError::FieldCount { got, want, .. } => {
                write!(f, "{got} fields where the header needs {want}: every row holds step,rank,stage,seconds")
            }
            CsvError::BadInteger { column, text, .. } => {
                write!(f, "{column} {text:?} is not a non-negative integer: write the {column} number")
            }
            CsvError::BadSeconds { text, .. } => {
                write!(f, "seconds {text:?} is not a finite number: write the stage's duration in seconds, e.g. 0.125")
            }
            CsvError::BadDevice { text, .. } => write!(
                f,
                "device_seconds/spill_seconds {text:?} is not a non-negative number with the spill at most the \
                 device time: write seconds, or leave device_seconds blank for a step not sampled"
            ),
            CsvError::BadOverlap { text, .. } => {
                write!(f, "overlap_seconds {text:?} is not a non-negative number: write seconds, or leave it blank")
            }
            CsvError::BadWait { column, text, .. } => write!(
                f,
                "{column} {text:?} is not a non-negative number: write seconds, or leave it blank where the rank \
                 had none"
            ),
            CsvError::Negative { seconds, .. } => write!(
                f,
                "negative duration {seconds} s: a duration is end minus start on the rank's own clock, never negative; \
                 fix the exporter or drop the row"
            ),
            CsvError::BlankStage { .. } => write!(f, "blank stage name: name the stage, e.g. data or backward"),
            CsvError::UnknownStage { stage, known, .. } => write!(
                f,
                "stage {stage:?} is not in the stage list ({}): add it to --stages or drop its rows",
                known.join(",")
            ),
            CsvError::Duplicate { first_line, step, rank, stage, .. } => write!(
                f,
                "step {step}, rank {rank}, stage {stage} again (first on line {first_line}): keep one row per step, \
                 rank and stage"
            ),
        }
    }
}

impl std::error::Error for CsvError {}

/// One value: 32 bytes, the rare device time kept beside the rows (`StageTable::devices`).
struct Row {
    step: u64,
    seconds: f64,
    line: usize,
    rank: u32,
    stage: u32,
}

impl Row {
    /// (step, rank, stage) as one number in the same order: one compare instead of three
    /// (the order check reads every row).
    fn key(&self) -> u128 {
        (u128::from(self.step) << 64) | (u128::from(self.rank) << 32) | u128::from(self.stage)
    }
}

/// A parsed file: its stage list, its ranks, and its rows sorted by step, rank and stage.
pub struct StageTable {
    schema: Arc<Schema>,
    world: Vec<u32>,
    rows: Vec<Row>,
    /// ((step, rank), overlap seconds), sorted; empty when the source has no such telemetry.
    overlaps: Vec<((u64, u32), f64)>,
    /// Each row's device time, one per row; empty when no row carries any.
    devices: Vec<Option<DeviceTime>>,
    /// The waits and caused waits of a file with the wait columns, stages indexed as in
    /// the schema.
    attribution: Option<Attribution>,
}

/// Where each column is: the four required ones, and the optional ones when the header
/// names them.
struct Columns {
    required: [usize; 4],
    device: [Option<usize>; 2],
    overlap: Option<usize>,
    waits: [Option<usize>; 2],
    /// Fields a row needs to reach every named column.
    want: usize,
}

impl Columns {
    fn of(header: &csv::ByteRecord) -> Result<Columns, CsvError> {
        let position = |name: &str| {
            header.iter().enumerate().position(|(i, f)| {
                // The first field may carry a UTF-8 byte-order mark.
                let f = if i == 0 { f.strip_prefix(b"\xef\xbb\xbf").unwrap_or(f) } else { f };
                f.trim_ascii().eq_ignore_ascii_case(name.as_bytes())
            })
        };
        let found = COLUMNS.map(position);
        let missing: Vec<&'static str> =
            COLUMNS.iter().zip(found).filter(|(_, f)| f.is_none()).map(|(c, _)| *c).collect();
        if !missing.is_empty() {
            return Err(CsvError::MissingColumns { columns: missing });
        }
        let required = found.map(|f| f.unwrap_or_default());
        let device = DEVICE_COLUMNS.map(position);
        let overlap = position(OVERLAP_COLUMN);
        let waits = WAIT_COLUMNS.map(position);
        let optional = device.iter().chain(std::iter::once(&overlap)).chain(&waits).flatten();
        let want = required.iter().chain(optional).max().map_or(0, |&c| c + 1);
        Ok(Columns { required, device, overlap, waits, want })
    }
}

/// A field as text (a stage name that is not UTF-8 is read lossily).
fn text(field: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(field)
}

fn parse<T: std::str::FromStr>(field: &[u8]) -> Option<T> {
    std::str::from_utf8(field).ok()?.parse().ok()
}

/// The parser skips empty lines without counting them; this gives each one a space (a
/// blank record, skipped below) so that every line is counted and errors name the right
/// one. (An empty line inside a quoted field gains a space too.)
struct KeepEmptyLines<R> {
    inner: R,
    at_line_start: bool,
}

impl<R: BufRead> KeepEmptyLines<R> {
    fn new(inner: R) -> KeepEmptyLines<R> {
        KeepEmptyLines { inner, at_line_start: true }
    }
}

impl<R: BufRead> std::io::Read for KeepEmptyLines<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let input = self.inner.fill_buf()?;
        if input.is_empty() || out.is_empty() {
            return Ok(0);
        }
        if self.at_line_start && input[0] == b'\n' {
            // An empty line: a space first, then (maybe on the next read) its newline.
            out[0] = b' ';
            self.at_line_start = false;
            return Ok(1);
        }
        // Copy up to and including the next newline that starts an empty line, so that one
        // is handled by the branch above on the next call.
        let take = input.len().min(out.len());
        let end = input[..take].windows(2).position(|w| w == b"\n\n").map_or(take, |i| i + 1);
        out[..end].copy_from_slice(&input[..end]);
        self.at_line_start = input[end - 1] == b'\n';
        self.inner.consume(end);
        Ok(end)
    }
}

/// Field `at` without surrounding blanks (and the `\r` of a CRLF line end). Trimming only
/// the fields used is cheaper than the parser trimming every field.
fn field(record: &csv::ByteRecord, at: usize) -> &[u8] {
    record[at].trim_ascii()
}

/// A line holding nothing but blanks.
fn blank(record: &csv::ByteRecord) -> bool {
    record.len() == 1 && field(record, 0).is_empty()
}

fn read_error(e: csv::Error) -> CsvError {
    CsvError::Io(e.to_string())
}

/// Reads the whole input, a CSV as RFC 4180 writes it (quoted fields may hold commas,
/// quotes and newlines; fields are trimmed). `stages`, when given, fixes the stage order
/// and rejects any other stage; otherwise stages are ordered by first appearance.
/// A file as `sf steps --csv` writes it takes the fast path (csv_fast.rs); from a line that
/// path declines on, the general reader below goes on, with the same results.
pub fn read<R: BufRead>(input: R, stages: Option<&[String]>) -> Result<StageTable, CsvError> {
    if let Some(stages) = stages {
        Schema::new(stages.to_vec()).map_err(CsvError::StageList)?;
    }
    match fast::read(input, stages) {
        fast::Outcome::Done(result) => result,
        fast::Outcome::Declined(rest, resume) => read_general(rest, stages, resume),
    }
}

/// A wait or caused wait keyed as `Attribution` keys them.
type WaitKeyed = (StageKey, f64);

/// What the fast path read before the line it declined: the lines before it, and when it
/// had read the header, the columns, stage names, rows (and their device times), overlaps,
/// waits and caused waits.
struct Resume {
    lines: usize,
    #[allow(clippy::type_complexity)]
    read: Option<(
        Columns,
        Vec<String>,
        Vec<Row>,
        Vec<Option<DeviceTime>>,
        Vec<((u64, u32), f64)>,
        Vec<WaitKeyed>,
        Vec<WaitKeyed>,
    )>,
}

/// The general reader, record by record through the `csv` crate: what [`read`] hands the
/// rest of a file from the line its fast path declines (public so that benches can
/// compare the two).
pub fn read_rfc4180(input: impl BufRead, stages: Option<&[String]>) -> Result<StageTable, CsvError> {
    read_general(input, stages, Resume { lines: 0, read: None })
}

/// [`read_rfc4180`] on the input after `resume.lines` lines, going on from what was read.
fn read_general(input: impl BufRead, stages: Option<&[String]>, resume: Resume) -> Result<StageTable, CsvError> {
    // `\n` alone ends a record (a `\r` before it is trimmed with the field), so the
    // parser's line numbers are the file's, less the lines before the input.
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .terminator(csv::Terminator::Any(b'\n'))
        .from_reader(KeepEmptyLines::new(input));
    let mut record = csv::ByteRecord::new();
    let (columns, mut names, mut rows, mut devices, mut overlaps, waits, caused) = match resume.read {
        Some(read) => read,
        None => {
            let columns = loop {
                if !reader.read_byte_record(&mut record).map_err(read_error)? {
                    return Err(CsvError::Empty);
                }
                if !blank(&record) {
                    break Columns::of(&record)?;
                }
            };
            let names = stages.map(<[String]>::to_vec).unwrap_or_default();
            (columns, names, Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new())
        }
    };
    let fixed = stages.is_some();
    let [step_at, rank_at, stage_at, seconds_at] = columns.required;
    let mut attribution = columns.waits.iter().any(Option::is_some).then_some((waits, caused));
    while reader.read_byte_record(&mut record).map_err(read_error)? {
        if blank(&record) {
            continue;
        }
        let n = resume.lines + record.position().map_or(0, |p| p.line() as usize);
        if record.len() < columns.want {
            return Err(CsvError::FieldCount { line: n, got: record.len(), want: columns.want });
        }
        let bad_integer =
            |at: usize, column| CsvError::BadInteger { line: n, column, text: text(field(&record, at)).into() };
        let step: u64 = parse(field(&record, step_at)).ok_or_else(|| bad_integer(step_at, "step"))?;
        let rank: u32 = parse(field(&record, rank_at)).ok_or_else(|| bad_integer(rank_at, "rank"))?;
        let stage_name = field(&record, stage_at);
        if stage_name.is_empty() {
            return Err(CsvError::BlankStage { line: n });
        }
        let seconds: f64 = match parse::<f64>(field(&record, seconds_at)) {
            Some(v) if v.is_finite() => v,
            _ => return Err(CsvError::BadSeconds { line: n, text: text(field(&record, seconds_at)).into() }),
        };
        if seconds < 0.0 {
            return Err(CsvError::Negative { line: n, seconds });
        }
        let stage = match names.iter().position(|s| s.as_bytes() == stage_name) {
            Some(s) => s,
            None if fixed => {
                return Err(CsvError::UnknownStage { line: n, stage: text(stage_name).into(), known: names });
            }
            None => {
                names.push(text(stage_name).into());
                names.len() - 1
            }
        };
        let device = device_cells(&record, columns.device, n)?;
        if let Some(at) = columns.overlap.filter(|&at| !field(&record, at).is_empty()) {
            match parse::<f64>(field(&record, at)) {
                Some(v) if v.is_finite() && v >= 0.0 => overlaps.push(((step, rank), v + 0.0)),
                _ => return Err(CsvError::BadOverlap { line: n, text: text(field(&record, at)).into() }),
            }
        }
        if let Some((waits, caused_waits)) = &mut attribution {
            let [wait, caused] = wait_cells(&record, columns.waits, n)?;
            // Rows are unique per (step, rank, stage) (a duplicate is refused below).
            let key = (rank, step, stage);
            waits.extend(wait.map(|s| (key, s)));
            caused_waits.extend(caused.map(|s| (key, s)));
        }
        // `+ 0.0` turns -0.0 into 0.0, which the rest of the analysis assumes.
        rows.push(Row { step, seconds: seconds + 0.0, line: n, rank, stage: stage as u32 });
        if columns.device[0].is_some() {
            devices.push(device);
        }
    }
    let mut table = assemble(rows, devices, names, None)?;
    table.attribution = attribution.map(|(waits, caused)| Attribution {
        waits: StageSeconds::summed(waits),
        caused: StageSeconds::summed(caused),
        ..Attribution::default()
    });
    // One overlap per (step, rank): the rows of its stages repeat it; the first counts.
    overlaps.sort_by_key(|(key, _)| *key);
    overlaps.dedup_by_key(|(key, _)| *key);
    table.overlaps = overlaps;
    Ok(table)
}

/// Sorts, checks and indexes rows. `devices` is empty or holds one entry per row. `world`
/// is every rank of the job when the source knows it (rank logs' headers); a CSV's world
/// is the ranks it names.
fn assemble(
    mut rows: Vec<Row>,
    mut devices: Vec<Option<DeviceTime>>,
    names: Vec<String>,
    world: Option<Vec<u32>>,
) -> Result<StageTable, CsvError> {
    if rows.is_empty() {
        return Err(CsvError::NoRows);
    }
    // Rows as `sf steps --csv` writes them, and the logs' step vectors, come in order
    // already: one pass finds that there is nothing to sort and no duplicate, and reads
    // the ranks (each pass over every row is a tenth of the reading after the parse).
    let runs = match ordered_runs(&rows) {
        Some(runs) => runs,
        None => {
            if devices.is_empty() {
                rows.sort_by_key(|r| (r.key(), r.line));
            } else {
                let mut both: Vec<(Row, Option<DeviceTime>)> = rows.into_iter().zip(devices).collect();
                both.sort_by_key(|(r, _)| (r.key(), r.line));
                (rows, devices) = both.into_iter().unzip();
            }
            if let Some(e) = first_duplicate(&rows, &names) {
                return Err(e);
            }
            rows.chunk_by(|a, b| a.rank == b.rank).map(|run| run[0].rank).collect()
        }
    };
    let world = world_of(runs, world.unwrap_or_default());
    // Checked above when given; first appearance never repeats or blanks a name.
    let schema = Schema::new(names).map_err(CsvError::StageList)?;
    if devices.iter().all(Option::is_none) {
        devices = Vec::new();
    }
    Ok(StageTable { schema: Arc::new(schema), world, rows, overlaps: Vec::new(), devices, attribution: None })
}

/// The rank of each run of rows of one rank, when `rows` are in strict key order (no
/// duplicate); none when they are not.
fn ordered_runs(rows: &[Row]) -> Option<Vec<u32>> {
    let mut runs = Vec::from_iter(rows.first().map(|r| r.rank));
    for p in rows.windows(2) {
        if p[0].key() >= p[1].key() {
            return None;
        }
        if p[0].rank != p[1].rank {
            runs.push(p[1].rank);
        }
    }
    Some(runs)
}

/// `known` and every rank of `runs` (one per run of rows), ascending, once each.
fn world_of(runs: Vec<u32>, mut known: Vec<u32>) -> Vec<u32> {
    let top = runs.iter().chain(&known).copied().max().unwrap_or(0) as usize;
    // Ranks numbered from 0 up (every job's): a bit per rank up to the highest, a size
    // bounded by the rows read, instead of sorting a rank per run.
    if top < 64 * (runs.len() + known.len()) {
        let mut seen = vec![0u64; top / 64 + 1];
        for &rank in runs.iter().chain(&known) {
            seen[rank as usize / 64] |= 1 << (rank % 64);
        }
        known.clear();
        for (word, bits) in seen.into_iter().enumerate() {
            let mut bits = bits;
            while bits != 0 {
                known.push((word * 64) as u32 + bits.trailing_zeros());
                bits &= bits - 1;
            }
        }
        return known;
    }
    known.extend(runs);
    known.sort_unstable();
    known.dedup();
    known
}

/// A table from durations that did not come from a CSV file: the rank logs' step vectors.
/// Stages are ordered by first appearance in `durations` (step, rank, stage, seconds);
/// `world` lists every rank of the job, so ranks without any step count as missing.
/// Errors report the position in `durations` as the line. `overlaps` gives, per
/// (step, rank), the seconds by which the explicit stages exceeded the step's wall time;
/// `devices`, per (step, rank, stage), the device time of the steps the CUDA door sampled
/// (a sample for a stage the durations lack is ignored).
pub fn from_durations(
    world: Vec<u32>,
    durations: impl IntoIterator<Item = (u64, u32, String, f64)>,
    overlaps: impl IntoIterator<Item = (u64, u32, f64)>,
    devices: impl IntoIterator<Item = (u64, u32, String, DeviceTime)>,
) -> Result<StageTable, CsvError> {
    let mut names: Vec<String> = Vec::new();
    let mut id_of = |name: String| match names.iter().position(|s| *s == name) {
        Some(id) => id as u32,
        None => {
            names.push(name);
            names.len() as u32 - 1
        }
    };
    let durations: Vec<_> = durations.into_iter().map(|(step, rank, name, s)| (step, rank, id_of(name), s)).collect();
    let devices: Vec<_> = devices.into_iter().map(|(step, rank, name, d)| (step, rank, id_of(name), d)).collect();
    from_stage_ids(world, &names, durations, overlaps, devices)
}

/// [`from_durations`] with each stage given as an index into `names` (a job-wide name
/// table: the logs' values carry no name of their own), the same table out.
pub fn from_stage_ids(
    world: Vec<u32>,
    names: &[String],
    durations: impl IntoIterator<Item = (u64, u32, u32, f64)>,
    overlaps: impl IntoIterator<Item = (u64, u32, f64)>,
    devices: impl IntoIterator<Item = (u64, u32, u32, DeviceTime)>,
) -> Result<StageTable, CsvError> {
    // The table's stage of each name id, by first appearance in `durations`.
    let mut stage_of: Vec<Option<u32>> = vec![None; names.len()];
    let mut stages: Vec<String> = Vec::new();
    let mut rows = Vec::new();
    for (i, (step, rank, id, seconds)) in durations.into_iter().enumerate() {
        if !seconds.is_finite() || seconds < 0.0 {
            return Err(CsvError::BadSeconds { line: i + 1, text: seconds.to_string() });
        }
        let stage = *stage_of[id as usize].get_or_insert_with(|| {
            stages.push(names[id as usize].clone());
            stages.len() as u32 - 1
        });
        rows.push(Row { step, seconds: seconds + 0.0, line: i + 1, rank, stage });
    }
    let mut table = assemble(rows, Vec::new(), stages, Some(world))?;
    for (step, rank, id, device) in devices {
        let Some(stage) = stage_of.get(id as usize).copied().flatten() else { continue };
        let key = Row { step, rank, stage, seconds: 0.0, line: 0 }.key();
        if let Ok(i) = table.rows.binary_search_by_key(&key, Row::key) {
            if !(device.spill_s >= 0.0 && device.spill_s <= device.device_s && device.device_s.is_finite()) {
                return Err(CsvError::BadDevice { line: table.rows[i].line, text: format!("{device:?}") });
            }
            if table.devices.is_empty() {
                table.devices = vec![None; table.rows.len()];
            }
            table.devices[i] = Some(device);
        }
    }
    table.overlaps = overlaps.into_iter().map(|(step, rank, seconds)| ((step, rank), seconds)).collect();
    table.overlaps.sort_by_key(|(key, _)| *key);
    Ok(table)
}

/// The row's device time when the file has a `device_seconds` column and this row fills it.
fn device_cells(
    record: &csv::ByteRecord,
    columns: [Option<usize>; 2],
    line: usize,
) -> Result<Option<DeviceTime>, CsvError> {
    let Some(device_column) = columns[0] else { return Ok(None) };
    let device_text = field(record, device_column);
    if device_text.is_empty() {
        return Ok(None);
    }
    let bad = |text: String| CsvError::BadDevice { line, text };
    let device_s: f64 = parse(device_text).ok_or_else(|| bad(text(device_text).into()))?;
    let spill_text = columns[1].map_or(&b""[..], |c| field(record, c));
    let spill_s: f64 =
        if spill_text.is_empty() { 0.0 } else { parse(spill_text).ok_or_else(|| bad(text(spill_text).into()))? };
    if !(device_s.is_finite() && spill_s >= 0.0 && spill_s <= device_s) {
        return Err(bad(format!("{},{}", text(device_text), text(spill_text))));
    }
    Ok(Some(DeviceTime { device_s: device_s + 0.0, spill_s: spill_s + 0.0 }))
}

/// The row's wait and caused wait, each when its column is named and filled.
fn wait_cells(
    record: &csv::ByteRecord,
    columns: [Option<usize>; 2],
    line: usize,
) -> Result<[Option<f64>; 2], CsvError> {
    let mut cells = [None; 2];
    for ((cell, at), column) in cells.iter_mut().zip(columns).zip(WAIT_COLUMNS) {
        let Some(f) = at.map(|at| field(record, at)).filter(|f| !f.is_empty()) else { continue };
        match parse::<f64>(f) {
            Some(v) if v.is_finite() && v >= 0.0 => *cell = Some(v + 0.0),
            _ => return Err(CsvError::BadWait { line, column, text: text(f).into() }),
        }
    }
    Ok(cells)
}

/// The duplicate whose second row comes first in the file.
fn first_duplicate(rows: &[Row], names: &[String]) -> Option<CsvError> {
    rows.windows(2).filter(|p| p[0].key() == p[1].key()).min_by_key(|p| p[1].line).map(|p| CsvError::Duplicate {
        line: p[1].line,
        first_line: p[0].line,
        step: p[0].step,
        rank: p[0].rank,
        stage: names[p[0].stage as usize].clone(),
    })
}

impl StageTable {
    pub fn schema(&self) -> &Arc<Schema> {
        &self.schema
    }

    /// Every rank the file names, ascending.
    pub fn world(&self) -> &[u32] {
        &self.world
    }

    /// The file's wait attribution (stages indexed as in the schema), when it has the wait
    /// columns; `None` after the first call.
    pub fn take_attribution(&mut self) -> Option<Attribution> {
        self.attribution.take()
    }

    /// Every rank's time in each stage, summed in row order: before
    /// [`StageTable::take_out_waits`], with the waits; after it, own time.
    pub fn stage_time_s(&self) -> Vec<f64> {
        let mut stage_time_s = vec![0.0; self.schema.len()];
        for row in &self.rows {
            stage_time_s[row.stage as usize] += row.seconds;
        }
        stage_time_s
    }

    /// Takes each rank's in-collective waits (`a`, stages indexed as in the schema) out
    /// of its stage times, leaving its own time. The one way both sources (rank logs, a
    /// CSV with the wait columns) get own time: the same inputs give the same bits.
    pub fn take_out_waits(&mut self, a: &Attribution) {
        // A row without a wait keeps its time: `seconds - 0` is `seconds`, never negative.
        waits::for_each_wait(&mut self.rows, &a.waits, |row, wait| {
            // A call entered in this stage may outlast it: own time stops at zero.
            row.seconds = (row.seconds - wait).max(0.0);
        });
    }
}

#[path = "csv_fast.rs"]
mod fast;
/// The fast path's number reader (public so that benches can build on it).
pub use fast::decimal_at;

#[path = "csv_waits.rs"]
mod waits;

#[path = "csv_group.rs"]
mod group;
#[path = "csv_steps.rs"]
mod steps;

#[cfg(test)]
#[path = "csv_tests.rs"]
mod tests;
