//! Files a setting or a hostile tree may name, opened without ever blocking: a FIFO (or a
//! device) where a regular file belongs must not stall the process, and a shared object
//! must be checked whole before `dlopen` maps it, since a truncated one faults (SIGBUS)
//! where its mapping runs past the end of the file.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// `path` opened read-only and without blocking, if it is a regular file.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY).open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not a regular file"));
    }
    Ok(file)
}

/// The most program headers a shared object this process loads has (a few dozen at most).
const MAX_PROGRAM_HEADERS: u64 = 1024;

/// Whether `path` is a whole 64-bit little-endian ELF shared object that `dlopen` can map
/// without reading past the end of the file; the error says why not, for a message.
pub fn check_shared_object(path: &Path) -> Result<(), String> {
    let mut file = open_regular(path).map_err(|e| match e.kind() {
        io::ErrorKind::InvalidData => "is not a regular file".to_string(),
        _ => format!("cannot be opened: {e}"),
    })?;
    let size = file.metadata().map_err(|e| format!("cannot be read: {e}"))?.len();
    let mut header = [0u8; 64];
    file.read_exact(&mut header).map_err(|_| "is not an ELF shared object (too short)".to_string())?;
    // e_ident: magic, ELFCLASS64, ELFDATA2LSB; e_type ET_DYN.
    if header[..6] != *b"\x7fELF\x02\x01" || u16_at(&header, 16) != 3 {
        return Err("is not a 64-bit ELF shared object".into());
    }
    let (ph_offset, ph_size, ph_count) =
        (u64_at(&header, 32), u64::from(u16_at(&header, 54)), u64::from(u16_at(&header, 56)));
    let (sh_offset, sh_size, sh_count) =
        (u64_at(&header, 40), u64::from(u16_at(&header, 58)), u64::from(u16_at(&header, 60)));
    let truncated = || format!("is truncated: its ELF headers reach past its {size} bytes");
    let within = |offset: u64, len: u64| offset.checked_add(len).is_some_and(|end| end <= size);
    if ph_size < 56 || ph_count > MAX_PROGRAM_HEADERS || !within(ph_offset, ph_size * ph_count) {
        return Err(truncated());
    }
    if !within(sh_offset, sh_size * sh_count) {
        return Err(truncated());
    }
    let mut entry = [0u8; 56];
    for i in 0..ph_count {
        file.read_exact_at(&mut entry, ph_offset + i * ph_size).map_err(|_| truncated())?;
        // PT_LOAD: p_offset at 8, p_filesz at 32.
        if u32::from_le_bytes([entry[0], entry[1], entry[2], entry[3]]) == 1
            && !within(u64_at(&entry, 8), u64_at(&entry, 32))
        {
            return Err(truncated());
        }
    }
    Ok(())
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("sf-regular-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// This test binary's own libc, a real shared object.
    fn some_shared_object() -> std::path::PathBuf {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let path = maps.lines().filter_map(|l| l.split_whitespace().nth(5)).find(|p| p.contains("libc.so")).unwrap();
        std::path::PathBuf::from(path)
    }

    #[test]
    fn a_whole_shared_object_passes_and_a_truncated_one_or_a_fifo_does_not() {
        let dir = scratch("elf");
        let real = some_shared_object();
        assert_eq!(check_shared_object(&real), Ok(()));

        let bytes = std::fs::read(&real).unwrap();
        for len in [bytes.len() / 2, 4096, 100, 10] {
            let cut = dir.join(format!("cut-{len}.so"));
            std::fs::write(&cut, &bytes[..len]).unwrap();
            let e = check_shared_object(&cut).unwrap_err();
            assert!(e.contains("truncated") || e.contains("too short"), "{len}: {e}");
        }
        let text = dir.join("text.so");
        std::fs::write(&text, vec![b'x'; 4096]).unwrap();
        assert_eq!(check_shared_object(&text), Err("is not a 64-bit ELF shared object".into()));

        let fifo = dir.join("fifo.so");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(check_shared_object(&fifo), Err("is not a regular file".into()), "opened without blocking");
        assert!(check_shared_object(&dir.join("missing.so")).unwrap_err().starts_with("cannot be opened"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
