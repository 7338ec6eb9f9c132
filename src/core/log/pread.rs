//! Reading a log another process may be writing: whole `pread`s, zeros past the end, and
//! words taken once they hold still. Shared by the reader, `sf snapshot`'s copy and the
//! exporter's tail.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Extra reads of a region before a word that keeps changing is taken as last read.
const STABLE_READS: usize = 4;

/// `pread` until `buf` is full or the file ends; the bytes read.
pub fn read_full(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// `buf.len()` bytes at `offset`; what lies past the end of the file (truncated while
/// read) reads as zeros, which every reader treats as "nothing here".
pub fn read_zeroed(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<()> {
    let got = read_full(file, offset, buf)?;
    buf[got..].fill(0);
    Ok(())
}

/// A region the writer keeps changing, each 8-byte word taken once two consecutive reads
/// agree on it (a word still changing after `STABLE_READS` is taken as last read): `pread`
/// copies bytes, it promises no atomic word.
pub fn read_stable(file: &File, offset: u64, out: &mut [u8]) -> io::Result<()> {
    read_zeroed(file, offset, out)?;
    let mut again = vec![0u8; out.len()];
    for _ in 0..STABLE_READS {
        read_zeroed(file, offset, &mut again)?;
        let mut settled = true;
        for (word, newer) in out.chunks_mut(8).zip(again.chunks(8)) {
            if word != newer {
                word.copy_from_slice(newer);
                settled = false;
            }
        }
        if settled {
            break;
        }
    }
    Ok(())
}
