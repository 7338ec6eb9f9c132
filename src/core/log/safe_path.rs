//! Paths another user may have planted links in, walked by descriptor, and new files made
//! under a directory so reached: whole or not at all, never through a link.
//!
//! `sf snapshot` may run as root (a Slurm epilog) into a shared directory whose names the
//! job's owner knows in advance, and `sf trace -o` and `sf exporter --textfile` write where
//! they are told. Following a path there lets whoever can change a directory on it decide
//! what gets written where, so:
//!
//! - An output directory is reached from `/` one name at a time with `openat(O_NOFOLLOW)`.
//!   Every directory and symbolic link on the way must be root's or this user's, and a
//!   directory others may write must be sticky (as `/tmp` is), so that no one else can
//!   rename or replace what lies below it. A link of root's or ours is followed: only they
//!   could have made it. Missing directories are created 0700 and checked like found ones.
//! - A new file is created there under a random name with `O_CREAT | O_EXCL | O_NOFOLLOW`
//!   (nothing planted can be opened in its place) and renamed onto its name with
//!   `renameat`, which replaces a link at that name rather than writing through it.
//! - A job's log directory is walked the same way, but only to tell whose it is: its owner
//!   is the job's user, and a link on the way must be root's, ours or that user's.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::File;
use std::hash::BuildHasher;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

use super::private_dir::{c_name, euid, fstat, kind, DirError, PrivateDir};

/// Symbolic links followed (and creation races retried) in one walk at most, as the
/// kernel's own limit before `ELOOP`.
const MAX_STEPS: usize = 40;

const DIR_FLAGS: libc::c_int =
    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;

/// A directory or symbolic link met on a walk, for the walk's owner to judge.
struct Met<'a> {
    path: &'a Path,
    st: &'a libc::stat,
}

impl Met<'_> {
    fn is_link(&self) -> bool {
        self.st.st_mode & libc::S_IFMT == libc::S_IFLNK
    }
}

fn c_os(name: &OsStr) -> Result<CString, DirError> {
    CString::new(name.as_bytes()).map_err(|_| DirError::Unavailable(format!("{name:?} contains a NUL byte")))
}

fn open_dir_at(at: RawFd, name: &CStr, shown: &Path) -> Result<OwnedFd, DirError> {
    // SAFETY: openat with a NUL-terminated name; the result is checked.
    let fd = unsafe { libc::openat(at, name.as_ptr(), DIR_FLAGS) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ELOOP | libc::ENOTDIR) => {
                DirError::Refused(format!("{} changed while it was opened: no longer a directory", shown.display()))
            }
            _ => DirError::Unavailable(format!("cannot open {}: {e}", shown.display())),
        });
    }
    // SAFETY: openat returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// What is at `name` in `at`, a link itself rather than what it names.
fn lstat_at(at: RawFd, name: &CStr) -> io::Result<libc::stat> {
    // SAFETY: an all-zero stat is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstatat with a NUL-terminated name writes one stat through a valid pointer.
    if unsafe { libc::fstatat(at, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

fn read_link_at(at: RawFd, name: &CStr) -> io::Result<PathBuf> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: readlinkat writes at most buf.len() bytes into buf.
    let n = unsafe { libc::readlinkat(at, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(PathBuf::from(OsString::from_vec(buf)))
}

/// The names to walk in `path`, last first: a stack whose top is the next name.
fn names_of(path: &Path) -> Vec<OsString> {
    path.components()
        .rev()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_owned()),
            Component::ParentDir => Some("..".into()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// Walks `path` (a relative one from the working directory's absolute path) from `/`,
/// showing `check` every directory opened and every link before it is followed; missing
/// directories are created 0700 when `create`. The directory reached keeps `path` as its
/// name, as the user spelled it.
fn walk(
    path: &Path,
    create: bool,
    check: &mut dyn FnMut(&Met) -> Result<(), DirError>,
) -> Result<PrivateDir, DirError> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        let cwd = std::env::current_dir()
            .map_err(|e| DirError::Unavailable(format!("cannot tell the working directory: {e}")))?;
        cwd.join(path)
    };
    let root = Path::new("/");
    let mut dir = open_dir_at(libc::AT_FDCWD, c"/", root)?;
    let st = fstat(dir.as_raw_fd()).map_err(|e| DirError::Unavailable(format!("cannot stat /: {e}")))?;
    check(&Met { path: root, st: &st })?;
    let mut at = root.to_path_buf();
    let mut todo = names_of(&absolute);
    let mut steps = 0;
    while let Some(name) = todo.pop() {
        let c = c_os(&name)?;
        let next = at.join(&name);
        let st = match lstat_at(dir.as_raw_fd(), &c) {
            Ok(st) => st,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && create => {
                // SAFETY: mkdirat on an open directory with a NUL-terminated name.
                if unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o700) } != 0 {
                    let e = io::Error::last_os_error();
                    if e.raw_os_error() != Some(libc::EEXIST) {
                        return Err(DirError::Unavailable(format!("cannot create {}: {e}", next.display())));
                    }
                }
                // Looked at again: whatever is there now, made by us or raced in by
                // someone else, is judged as found.
                steps += 1;
                if steps > MAX_STEPS {
                    return Err(DirError::Refused(format!("{} keeps changing while it is created", next.display())));
                }
                todo.push(name);
                continue;
            }
            Err(e) => return Err(DirError::Unavailable(format!("cannot open {}: {e}", next.display()))),
        };
        match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {}
            libc::S_IFLNK => {
                check(&Met { path: &next, st: &st })?;
                steps += 1;
                if steps > MAX_STEPS {
                    return Err(DirError::Refused(format!("{}: too many symbolic links", path.display())));
                }
                let target = read_link_at(dir.as_raw_fd(), &c)
                    .map_err(|e| DirError::Unavailable(format!("cannot read the link {}: {e}", next.display())))?;
                if target.is_absolute() {
                    dir = open_dir_at(libc::AT_FDCWD, c"/", root)?;
                    at = root.to_path_buf();
                }
                todo.extend(names_of(&target));
                continue;
            }
            mode => return Err(DirError::Refused(format!("{} is {}, not a directory", next.display(), kind(mode)))),
        }
        let fd = open_dir_at(dir.as_raw_fd(), &c, &next)?;
        let st =
            fstat(fd.as_raw_fd()).map_err(|e| DirError::Unavailable(format!("cannot stat {}: {e}", next.display())))?;
        check(&Met { path: &next, st: &st })?;
        dir = fd;
        if name == ".." {
            at.pop();
        } else {
            at = next;
        }
    }
    Ok(PrivateDir::from_open(dir, path.to_path_buf()))
}

/// Root's or this user's; a directory others may write is sticky.
fn trusted(met: &Met) -> Result<(), DirError> {
    let (me, uid, mode) = (euid(), met.st.st_uid, met.st.st_mode);
    let shown = met.path.display();
    if uid != 0 && uid != me {
        let what = if met.is_link() { "a symbolic link of" } else { "owned by" };
        return Err(DirError::Refused(format!(
            "{shown} is {what} uid {uid}, neither root nor this user ({me}): that user could redirect \
             what is written below it"
        )));
    }
    if mode & libc::S_IFMT == libc::S_IFDIR && mode & 0o022 != 0 && mode & libc::S_ISVTX == 0 {
        return Err(DirError::Refused(format!(
            "{shown} is writable by its group or by others and not sticky (mode {:o}): they could replace \
             what is written below it",
            mode & 0o7777
        )));
    }
    Ok(())
}

/// The directory at `path` for outputs, created (0700) where missing when `create`; every
/// directory and link on the way root's or this user's, none writable by others unless
/// sticky.
pub fn output_dir(path: &Path, create: bool) -> Result<PrivateDir, DirError> {
    walk(path, create, &mut trusted)
}

/// The existing directory a new file at `path` goes in, as `output_dir` checks it, and
/// the file's name there.
pub fn output_file_dir(path: &Path) -> Result<(PrivateDir, String), DirError> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| DirError::Unavailable(format!("{} names no file (or not in UTF-8)", path.display())))?;
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Ok((output_dir(parent, false)?, name.to_string()))
}

/// A job's log directory at `path` and its owner, the job's user. A link on the way must
/// be root's, this user's or the job's user's: anyone else's could point at another
/// user's logs.
pub fn job_dir(path: &Path) -> Result<(PrivateDir, u32), DirError> {
    let mut links = Vec::new();
    let dir = walk(path, false, &mut |met| {
        if met.is_link() {
            links.push((met.path.to_path_buf(), met.st.st_uid));
        }
        Ok(())
    })?;
    let owner =
        fstat(dir.fd()).map_err(|e| DirError::Unavailable(format!("cannot stat {}: {e}", path.display())))?.st_uid;
    if let Some((link, uid)) = links.iter().find(|(_, uid)| ![0, euid(), owner].contains(uid)) {
        return Err(DirError::Refused(format!(
            "{} is a symbolic link of uid {uid} to a directory of uid {owner}: another user's logs are not \
             read through it",
            link.display()
        )));
    }
    Ok((dir, owner))
}

/// A file being written under a random name in its directory, put in place by `commit`;
/// dropped uncommitted, it is removed.
pub struct NewFile<'a> {
    dir: &'a PrivateDir,
    tmp: CString,
    name: CString,
    file: File,
    committed: bool,
}

impl PrivateDir {
    /// A new file that `commit` makes `name` here, created with `mode` (less the umask).
    /// Its temporary name, `.<name>.<random>.partial`, is made with `O_EXCL | O_NOFOLLOW`:
    /// whatever someone planted is never opened; a taken name is passed over.
    pub fn create_new(&self, name: &str, mode: u32) -> io::Result<NewFile<'_>> {
        let target = c_name(name)?;
        let seed = std::collections::hash_map::RandomState::new();
        for attempt in 0u32..8 {
            let tmp = c_name(&format!(".{name}.{:016x}.partial", seed.hash_one(attempt)))?;
            let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
            // SAFETY: openat on our open directory with a NUL-terminated name; checked.
            let fd = unsafe { libc::openat(self.fd(), tmp.as_ptr(), flags, mode as libc::c_uint) };
            if fd >= 0 {
                // SAFETY: openat returned a fresh descriptor that nothing else owns.
                let file = unsafe { File::from_raw_fd(fd) };
                return Ok(NewFile { dir: self, tmp, name: target, file, committed: false });
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) {
                return Err(e);
            }
        }
        Err(io::Error::new(io::ErrorKind::AlreadyExists, "every temporary name tried was taken"))
    }

    /// Writes `bytes` as the whole of a new file `name` (`create_new`, then committed).
    pub fn write_new(&self, name: &str, mode: u32, bytes: &[u8]) -> io::Result<()> {
        let new = self.create_new(name, mode)?;
        new.file().write_all(bytes)?;
        new.commit()
    }

    /// (device, inode): which directory this is, however it was reached.
    pub fn identity(&self) -> io::Result<(u64, u64)> {
        let st = fstat(self.fd())?;
        Ok((st.st_dev, st.st_ino))
    }
}

impl NewFile<'_> {
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Renames the file onto its name, replacing what is there (a link itself, never
    /// what it points to).
    pub fn commit(mut self) -> io::Result<()> {
        let fd = self.dir.fd();
        // SAFETY: renameat within our open directory with NUL-terminated names.
        if unsafe { libc::renameat(fd, self.tmp.as_ptr(), fd, self.name.as_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        self.committed = true;
        Ok(())
    }
}

impl Drop for NewFile<'_> {
    fn drop(&mut self) {
        if !self.committed {
            // SAFETY: unlinkat on our open directory with a NUL-terminated name.
            unsafe { libc::unlinkat(self.dir.fd(), self.tmp.as_ptr(), 0) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn scratch(name: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!("sf-safe-path-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        path
    }

    fn refused(result: Result<PrivateDir, DirError>) -> String {
        match result {
            Err(DirError::Refused(m)) => m,
            Err(DirError::Unavailable(m)) => panic!("unavailable, not refused: {m}"),
            Ok(dir) => panic!("{} accepted", dir.path().display()),
        }
    }

    #[test]
    fn output_dirs_are_created_private_and_open_writable_dirs_refused_unless_sticky() {
        let base = scratch("dirs");
        let made = output_dir(&base.join("a/b"), true).unwrap();
        assert_eq!(std::fs::metadata(made.path()).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(made.path(), base.join("a/b"));
        std::fs::create_dir(base.join("open")).unwrap();
        std::fs::set_permissions(base.join("open"), std::fs::Permissions::from_mode(0o777)).unwrap();
        let m = refused(output_dir(&base.join("open/x"), true));
        assert!(m.contains("writable by its group or by others and not sticky (mode 777)"), "{m}");
        assert!(!base.join("open/x").exists(), "nothing created below a refused directory");
        std::fs::set_permissions(base.join("open"), std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(output_dir(&base.join("open/x"), true).is_ok(), "a sticky one is like /tmp");
        // A link of our own is followed; `..` walks up from where the link led.
        symlink(base.join("a"), base.join("ours")).unwrap();
        let through = output_dir(&base.join("ours/b/../b"), false).unwrap();
        assert_eq!(through.identity().unwrap(), made.identity().unwrap());
        std::fs::write(base.join("file"), b"").unwrap();
        assert!(refused(output_dir(&base.join("file/x"), true)).ends_with("is a regular file, not a directory"));
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_new_file_replaces_a_link_at_its_name_and_is_gone_when_not_committed() {
        let base = scratch("files");
        std::fs::write(base.join("victim"), b"keep").unwrap();
        symlink(base.join("victim"), base.join("out.json")).unwrap();
        let (dir, name) = output_file_dir(&base.join("out.json")).unwrap();
        let new = dir.create_new(&name, 0o600).unwrap();
        new.file().write_all(b"new").unwrap();
        new.commit().unwrap();
        assert_eq!(std::fs::read(base.join("victim")).unwrap(), b"keep");
        assert_eq!(std::fs::read(base.join("out.json")).unwrap(), b"new");
        assert!(!std::fs::symlink_metadata(base.join("out.json")).unwrap().is_symlink());
        drop(dir.create_new("dropped", 0o600).unwrap());
        let left: Vec<_> = std::fs::read_dir(&base).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 2, "only the victim and the output: {left:?}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
