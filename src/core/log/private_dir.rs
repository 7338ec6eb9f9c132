//! Directories the library writes into, opened by descriptor and verified, so another user
//! on the host can neither redirect the logs (a symbolic link, a directory of theirs) nor
//! read or replace them (group or other write), nor make a rank hang in `open` (a FIFO).
//!
//! The root is created (0700 by default) and opened with `O_NOFOLLOW | O_DIRECTORY`; every
//! directory below it is reached with `openat` from its verified parent, never by path.
//! Each must be a directory owned by the caller's effective uid with no group or other
//! write permission.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// An open, verified directory.
pub struct PrivateDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// Why a directory cannot be used.
#[derive(Debug)]
pub enum DirError {
    /// It exists and is not ours to write into: the library must not use it.
    Refused(String),
    /// It cannot be created or opened (no such filesystem, read-only, no permission).
    Unavailable(String),
}

impl DirError {
    pub fn message(&self) -> &str {
        match self {
            DirError::Refused(m) | DirError::Unavailable(m) => m,
        }
    }
}

/// What is found at a name inside a directory, opened without following links and
/// without blocking.
pub enum Entry {
    Missing,
    /// A regular file of ours, open read-only.
    OurFile(std::fs::File),
    /// Something else, never to be touched: what it is, for the message.
    Foreign(String),
}

pub(super) fn c_name(name: &str) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

pub(super) fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

pub(super) fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: an all-zero stat is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes one stat through a valid pointer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// What an inode is, in words, for messages.
pub(super) fn kind(mode: libc::mode_t) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFREG => "a regular file",
        libc::S_IFDIR => "a directory",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFLNK => "a symbolic link",
        libc::S_IFSOCK => "a socket",
        libc::S_IFCHR | libc::S_IFBLK => "a device",
        _ => "an unknown kind of file",
    }
}

/// The open error of a name that must not be followed, in words.
fn open_error(path: &Path, e: io::Error) -> DirError {
    use std::os::unix::fs::MetadataExt;
    match e.raw_os_error() {
        Some(libc::ELOOP | libc::ENOTDIR) => {
            let what = std::fs::symlink_metadata(path).map_or("not a directory", |m| kind(m.mode()));
            DirError::Refused(format!("{} is {what}, not a directory", path.display()))
        }
        _ => DirError::Unavailable(format!("cannot open {}: {e}", path.display())),
    }
}

impl PrivateDir {
    /// The log root at `path` (absolute): missing parents are created 0700, the root
    /// itself with `mode`, then it is opened without following a link and verified.
    pub fn open_root(path: &Path, mode: u32) -> Result<PrivateDir, DirError> {
        use std::os::unix::fs::DirBuilderExt;
        if let Some(parent) = path.parent() {
            if !parent.exists() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(parent)
                    .map_err(|e| DirError::Unavailable(format!("cannot create {}: {e}", parent.display())))?;
            }
        }
        let c_path = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| DirError::Unavailable(format!("{} contains a NUL byte", path.display())))?;
        // SAFETY: mkdir with a NUL-terminated path.
        let created = unsafe { libc::mkdir(c_path.as_ptr(), mode) } == 0;
        if !created {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) {
                return Err(DirError::Unavailable(format!("cannot create {}: {e}", path.display())));
            }
        }
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
        // SAFETY: open with a NUL-terminated path; the result is checked.
        let fd = unsafe { libc::open(c_path.as_ptr(), flags) };
        if fd < 0 {
            return Err(open_error(path, io::Error::last_os_error()));
        }
        // SAFETY: open returned a fresh descriptor that nothing else owns.
        let dir = PrivateDir { fd: unsafe { OwnedFd::from_raw_fd(fd) }, path: path.to_path_buf() };
        dir.verify(created, mode)?;
        Ok(dir)
    }

    /// The directory `name` inside this one, created with `mode` if missing, opened by
    /// `openat` without following a link, and verified.
    pub fn subdir(&self, name: &str, mode: u32) -> Result<PrivateDir, DirError> {
        self.open_subdir(name, Some(mode))
    }

    /// The directory `name` inside this one if it exists, opened and verified like
    /// `subdir`, never created.
    pub fn existing_subdir(&self, name: &str) -> Result<PrivateDir, DirError> {
        self.open_subdir(name, None)
    }

    fn open_subdir(&self, name: &str, create_mode: Option<u32>) -> Result<PrivateDir, DirError> {
        let path = self.path.join(name);
        let c = c_name(name).map_err(|_| DirError::Unavailable(format!("bad directory name {name:?}")))?;
        // SAFETY: mkdirat on our open directory with a NUL-terminated name.
        let created =
            create_mode.is_some_and(|mode| unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), mode) } == 0);
        if !created && create_mode.is_some() {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) {
                return Err(DirError::Unavailable(format!("cannot create {}: {e}", path.display())));
            }
        }
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
        // SAFETY: openat on our open directory with a NUL-terminated name; checked.
        let fd = unsafe { libc::openat(self.fd.as_raw_fd(), c.as_ptr(), flags) };
        if fd < 0 {
            return Err(open_error(&path, io::Error::last_os_error()));
        }
        // SAFETY: openat returned a fresh descriptor that nothing else owns.
        let dir = PrivateDir { fd: unsafe { OwnedFd::from_raw_fd(fd) }, path };
        dir.verify(created, create_mode.unwrap_or(0))?;
        Ok(dir)
    }

    /// A directory of ours that no one else may write into. One we just created gets
    /// exactly `mode` (the umask may have taken bits `SF_LOG_MODE` asked for).
    fn verify(&self, created: bool, mode: u32) -> Result<(), DirError> {
        let st = fstat(self.fd.as_raw_fd())
            .map_err(|e| DirError::Unavailable(format!("cannot stat {}: {e}", self.path.display())))?;
        let shown = self.path.display();
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(DirError::Refused(format!("{shown} is {}", kind(st.st_mode))));
        }
        if st.st_uid != euid() {
            return Err(DirError::Refused(format!(
                "{shown} belongs to uid {}, not to this user ({})",
                st.st_uid,
                euid()
            )));
        }
        if st.st_mode & 0o022 != 0 {
            return Err(DirError::Refused(format!(
                "{shown} is writable by its group or by others (mode {:o}); make it 0700 (or 0750)",
                st.st_mode & 0o7777
            )));
        }
        if created {
            // Keep a setgid bit inherited from the parent: it is what hands the operators'
            // group down the tree (docs/security.md).
            let mode = mode | (st.st_mode & libc::S_ISGID);
            // SAFETY: fchmod on our open descriptor.
            unsafe { libc::fchmod(self.fd.as_raw_fd(), mode) };
        }
        Ok(())
    }

    /// A directory opened and checked by another walk (`safe_path`), whose checks differ.
    pub(super) fn from_open(fd: OwnedFd, path: PathBuf) -> PrivateDir {
        PrivateDir { fd, path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// What is at `name`: opened `O_NOFOLLOW | O_NONBLOCK` (a FIFO opens at once and is
    /// never read), and only a regular file of ours counts as ours.
    pub fn entry(&self, name: &str) -> Entry {
        self.entry_of(name, euid())
    }

    /// As `entry`, with the regular files of `owner` counting as ours.
    pub fn entry_of(&self, name: &str, owner: u32) -> Entry {
        let Ok(c) = c_name(name) else { return Entry::Foreign("an unusable name".into()) };
        let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
        // SAFETY: openat on our open directory with a NUL-terminated name; checked.
        let fd = unsafe { libc::openat(self.fd.as_raw_fd(), c.as_ptr(), flags) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENOENT) => Entry::Missing,
                Some(libc::ELOOP) => Entry::Foreign("a symbolic link".into()),
                _ => Entry::Foreign(format!("unreadable ({e})")),
            };
        }
        // SAFETY: openat returned a fresh descriptor that nothing else owns.
        let file = unsafe { std::fs::File::from_raw_fd(fd) };
        match fstat(fd) {
            Ok(st) if st.st_mode & libc::S_IFMT != libc::S_IFREG => Entry::Foreign(kind(st.st_mode).into()),
            Ok(st) if st.st_uid != owner => Entry::Foreign(format!("a file of uid {}", st.st_uid)),
            Ok(_) => Entry::OurFile(file),
            Err(e) => Entry::Foreign(format!("unreadable ({e})")),
        }
    }

    /// Names in this directory, sorted (read through the descriptor, not the path).
    pub fn names(&self) -> Vec<String> {
        let mut names = Vec::new();
        let dot = c".";
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
        // SAFETY: a second descriptor of this directory, for fdopendir to own.
        let fd = unsafe { libc::openat(self.fd.as_raw_fd(), dot.as_ptr(), flags) };
        if fd < 0 {
            return names;
        }
        // SAFETY: fdopendir takes ownership of a valid directory descriptor.
        let dir = unsafe { libc::fdopendir(fd) };
        if dir.is_null() {
            // SAFETY: fdopendir failed, so the descriptor is still ours to close.
            unsafe { libc::close(fd) };
            return names;
        }
        loop {
            // SAFETY: readdir on a stream from fdopendir; the entry is valid until the next
            // call, and its name is NUL-terminated.
            let entry = unsafe { libc::readdir(dir) };
            if entry.is_null() {
                break;
            }
            // SAFETY: as above.
            let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) };
            if let Ok(name) = name.to_str() {
                if name != "." && name != ".." {
                    names.push(name.to_string());
                }
            }
        }
        // SAFETY: closes the stream (and its descriptor) opened above.
        unsafe { libc::closedir(dir) };
        names.sort();
        names
    }

    /// Removes the file `name`; a missing one is not an error.
    pub fn remove(&self, name: &str) {
        if let Ok(c) = c_name(name) {
            // SAFETY: unlinkat on our open directory with a NUL-terminated name.
            unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) };
        }
    }

    /// Removes the directory `name` if it is empty.
    pub fn remove_empty_dir(&self, name: &str) {
        if let Ok(c) = c_name(name) {
            // SAFETY: unlinkat on our open directory with a NUL-terminated name.
            unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) };
        }
    }

    /// Moves `name` to `to_name` in `to`, never replacing what is there.
    pub fn move_to(&self, name: &str, to: &PrivateDir, to_name: &str) -> io::Result<()> {
        let (from, target) = (c_name(name)?, c_name(to_name)?);
        // SAFETY: renameat2 with descriptors of open directories and NUL-terminated names.
        let rc = unsafe {
            libc::renameat2(
                self.fd.as_raw_fd(),
                from.as_ptr(),
                to.fd.as_raw_fd(),
                target.as_ptr(),
                libc::RENAME_NOREPLACE,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// (total, available to us) bytes of the filesystem holding this directory.
    pub fn space(&self) -> Option<(u64, u64)> {
        // SAFETY: an all-zero statvfs is a valid value to be overwritten.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: fstatvfs writes one statvfs through a valid pointer.
        if unsafe { libc::fstatvfs(self.fd.as_raw_fd(), &mut st) } != 0 {
            return None;
        }
        let unit = st.f_frsize as u64;
        Some((st.f_blocks as u64 * unit, st.f_bavail as u64 * unit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!("sf-private-dir-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        path
    }

    #[test]
    fn a_new_root_is_private_and_entries_are_classified() {
        let base = scratch("new");
        let root = PrivateDir::open_root(&base.join("a/b/root"), 0o700).unwrap();
        let mode = std::fs::metadata(base.join("a/b/root")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let job = root.subdir("job", 0o750).unwrap();
        assert_eq!(std::fs::metadata(job.path()).unwrap().permissions().mode() & 0o777, 0o750);
        assert!(matches!(job.entry("nothing"), Entry::Missing));
        std::fs::write(job.path().join("file"), b"x").unwrap();
        assert!(matches!(job.entry("file"), Entry::OurFile(_)));
        std::fs::create_dir(job.path().join("dir")).unwrap();
        assert!(matches!(job.entry("dir"), Entry::Foreign(k) if k == "a directory"));
        std::os::unix::fs::symlink("/etc/passwd", job.path().join("link")).unwrap();
        assert!(matches!(job.entry("link"), Entry::Foreign(k) if k == "a symbolic link"));
        assert_eq!(job.names(), ["dir", "file", "link"]);
        let (total, free) = job.space().unwrap();
        assert!(total >= free && total > 0);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_writable_or_linked_root_is_refused() {
        let base = scratch("bad");
        std::fs::create_dir_all(base.join("open")).unwrap();
        std::fs::set_permissions(base.join("open"), std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = PrivateDir::open_root(&base.join("open"), 0o700).err().unwrap();
        assert!(matches!(&e, DirError::Refused(m) if m.contains("writable by its group or by others")), "{e:?}");
        std::os::unix::fs::symlink(base.join("open"), base.join("link")).unwrap();
        let e = PrivateDir::open_root(&base.join("link"), 0o700).err().unwrap();
        assert!(matches!(&e, DirError::Refused(m) if m.contains("symbolic link")), "{e:?}");
        std::fs::write(base.join("file"), b"").unwrap();
        let e = PrivateDir::open_root(&base.join("file"), 0o700).err().unwrap();
        assert!(matches!(&e, DirError::Refused(m) if m.contains("is a regular file, not a directory")), "{e:?}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
