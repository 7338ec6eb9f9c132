//! One pass over a line in the form `sf steps --csv` writes: unquoted fields without
//! surrounding blanks, integers and decimals of plain digits, a stage already named, every
//! value valid. Such a line is read field by field straight into the chunk; any other
//! line (blank, quoted, a new stage, a number in another form, a bad value) is left
//! untouched to `Fields::split` and `Chunk::row`, which read it, or fail on it, exactly as
//! the RFC 4180 reader does. A line read here gives what those would give.

use super::{Chunk, Columns, DeviceTime, Row};

/// What a column holds, by its position in a line.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Role {
    Skip,
    Step,
    Rank,
    Stage,
    Seconds,
    /// A cell of `Cells`, which may be blank.
    Cell(usize),
}

/// `device_seconds`, `spill_seconds`, `overlap_seconds`, `wait_seconds`, `caused_seconds`.
type Cells = [Option<f64>; 5];
const DEVICE: usize = 0;
const SPILL: usize = 1;
const OVERLAP: usize = 2;
const WAIT: usize = 3;
const CAUSED: usize = 4;

/// How to read a line of this file.
pub(super) struct Plan {
    /// Each column's role, up to the last one the header names.
    roles: Vec<Role>,
    /// The file has a device column: every row gets a device entry.
    device: bool,
    /// The file has a wait column: rows carry the attribution.
    waits: bool,
    /// The required columns come first, in order, as `sf steps --csv` writes them: read
    /// without looking their roles up.
    ordered: bool,
}

pub(super) fn plan(columns: &Columns) -> Plan {
    let mut roles = vec![Role::Skip; columns.want];
    for (at, role) in columns.required.iter().zip([Role::Step, Role::Rank, Role::Stage, Role::Seconds]) {
        roles[*at] = role;
    }
    let cells = [columns.device[0], columns.device[1], columns.overlap, columns.waits[0], columns.waits[1]];
    for (cell, at) in cells.iter().enumerate() {
        if let Some(at) = at {
            roles[*at] = Role::Cell(cell);
        }
    }
    let ordered = columns.required == [0, 1, 2, 3];
    Plan { roles, device: columns.device[0].is_some(), waits: columns.waits.iter().any(Option::is_some), ordered }
}

/// At most `most` ASCII digits from `at`, as a number, and where they stop; none when
/// there is no digit or more than `most` (at most 19: a u64 holds any 19 digits).
#[inline]
pub(super) fn digits_at(bytes: &[u8], at: usize, most: usize) -> Option<(u64, usize)> {
    let (value, i) = more_digits(bytes, at, 0);
    (i > at && i - at <= most.min(19)).then_some((value, i))
}

/// Powers of ten a double holds exactly.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20,
    1e21, 1e22,
];

/// `DIGITS[.DIGITS]` from `at` as `str::parse::<f64>` reads it, bit for bit, and where it
/// stops: digits that fit in 53 bits are one exact integer divided by an exact power of
/// ten, which IEEE division rounds correctly (Clinger's fast path). None for any other
/// form (a sign, an exponent, a point without digits on both sides, too many digits).
#[inline]
pub fn decimal_at(bytes: &[u8], at: usize) -> Option<(f64, usize)> {
    let (mut mantissa, point) = more_digits(bytes, at, 0);
    if point == at {
        return None;
    }
    let (mut end, mut fraction) = (point, 0);
    if bytes.get(point) == Some(&b'.') {
        (mantissa, end) = more_digits(bytes, point + 1, mantissa);
        fraction = end - point - 1;
        if fraction == 0 {
            return None;
        }
    }
    // 19 digits fit in a u64 (the arithmetic above wraps only past them).
    (point - at + fraction <= 19 && mantissa <= 1 << 53).then(|| (mantissa as f64 / POW10[fraction], end))
}

/// `value` continued with the ASCII digits from `at` (wrapping past 19 of them), and where
/// they stop. Eight digits at a time while eight follow (a fraction as sf writes it has
/// six to nine).
#[inline]
fn more_digits(bytes: &[u8], at: usize, mut value: u64) -> (u64, usize) {
    let mut i = at;
    while let Some(word) = bytes.get(i..i + 8) {
        let w = u64::from_le_bytes(word.try_into().unwrap_or_default());
        // Every byte 0x30..=0x39: its high nibble is 3, and adding 6 leaves it 3.
        let high = w & 0xf0f0_f0f0_f0f0_f0f0;
        let carried = w.wrapping_add(0x0606_0606_0606_0606) & 0xf0f0_f0f0_f0f0_f0f0;
        if high | (carried >> 4) != 0x3333_3333_3333_3333 {
            break;
        }
        // The first byte is the most significant digit: pairs, then quads, then all eight.
        let d = w & 0x0f0f_0f0f_0f0f_0f0f;
        let d = (d.wrapping_mul(10 << 8 | 1) >> 8) & 0x00ff_00ff_00ff_00ff;
        let d = (d.wrapping_mul(100 << 16 | 1) >> 16) & 0x0000_ffff_0000_ffff;
        let d = d.wrapping_mul(10_000 << 32 | 1) >> 32;
        value = value.wrapping_mul(100_000_000).wrapping_add(d);
        i += 8;
    }
    while let Some(&b) = bytes.get(i) {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        value = value.wrapping_mul(10).wrapping_add(u64::from(d));
        i += 1;
    }
    (value, i)
}

/// A finite, non-negative number from `at` (every numeric column wants one), as the
/// general path reads it, and where it stops: [`decimal_at`], or for a field in any other
/// form without blanks around it (a sum of waits with 17 significant digits), `str::parse`.
#[inline]
fn value_at(bytes: &[u8], at: usize) -> Option<(f64, usize)> {
    if let Some((value, stop)) = decimal_at(bytes, at) {
        // The caller takes a `\r` only at the line's end.
        if matches!(bytes.get(stop), None | Some(b',' | b'\n' | b'\r')) {
            return Some((value, stop));
        }
    }
    let end = field_end(bytes, at)?;
    // A CRLF line's `\r` trims away; any other blank goes to the general path.
    let text = bytes[at..end].strip_suffix(b"\r").unwrap_or(&bytes[at..end]);
    if text.first().is_none_or(u8::is_ascii_whitespace) || text.last().is_none_or(u8::is_ascii_whitespace) {
        return None;
    }
    let value: f64 = std::str::from_utf8(text).ok()?.parse().ok()?;
    // `+ 0.0`: -0 reads as 0, as the general path stores it.
    (value.is_finite() && value >= 0.0).then_some((value + 0.0, at + text.len()))
}

/// The end of the unquoted field from `at`: the next `,` or `\n`, or the input's end;
/// none at a quote.
#[inline]
fn field_end(bytes: &[u8], at: usize) -> Option<usize> {
    let mut i = at;
    while let Some(&b) = bytes.get(i) {
        match b {
            b',' | b'\n' => return Some(i),
            b'"' => return None,
            _ => i += 1,
        }
    }
    Some(i)
}

impl Chunk {
    /// Reads the line starting at `at` when it has the form above; returns where the next
    /// line starts. `None` leaves the chunk as it was. `n`: the line's number.
    #[inline]
    pub(super) fn quick_row(&mut self, bytes: &[u8], at: usize, n: usize, plan: &Plan) -> Option<usize> {
        let roles = &plan.roles[..];
        let (mut step, mut rank, mut stage, mut seconds) = (0u64, 0u32, 0usize, 0.0f64);
        let mut cells: Cells = [None; 5];
        let mut p = at;
        let last = roles.len() - 1;
        let mut from = 0;
        if plan.ordered && last > 3 {
            (step, p) = digits_at(bytes, p, 19)?;
            let (r, end) = digits_at(bytes, comma(bytes, p)?, 9)?;
            rank = r as u32;
            (stage, p) = self.stage_at(bytes, comma(bytes, end)?)?;
            (seconds, p) = value_at(bytes, comma(bytes, p)?)?;
            p = comma(bytes, p)?;
            from = 4;
        }
        for (j, &role) in roles.iter().enumerate().skip(from) {
            match role {
                Role::Step => (step, p) = digits_at(bytes, p, 19)?,
                Role::Rank => {
                    let (r, end) = digits_at(bytes, p, 9)?;
                    (rank, p) = (r as u32, end);
                }
                Role::Stage => (stage, p) = self.stage_at(bytes, p)?,
                Role::Seconds => (seconds, p) = value_at(bytes, p)?,
                Role::Cell(cell) => {
                    // Blank (a CRLF line's `\r` trims away): no value.
                    if !matches!(bytes.get(p), None | Some(b',' | b'\n' | b'\r')) {
                        let (value, end) = value_at(bytes, p)?;
                        (cells[cell], p) = (Some(value), end);
                    }
                }
                Role::Skip => p = field_end(bytes, p)?,
            }
            match bytes.get(p) {
                Some(b',') if j < last => p += 1,
                // Fields past the last named one: skipped, unless one is quoted.
                Some(b',') => {
                    p = bytes[p..].iter().position(|&b| matches!(b, b'\n' | b'"')).map_or(bytes.len(), |i| p + i);
                    if bytes.get(p) == Some(&b'"') {
                        return None;
                    }
                }
                None | Some(b'\n') if j == last => {}
                // A CRLF line end: the `\r` trims away with the last field.
                Some(b'\r') if j == last && matches!(bytes.get(p + 1), None | Some(b'\n')) => p += 1,
                // Too few fields, blanks around a value, another form: the general path.
                _ => return None,
            }
        }
        let device = match cells[DEVICE] {
            Some(device_s) => {
                let spill_s = cells[SPILL].unwrap_or(0.0);
                if spill_s > device_s {
                    return None;
                }
                Some(DeviceTime { device_s, spill_s })
            }
            None => None,
        };
        // Every value is valid from here on: nothing below declines.
        if let Some(v) = cells[OVERLAP] {
            // The first of a (step, rank) counts: its stages' rows repeat it.
            if self.overlaps.last().is_none_or(|(key, _)| *key != (step, rank)) {
                self.overlaps.push(((step, rank), v));
            }
        }
        if plan.waits {
            let key = (rank, step, stage);
            self.waits.extend(cells[WAIT].map(|v| (key, v)));
            self.caused.extend(cells[CAUSED].map(|v| (key, v)));
        }
        self.rows.push(Row { step, seconds, line: n, rank, stage: stage as u32 });
        if plan.device {
            self.devices.push(device);
        }
        self.last_stage = stage;
        Some(p + 1)
    }

    /// The stage named by the field from `at`, when it is a name already known that needs
    /// no trimming, and where the field ends. The stage after the previous row's is tried
    /// first, without finding the field's end: a name without a comma, quote or line end
    /// followed by a comma is the whole field.
    #[inline]
    fn stage_at(&self, bytes: &[u8], at: usize) -> Option<(usize, usize)> {
        let next = if self.last_stage + 1 < self.names.len() { self.last_stage + 1 } else { 0 };
        if let Some(name) = self.names.get(next).map(String::as_bytes) {
            let end = at + name.len();
            if self.plain[next] && bytes.get(at..end) == Some(name) && bytes.get(end) == Some(&b',') {
                return Some((next, end));
            }
        }
        let end = field_end(bytes, at)?;
        let name = &bytes[at..end];
        let (first, last) = (name.first()?, name.last()?);
        if first.is_ascii_whitespace() || last.is_ascii_whitespace() {
            return None;
        }
        Some((self.names.iter().position(|n| n.as_bytes() == name)?, end))
    }
}

/// A name the field splitting cannot cut short or trim.
#[inline]
pub(super) fn plain(name: &[u8]) -> bool {
    let (first, last) = (name.first().copied().unwrap_or(b' '), name.last().copied().unwrap_or(b' '));
    !first.is_ascii_whitespace()
        && !last.is_ascii_whitespace()
        && !name.iter().any(|b| matches!(b, b',' | b'"' | b'\n'))
}

/// Past the comma at `at`.
#[inline]
fn comma(bytes: &[u8], at: usize) -> Option<usize> {
    (bytes.get(at) == Some(&b',')).then_some(at + 1)
}
