//! How every `SF_*` value is read: a set, non-empty value is taken when it parses and
//! passes its check; anything else is one warning that names the variable, says what it
//! should be and which value is kept, and the setting keeps that value (its default).

use std::fmt::Display;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::str::FromStr;

use super::flag;
use crate::core::record::notice::echo;

pub(super) struct Settings<'a> {
    var: &'a dyn Fn(&str) -> Option<String>,
    pub(super) warnings: Vec<String>,
}

impl<'a> Settings<'a> {
    pub(super) fn new(var: &'a dyn Fn(&str) -> Option<String>) -> Settings<'a> {
        Settings { var, warnings: Vec::new() }
    }

    /// The variable's value; an empty one counts as unset.
    pub(super) fn text(&self, name: &str) -> Option<String> {
        (self.var)(name).filter(|v| !v.is_empty())
    }

    pub(super) fn path(&self, name: &str) -> Option<PathBuf> {
        self.text(name).map(PathBuf::from)
    }

    /// One warning: `NAME="value" is not WHAT; using KEPT`.
    pub(super) fn warn(&mut self, name: &str, v: &str, what: impl Display, kept: impl Display) {
        self.warnings.push(format!("{name}={} is not {what}; using {kept}", echo(v.as_bytes())));
    }

    /// A value of type `T` that `ok` accepts; `what` describes the accepted values.
    pub(super) fn checked<T: FromStr + Display>(
        &mut self,
        name: &str,
        what: &str,
        ok: impl Fn(&T) -> bool,
        value: &mut T,
    ) {
        let Some(v) = self.text(name) else { return };
        match v.parse::<T>() {
            Ok(parsed) if ok(&parsed) => *value = parsed,
            _ => self.warn(name, &v, what, value),
        }
    }

    /// A number within `range`: the warning says `WHAT from LO to HI`.
    pub(super) fn bounded<T: FromStr + Display + PartialOrd>(
        &mut self,
        name: &str,
        what: &str,
        range: RangeInclusive<T>,
        value: &mut T,
    ) {
        let what = format!("{what} from {} to {}", range.start(), range.end());
        self.checked(name, &what, |n| range.contains(n), value);
    }

    /// A boolean (`config::flag` spellings); the warning names the kept value as 0 or 1.
    pub(super) fn flag(&mut self, name: &str, value: &mut bool) {
        let Some(v) = self.text(name) else { return };
        match flag(&v) {
            Some(on) => *value = on,
            None => self.warn(name, &v, "0/1/true/false/yes/no/on/off", u8::from(*value)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warnings_for(name: &str, value: &str, read: impl FnOnce(&mut Settings)) -> Vec<String> {
        let (name, value) = (name.to_string(), value.to_string());
        let var = move |k: &str| (k == name).then(|| value.clone());
        let mut s = Settings::new(&var);
        read(&mut s);
        s.warnings
    }

    #[test]
    fn a_bad_value_is_one_warning_naming_the_range_and_the_kept_value() {
        let mut window = 64usize;
        let w = warnings_for("SF_WR_WINDOW", "1000", |s| {
            s.bounded("SF_WR_WINDOW", "a window length", 2..=256, &mut window)
        });
        assert_eq!(w, ["SF_WR_WINDOW=\"1000\" is not a window length from 2 to 256; using 64"]);
        assert_eq!(window, 64);

        let mut factor = 10.0f64;
        for bad in ["0.5", "NaN", "inf", "ten"] {
            let w = warnings_for("SF_HANG_FACTOR", bad, |s| {
                s.bounded("SF_HANG_FACTOR", "a factor", 1.0..=10_000.0, &mut factor)
            });
            assert_eq!(w, [format!("SF_HANG_FACTOR={bad:?} is not a factor from 1 to 10000; using 10")]);
        }
        assert_eq!(factor, 10.0);

        let mut on = true;
        let w = warnings_for("SF_CUPTI", "maybe", |s| s.flag("SF_CUPTI", &mut on));
        assert_eq!(w, ["SF_CUPTI=\"maybe\" is not 0/1/true/false/yes/no/on/off; using 1"]);
        assert!(on);
    }

    #[test]
    fn good_and_empty_values() {
        let mut ms = 500u64;
        let w = warnings_for("SF_X_MS", "20", |s| s.bounded("SF_X_MS", "a period in ms", 10..=60_000, &mut ms));
        assert!(w.is_empty() && ms == 20, "{w:?} {ms}");
        let w = warnings_for("SF_X_MS", "", |s| s.bounded("SF_X_MS", "a period in ms", 10..=60_000, &mut ms));
        assert!(w.is_empty() && ms == 20, "an empty value counts as unset: {w:?} {ms}");
        let mut flag = false;
        let w = warnings_for("SF_F", "On", |s| s.flag("SF_F", &mut flag));
        assert!(w.is_empty() && flag, "{w:?}");
    }
}
