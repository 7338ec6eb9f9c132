//! How `sf run` holds its job: in a process group of its own, so that a signal sent to
//! sf run's group (`kill -TERM -PGID`, as scancel and systemd send) reaches the job once,
//! forwarded, instead of once directly and once again forwarded. A signal cannot say
//! whether it was sent to a process or to its group (both are `SI_USER` from the same
//! sender), so the job must not share the group.
//!
//! At a terminal, when sf run is the shell's foreground job (it leads the foreground
//! group), the job's group is made the foreground one while sf run holds it, so
//! Ctrl-C and Ctrl-\ go to the job alone, from the terminal, once; when the job stops
//! (Ctrl-Z, or reading the terminal from the background) sf run takes the terminal back
//! and stops the same way, so the shell sees its job stopped, and gives it on and
//! continues the job when the shell continues sf run (`fg`, `bg`).

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicI32, Ordering};

/// The job's process group (its pid) while it runs, for the signal handler.
static JOB_GROUP: AtomicI32 = AtomicI32::new(0);

/// A forwarded signal that arrived before the job's pid was known (the job may already
/// run and tell its caller it is ready): sent to it once the pid is stored. The handler runs
/// on sf run's only thread, so it cannot interleave with the store and the swap.
static PENDING: AtomicI32 = AtomicI32::new(0);

/// Signals an operator or a scheduler sends to stop or poke a job.
const FORWARDED: [libc::c_int; 6] =
    [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT, libc::SIGUSR1, libc::SIGUSR2];

pub struct Job {
    pid: libc::pid_t,
    /// sf run's controlling terminal, when it has one: stops are passed on to the shell
    /// only then (without one there is no job control to keep, and a batch job stopped
    /// alone by a debugger must not stop sf run).
    terminal: Option<File>,
}

/// Starts `command` as the job: its own process group, the terminal's foreground group
/// when sf run leads the foreground group, killed if sf run dies (a SIGKILL to sf run's group, which no
/// one forwards, must still end it).
pub fn spawn(command: &mut Command) -> io::Result<Job> {
    let terminal = controlling_terminal();
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // Only when a shell made sf run a job of its own (the leader of its group): a script
    // without job control shares its group with sf run and must still get the Ctrl-C that
    // ends it (sf run forwards it to the job).
    // SAFETY: tcgetpgrp and getpgrp on a valid descriptor and this process.
    let foreground = terminal
        .as_ref()
        .map(|t| t.as_raw_fd())
        .filter(|&fd| unsafe { libc::getpgrp() == parent && libc::tcgetpgrp(fd) == parent });
    command.process_group(0);
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe
    // calls (prctl, getppid, getpid, sigprocmask, tcsetpgrp), with no allocation.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                // sf run died before the line above took effect.
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            if let Some(fd) = foreground {
                give_terminal(fd, libc::getpid());
            }
            Ok(())
        })
    };
    forward_signals();
    let child = command.spawn()?;
    let pid = child.id() as libc::pid_t;
    JOB_GROUP.store(pid, Ordering::SeqCst);
    // A signal that came between the spawn and the store above was kept for the job.
    let pending = PENDING.swap(0, Ordering::SeqCst);
    if pending != 0 {
        // SAFETY: kill on the process group of the child we just started and have not reaped.
        unsafe { libc::kill(-pid, pending) };
    }
    Ok(Job { pid, terminal })
}

impl Job {
    /// Waits for the job to end, passing its stops on; gives the terminal back to sf run's
    /// group after.
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        let flags = if self.terminal.is_some() { libc::WUNTRACED } else { 0 };
        loop {
            let mut status = 0;
            // SAFETY: waitpid on our own child, not yet reaped, into a valid int.
            if unsafe { libc::waitpid(self.pid, &mut status, flags) } < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if libc::WIFSTOPPED(status) {
                self.stop_with(libc::WSTOPSIG(status));
                continue;
            }
            JOB_GROUP.store(0, Ordering::SeqCst);
            self.take_terminal();
            return Ok(ExitStatus::from_raw(status));
        }
    }

    /// The job stopped by `signal`: sf run stops by it too, and once continued, gives the
    /// terminal back to the job if the shell gave it to sf run (`fg`, not `bg`), and
    /// continues the job. A job that stopped reading or writing the terminal only because
    /// sf run was brought to the foreground after it started (`fg` of a `sf run ... &`)
    /// gets the terminal at once.
    fn stop_with(&self, signal: libc::c_int) {
        let Some(fd) = self.terminal.as_ref().map(|t| t.as_raw_fd()) else { return };
        // SAFETY: tcgetpgrp and getpgrp on a valid descriptor and this process.
        let ours = || unsafe { libc::tcgetpgrp(fd) == libc::getpgrp() };
        if !(ours() && matches!(signal, libc::SIGTTIN | libc::SIGTTOU)) {
            self.take_terminal();
            // SAFETY: raising a stop signal (none of them has a handler here) on
            // ourselves; it returns once we are continued.
            unsafe { libc::raise(signal) };
        }
        if ours() {
            give_terminal(fd, self.pid);
        }
        // SAFETY: kill on the process group of our own child, not yet reaped.
        unsafe { libc::kill(-self.pid, libc::SIGCONT) };
    }

    /// The terminal back to sf run's group, if the job's group has it.
    fn take_terminal(&self) {
        if let Some(fd) = self.terminal.as_ref().map(|t| t.as_raw_fd()) {
            // SAFETY: tcgetpgrp and getpgrp on a valid descriptor and this process.
            if unsafe { libc::tcgetpgrp(fd) } == self.pid {
                give_terminal(fd, unsafe { libc::getpgrp() });
            }
        }
    }
}

/// `/dev/tty`, the controlling terminal, whichever of stdin/stdout/stderr go elsewhere.
fn controlling_terminal() -> Option<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
        .open("/dev/tty")
        .ok()
}

/// Makes `group` the terminal's foreground group. The caller may be in the background
/// (the job before exec, sf run once it gave the terminal away), where tcsetpgrp raises
/// SIGTTOU unless it is blocked: it is, for the call. Async-signal-safe.
fn give_terminal(fd: RawFd, group: libc::pid_t) {
    // SAFETY: sigset operations on local sets, sigprocmask on this (single-threaded at
    // these points) process, tcsetpgrp on a valid descriptor; the mask is restored.
    unsafe {
        let mut ttou: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut ttou);
        libc::sigaddset(&mut ttou, libc::SIGTTOU);
        libc::sigprocmask(libc::SIG_BLOCK, &ttou, &mut old);
        libc::tcsetpgrp(fd, group);
        libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
}

extern "C" fn forward(signal: libc::c_int) {
    let group = JOB_GROUP.load(Ordering::SeqCst);
    if group > 0 {
        // To the job's whole group, as a signal to sf run's group would have reached it.
        // SAFETY: kill is async-signal-safe; the group's leader is reaped by us only after
        // JOB_GROUP went back to 0.
        unsafe { libc::kill(-group, signal) };
    } else {
        PENDING.store(signal, Ordering::SeqCst);
    }
}

fn forward_signals() {
    for signal in FORWARDED {
        // SAFETY: a zeroed sigaction is valid; the handler only reads an atomic and calls
        // kill, both async-signal-safe.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = forward as extern "C" fn(_) as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}
