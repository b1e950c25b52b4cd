//! The few system calls std does not wrap, through nix's safe wrappers
//! (unsafe code stays in the pm crate).

use std::io;
use std::path::Path;

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::signal::{SigSet, Signal};

pub(super) fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

pub(super) fn is_root() -> bool {
    euid() == 0
}

pub(super) fn setsid() {
    // Failure (already a group leader) leaves us in our session: harmless.
    let _ = nix::unistd::setsid();
}

/// Closes every descriptor but 0, 1 and 2: a daemon keeps nothing its
/// starter had open (a pipe's write end would never see its end of file,
/// a lock held through a shared open file description would never be
/// released). To be called while no other thread exists.
pub(super) fn close_inherited() {
    let open: Vec<i32> = match std::fs::read_dir("/proc/self/fd") {
        Ok(dir) => dir
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .filter(|&fd| fd > 2)
            .collect(),
        Err(e) => {
            tracing::warn!("cannot list inherited descriptors: {e}");
            return;
        }
    };
    // The listing's own descriptor is among them, closed already (EBADF).
    for fd in open {
        let _ = nix::unistd::close(fd);
    }
}

/// The MS_* flags of the mount at `target` (from statvfs).
pub(super) fn mount_flags(target: &Path) -> io::Result<libc::c_ulong> {
    use nix::sys::statvfs::{statvfs, FsFlags};
    let f = statvfs(target).map_err(io::Error::from)?.flags();
    let map = [
        (FsFlags::ST_RDONLY, libc::MS_RDONLY),
        (FsFlags::ST_NOSUID, libc::MS_NOSUID),
        (FsFlags::ST_NODEV, libc::MS_NODEV),
        (FsFlags::ST_NOEXEC, libc::MS_NOEXEC),
        (FsFlags::ST_NOATIME, libc::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, libc::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, libc::MS_RELATIME),
    ];
    Ok(map
        .iter()
        .filter(|(st, _)| f.contains(*st))
        .fold(0, |acc, (_, ms)| acc | ms))
}

/// Bind-mounts `from` at `to`, then gives the new mount `flags`.
pub(super) fn bind(from: &Path, to: &Path, flags: libc::c_ulong) -> io::Result<()> {
    mount(Some(from), to, None::<&str>, MsFlags::MS_BIND, None::<&str>).map_err(io::Error::from)?;
    let again = MsFlags::from_bits_truncate(flags | libc::MS_BIND | libc::MS_REMOUNT);
    mount(None::<&str>, to, None::<&str>, again, None::<&str>).map_err(io::Error::from)
}

/// mount(2) with MS_REMOUNT and `flags` on `target`.
pub(super) fn remount(target: &Path, flags: libc::c_ulong) -> io::Result<()> {
    let flags = MsFlags::from_bits_truncate(flags | libc::MS_REMOUNT);
    mount(None::<&str>, target, None::<&str>, flags, None::<&str>).map_err(io::Error::from)
}

pub(super) fn umount(mnt: &Path, lazy: bool) -> io::Result<()> {
    let flags = MntFlags::UMOUNT_NOFOLLOW | if lazy { MntFlags::MNT_DETACH } else { MntFlags::empty() };
    umount2(mnt, flags).map_err(io::Error::from)
}

/// SIGTERM, SIGINT and SIGHUP, blocked so only `wait` receives them.
pub(super) struct SignalSet(SigSet);

pub(super) fn block_termination_signals() -> io::Result<SignalSet> {
    let mut set = SigSet::empty();
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        set.add(sig);
    }
    set.thread_block().map_err(io::Error::from)?;
    Ok(SignalSet(set))
}

impl SignalSet {
    /// Waits for one of the signals; returns its number.
    pub(super) fn wait(&self) -> io::Result<i32> {
        self.0.wait().map(|s| s as i32).map_err(io::Error::from)
    }
}

/// What /proc/PID/stat says of a process: its (leader's) state letter,
/// its start time in clock ticks since boot, and how many of its threads
/// are still alive.
pub(super) struct ProcStat {
    pub state: char,
    pub start: u64,
    pub threads: u64,
}

/// None when there is no such process.
pub(super) fn process_stat(pid: u32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces: parse after it.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        threads: fields.get(17)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive_and_has_a_start_time() {
        let running = std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_millis(200)));
        let p = process_stat(std::process::id()).expect("self");
        assert!(p.state != 'Z' && p.start > 0);
        assert!(p.threads >= 2, "{} threads seen with one more running", p.threads);
        running.join().expect("join");
    }
}
