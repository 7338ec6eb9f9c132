//! Wall-clock times for people: a log's `CLOCK_MONOTONIC` nanoseconds as RFC 3339 UTC,
//! through the header's calibration (a monotonic and a realtime reading taken together at
//! the library's start), so they can be matched against Slurm and system logs.

use crate::core::log::reader::LogHeader;

const NS_PER_S: i128 = 1_000_000_000;
const S_PER_DAY: i128 = 86_400;

/// One log's mapping from monotonic to wall-clock nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WallClock {
    base_mono_ns: u64,
    base_wall_ns: u64,
}

impl WallClock {
    pub fn of(header: &LogHeader) -> WallClock {
        WallClock { base_mono_ns: header.base_mono_ns, base_wall_ns: header.base_wall_ns }
    }

    /// Wall-clock ns since the Unix epoch of monotonic `mono_ns`; `None` when the header
    /// has no calibration or the result is outside the epoch's range.
    pub fn wall_ns(&self, mono_ns: u64) -> Option<u64> {
        if self.base_wall_ns == 0 {
            return None;
        }
        let wall = self.base_wall_ns as i128 + (mono_ns as i128 - self.base_mono_ns as i128);
        u64::try_from(wall).ok()
    }

    /// Monotonic ns of wall-clock `wall_ns` (saturating at 0).
    pub fn mono_ns(&self, wall_ns: u64) -> u64 {
        let mono = self.base_mono_ns as i128 + (wall_ns as i128 - self.base_wall_ns as i128);
        mono.clamp(0, u64::MAX as i128) as u64
    }

    /// `mono_ns` as RFC 3339 UTC with milliseconds, e.g. `2026-11-23T08:51:18.123Z`; `-`
    /// when the log has no calibration.
    pub fn rfc3339(&self, mono_ns: u64) -> String {
        self.wall_ns(mono_ns).map_or_else(|| "-".to_string(), rfc3339_ms)
    }
}

/// Wall-clock ns since the epoch as RFC 3339 UTC with milliseconds (24 characters).
pub fn rfc3339_ms(wall_ns: u64) -> String {
    let ns = wall_ns as i128;
    let (days, second_of_day) = ((ns / NS_PER_S).div_euclid(S_PER_DAY), (ns / NS_PER_S).rem_euclid(S_PER_DAY));
    let (y, m, d) = civil_from_days(days);
    let ms = (ns % NS_PER_S) / 1_000_000;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    )
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)` (a space may replace the `T`)
/// into wall-clock ns since the epoch.
pub fn parse_rfc3339(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    let digits = |from: usize, len: usize| -> Option<i128> {
        let s = text.get(from..from + len)?;
        s.bytes().all(|c| c.is_ascii_digit()).then(|| s.parse().ok())?
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') || b[13] != b':' {
        return None;
    }
    if b[16] != b':' {
        return None;
    }
    let (y, m, d) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    let (hh, mm, ss) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let mut at = 19;
    let mut frac_ns = 0i128;
    if b.get(at) == Some(&b'.') {
        let end = at + 1 + b[at + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        let frac = &text[at + 1..end];
        if frac.is_empty() {
            return None;
        }
        for (i, c) in frac.bytes().take(9).enumerate() {
            frac_ns += (c - b'0') as i128 * 10i128.pow(8 - i as u32);
        }
        at = end;
    }
    let offset_s = match &text[at..] {
        "Z" | "z" => 0,
        zone if zone.len() == 6 && matches!(zone.as_bytes()[0], b'+' | b'-') && zone.as_bytes()[3] == b':' => {
            let sign = if zone.starts_with('-') { -1 } else { 1 };
            sign * (digits(at + 1, 2)? * 3600 + digits(at + 4, 2)? * 60)
        }
        _ => return None,
    };
    let seconds = days_from_civil(y, m, d) * S_PER_DAY + hh * 3600 + mm * 60 + ss - offset_s;
    u64::try_from(seconds * NS_PER_S + frac_ns).ok()
}

/// (year, month, day) of a day count since 1970-01-01 (the proleptic Gregorian calendar).
fn civil_from_days(days: i128) -> (i128, i128, i128) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i128::from(m <= 2), m, d)
}

/// Days since 1970-01-01 of a (year, month, day).
fn days_from_civil(y: i128, m: i128, d: i128) -> i128 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        // `date -u -d @1795423878.123`
        assert_eq!(rfc3339_ms(1_795_423_878_123_456_789), "2026-11-23T08:51:18.123Z");
        assert_eq!(rfc3339_ms(951_782_400_000_000_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn parses_what_it_formats_and_offsets() {
        for ns in [0, 951_782_400_000_000_000, 1_795_423_878_123_000_000] {
            assert_eq!(parse_rfc3339(&rfc3339_ms(ns)), Some(ns));
        }
        assert_eq!(parse_rfc3339("2026-11-23T09:51:18+01:00"), Some(1_795_423_878_000_000_000));
        assert_eq!(parse_rfc3339("2026-11-23 08:51:18.5Z"), Some(1_795_423_878_500_000_000));
        for bad in ["2026-11-23", "2026-13-01T00:00:00Z", "2026-11-23T08:51:18", "2026-11-23T08:51:18.Z", "x"] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn maps_monotonic_through_the_calibration() {
        let clock = WallClock { base_mono_ns: 1_000, base_wall_ns: 1_795_423_878_000_000_000 };
        assert_eq!(clock.rfc3339(1_000 + 123_000_000), "2026-11-23T08:51:18.123Z");
        assert_eq!(clock.mono_ns(1_795_423_878_000_000_000 + 5), 1_005);
        assert_eq!(WallClock { base_mono_ns: 1, base_wall_ns: 0 }.rfc3339(5), "-");
    }
}
