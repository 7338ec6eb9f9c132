//! What reaches a person's terminal. Hosts, job ids, stage and value names, communicator
//! descriptions and kernel names are strings a job (or whoever wrote a log file) chose:
//! a control character in one would clear the operator's screen, move the cursor over
//! earlier lines or forge a line of its own. Every line of human output (`human_line!`)
//! shows each control character escaped, as Rust's `{:?}` does (`\n`, `\r`, `\t`,
//! `\u{1b}`); JSON escapes them itself.

use std::borrow::Cow;
use std::fmt;
use std::io::{self, Write};

/// Writes one line of human output (`human_line!`): the text with every control character
/// escaped, line feeds included, then the line feed that ends it.
pub fn line(out: &mut impl Write, text: fmt::Arguments) -> io::Result<()> {
    match text.as_str() {
        Some(text) => writeln!(out, "{}", escaped(text)),
        None => writeln!(out, "{}", escaped(&text.to_string())),
    }
}

/// `sf: message` on stderr, escaped: an error or note for the operator.
pub fn error_line(message: &str) {
    note_line(&format!("sf: {message}"));
}

/// One line on stderr, escaped. `eprintln!` would panic if stderr were closed; a lost
/// diagnostic is not worth one.
pub fn note_line(line: &str) {
    let _ = self::line(&mut io::stderr(), format_args!("{line}"));
}

/// `text` with every control character (C0, DEL, C1) escaped.
pub fn escaped(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_escaped() {
        assert_eq!(escaped("data.next_wait"), "data.next_wait");
        assert_eq!(escaped("a\x1b[2J\rb\nc\td\u{7f}\u{9b}é"), "a\\u{1b}[2J\\rb\\nc\\td\\u{7f}\\u{9b}é");
        let mut out = Vec::new();
        line(&mut out, format_args!("stage {} ends", "x\x1b]0;title\x07\nFORGED")).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "stage x\\u{1b}]0;title\\u{7}\\nFORGED ends\n");
    }
}
