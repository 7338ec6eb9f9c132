//! The library's only voice: whole lines on stderr, each in a single write(2), so lines
//! from the many ranks sharing a terminal never interleave mid-line; and how a value from
//! the surroundings is shown in such a line (`echo`, `clip`).

pub fn say(message: &str) {
    let line = format!("stagefrontier: {message}\n");
    // SAFETY: writes an initialised buffer of its own length to fd 2; a short or failed
    // write loses the message and nothing else.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}

/// Longest part of a value a warning repeats, in characters.
pub const ECHO_MAX_CHARS: usize = 120;

/// A value as a warning shows it: quoted, at most `ECHO_MAX_CHARS` characters, control
/// characters escaped (a value must not move the cursor or clear the operator's terminal),
/// bytes that are not UTF-8 as `\xNN`, and how much was cut when it was long.
pub fn echo(value: &[u8]) -> String {
    let (text, cut) = clip(value);
    match cut {
        0 => format!("\"{text}\""),
        cut => format!("\"{text}\"... ({cut} more)"),
    }
}

/// `value` escaped as `echo` does, without quotes, and how many characters were cut.
pub fn clip(value: &[u8]) -> (String, usize) {
    let mut out = String::new();
    let mut shown = 0usize;
    let mut cut = 0usize;
    for chunk in value.utf8_chunks() {
        for c in chunk.valid().chars() {
            if shown >= ECHO_MAX_CHARS {
                cut += 1;
                continue;
            }
            shown += 1;
            match c {
                '"' | '\\' => out.extend(['\\', c]),
                c if c.is_control() => out.extend(c.escape_default()),
                c => out.push(c),
            }
        }
        for byte in chunk.invalid() {
            if shown >= ECHO_MAX_CHARS {
                cut += 1;
                continue;
            }
            shown += 1;
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    (out, cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoed_values_are_short_and_cannot_drive_a_terminal() {
        assert_eq!(echo(b"plain"), "\"plain\"");
        assert_eq!(echo(b"a\x1b[2Jb\nc\"d"), "\"a\\u{1b}[2Jb\\nc\\\"d\"");
        assert_eq!(echo(b"caf\xc3\xa9 \xff\xfe"), "\"caf\u{e9} \\xff\\xfe\"");
        let long = echo("x".repeat(500).as_bytes());
        assert_eq!(long, format!("\"{}\"... (380 more)", "x".repeat(120)));
    }
}
