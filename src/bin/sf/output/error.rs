//! A failed command's error under `--json`: one JSON object on stdout, where the script
//! reads the answer (the same line goes to stderr for people).

use std::io::{self, Write};

use serde::Serialize;

/// The object: the message's parts, and the message.
#[derive(Debug, PartialEq, Serialize)]
pub struct ErrorObject<'a> {
    pub error: &'a str,
    /// The file or directory the error is about, when the message names one.
    pub file: Option<&'a str>,
    /// The line of `file` (a CSV's), when the message names one.
    pub line: Option<u64>,
    /// What to do about it, when the message says.
    pub hint: Option<&'a str>,
    /// The whole line as stderr shows it.
    pub message: &'a str,
}

/// Splits an error line of `sf`'s one form, `FILE[:LINE]: what went wrong; what to do`;
/// a message without a path in front or without a hint gets nulls there.
pub fn error_object(message: &str) -> ErrorObject<'_> {
    let (mut file, mut line, mut rest) = (None, None, message);
    if let Some((head, tail)) = message.split_once(": ") {
        let (path, number) = match head.rsplit_once(':') {
            Some((path, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => (path, n.parse().ok()),
            _ => (head, None),
        };
        if names_a_path(path) {
            (file, line, rest) = (Some(path), number, tail);
        }
    }
    let (error, hint) = match rest.split_once("; ") {
        Some((error, hint)) => (error, Some(hint)),
        None => (rest, None),
    };
    ErrorObject { error, file, line, hint, message }
}

fn names_a_path(text: &str) -> bool {
    !text.is_empty()
        && !text.contains(' ')
        && (text.contains('/') || text.contains('.') || std::path::Path::new(text).exists())
}

/// Writes `message` as one JSON error object line.
pub fn error<W: Write>(out: &mut W, message: &str) -> io::Result<()> {
    super::json::line(out, &error_object(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_line_splits_into_file_error_and_hint() {
        let e = error_object("/tmp/job: no rank logs (*.sflog); pass a job directory, $SF_LOG_DIR/<job id>/");
        assert_eq!(e.file, Some("/tmp/job"));
        assert_eq!(e.error, "no rank logs (*.sflog)");
        assert_eq!(e.hint, Some("pass a job directory, $SF_LOG_DIR/<job id>/"));
        let e = error_object("stages.csv:12: expected 4 fields, found 3");
        assert_eq!(
            (e.file, e.line, e.error, e.hint),
            (Some("stages.csv"), Some(12), "expected 4 fields, found 3", None)
        );
        let e = error_object("cannot write the output: disk full");
        assert_eq!((e.file, e.error), (None, "cannot write the output: disk full"));
    }
}
