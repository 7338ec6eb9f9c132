//! This host: its name, as log headers record it, and whether a pid names a process on
//! it. Used by the library (who owns an existing log) and by `sf` (is a rank alive).

/// The name `gethostname` gives, as the library records it in each log's header.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; the last byte stays 0, so the name is
    // NUL-terminated even if gethostname truncates it.
    unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(0);
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// This host's name as logs record it and `sf` compares it: `SF_HOST` when it holds a
/// usable name (a simulated node, or a container whose host name is not the node's), else
/// `gethostname`'s. A name with a `/`, a control character or more bytes than a header
/// keeps (`HOST_LEN - 1`) is not usable: it would not survive as a directory name.
pub fn name() -> String {
    std::env::var("SF_HOST").ok().filter(|n| usable_name(n)).unwrap_or_else(hostname)
}

fn usable_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() < crate::core::log::format::HOST_LEN
        && !matches!(name, "." | "..")
        && name.chars().all(|c| !c.is_control() && c != '/')
}

/// Whether a process with this pid exists here. A process of another user still exists
/// (EPERM); a zombie (killed, not yet reaped by a parent that is itself stuck or stopped)
/// does not. Pid 0 and pids beyond `i32::MAX` are refused, because `kill` would read them
/// as process groups.
pub fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 sends nothing; kill only checks that the pid exists and may be
    // signalled.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    (alive || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)) && !is_zombie(pid)
}

/// `/proc/<pid>/stat`'s state field is `Z` for a zombie; it follows the parenthesised
/// command name, which may itself contain spaces and parentheses.
fn is_zombie(pid: libc::pid_t) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_exists_and_reaped_child_does_not() {
        assert!(process_exists(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().expect("spawn true");
        let pid = child.id();
        child.wait().expect("wait");
        assert!(!process_exists(pid));
        assert!(!process_exists(0));
        assert!(!process_exists(u32::MAX));
    }

    #[test]
    fn a_zombie_does_not_exist() {
        // SAFETY: fork in a test; the child exits at once and is reaped below.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: the child ends immediately.
            unsafe { libc::_exit(0) };
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!process_exists(pid as u32), "exited but unreaped");
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    }

    #[test]
    fn usable_host_overrides() {
        assert!(usable_name("node0"));
        for bad in ["", ".", "..", "a/b", "tab\there", &"n".repeat(64)] {
            assert!(!usable_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn hostname_is_not_empty() {
        assert!(!hostname().is_empty());
    }
}
