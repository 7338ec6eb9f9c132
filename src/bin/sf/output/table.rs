//! Columns padded to their widest cell, so tables line up whatever the host names are.

use std::borrow::Cow;
use std::io::{self, Write};

use super::escaped;

#[derive(Clone, Copy)]
pub enum Align {
    Left,
    Right,
}

/// Titles (stage names, for `sf steps`) and cells are names from logs as often as not: each
/// is escaped (`escaped`), so a row stays one line.
pub fn write<W: Write>(out: &mut W, columns: &[(&str, Align)], rows: &[Vec<String>]) -> io::Result<()> {
    let rows: Vec<Vec<Cow<str>>> = rows.iter().map(|row| row.iter().map(|cell| escaped(cell)).collect()).collect();
    let mut widths: Vec<usize> = columns.iter().map(|(title, _)| escaped(title).chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let titles: Vec<Cow<str>> = columns.iter().map(|(title, _)| escaped(title)).collect();
    for row in std::iter::once(&titles).chain(&rows) {
        let mut line = String::new();
        for (i, ((cell, width), (_, align))) in row.iter().zip(&widths).zip(columns).enumerate() {
            let pad = " ".repeat(width - cell.chars().count());
            let last = i + 1 == columns.len();
            match align {
                Align::Left if last => line += cell,
                Align::Left => line += &format!("{cell}{pad}  "),
                Align::Right if last => line += &format!("{pad}{cell}"),
                Align::Right => line += &format!("{pad}{cell}  "),
            }
        }
        human_line!(out, "{line}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_to_the_widest_cell() {
        let mut out = Vec::new();
        let rows = vec![vec!["0".to_string(), "node-a".to_string()], vec!["12".to_string(), "b".to_string()]];
        write(&mut out, &[("RANK", Align::Right), ("HOST", Align::Left)], &rows).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "RANK  HOST\n   0  node-a\n  12  b\n");
    }
}
