//! The library's only voice: whole lines on stderr, each in a single write(2), so lines
//! from the many ranks sharing a terminal never interleave mid-line.

pub fn say(message: &str) {
    let line = format!("stagefrontier: {message}\n");
    // SAFETY: writes an initialised buffer of its own length to fd 2; a short or failed
    // write loses the message and nothing else.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}
