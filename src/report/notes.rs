//! Notes for the operator that a question finds on the way (missing ranks, which hosts a
//! job ran on, which copy of a rank was read): the report layer hands them over, and
//! whoever drives it shows them (`sf` writes them to stderr, escaped). Nothing is shown
//! unless a reader is registered.

use std::sync::OnceLock;

static READER: OnceLock<fn(&str)> = OnceLock::new();

/// Registers the process's reader of notes; the first registration wins.
pub fn read_with(reader: fn(&str)) {
    let _ = READER.set(reader);
}

/// Hands `notes` to the reader once per process, however many times a command discovers
/// its logs.
pub fn say_once(notes: &[String]) {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        if let Some(reader) = READER.get() {
            notes.iter().for_each(|note| reader(note));
        }
    });
}
