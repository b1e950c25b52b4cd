//! `novafs umount`, the kernel unmount, and finding the daemon of a mount point.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use super::mountinfo::{find_mount, mount_point_of};
use super::state::{DaemonState, StatePaths};
use super::sys;

/// Unmounts the kernel side: umount2(2) as root, else fusermount3 -u.
/// `lazy` detaches a busy mount (MNT_DETACH, fusermount3 -z).
pub(super) fn kernel_unmount(mnt: &Path, lazy: bool) -> io::Result<()> {
    if sys::is_root() {
        return sys::umount(mnt, lazy);
    }
    let mut cmd = Command::new("fusermount3");
    cmd.arg("-u");
    if lazy {
        cmd.arg("-z");
    }
    let out = cmd.arg("--").arg(mnt).stdin(Stdio::null()).output()?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("busy") {
        Err(io::Error::from_raw_os_error(libc::EBUSY))
    } else {
        Err(io::Error::other(err.trim().to_string()))
    }
}

pub fn umount(path: &Path) -> Result<()> {
    let mnt = resolve_mounted_path(path)?;
    let m = mnt.display();
    let state = StatePaths::new(&mnt)?;
    let daemon = state.read();
    let Some(mount) = find_mount(&mnt)? else {
        if let Some(d) = daemon.as_ref().filter(|d| d.alive()) {
            bail!(
                "{m} is no longer mounted, but its daemon (pid {}) still serves files opened before it was detached; it exits when they are closed",
                d.pid
            );
        }
        state.remove();
        bail!("{m} is not mounted");
    };
    if !mount.fstype.starts_with("fuse") {
        bail!("{m} is a {} mount, not novafs; use umount(8)", mount.fstype);
    }
    // Asked before unmounting: afterwards a live daemon exits at once.
    let serving = daemon.as_ref().is_some_and(DaemonState::alive);
    kernel_unmount(&mnt, false).map_err(|e| match e.raw_os_error() {
        Some(libc::EBUSY) => anyhow!(
            "{m} is busy: a process has a file open or its working directory there; close them (see `fuser -vm {m}`) and retry"
        ),
        Some(libc::EPERM) => {
            anyhow!("cannot unmount {m}: permission denied; run as root or as the user who mounted it")
        }
        _ => anyhow!("cannot unmount {m}: {e}"),
    })?;
    // The image mounted a second time (a shared mount): the daemon goes on
    // serving the other mount.
    if let Some(other) = mount_point_of(Path::new(&mount.source)) {
        println!(
            "novafs: unmounted {m}; {} stays mounted at {}",
            mount.source,
            other.display()
        );
        return Ok(());
    }
    let Some(d) = daemon else {
        // A snapshot's mount is served by the live mount's daemon.
        if mount.source.contains('@') {
            println!("novafs: unmounted snapshot {} from {m}", mount.source);
        } else {
            println!("novafs: unmounted {m} (no novafs daemon was recorded for it)");
        }
        return Ok(());
    };
    if !serving {
        state.remove();
        println!(
            "novafs: unmounted {m}; its daemon had died, so {} was not marked clean: the next mount recovers it",
            d.image
        );
        return Ok(());
    }
    // The daemon sees the session end, unmounts the image and exits.
    let start = Instant::now();
    let mut warned = false;
    while d.alive() {
        if !warned && start.elapsed() > Duration::from_secs(10) {
            eprintln!("novafs: waiting for the daemon (pid {}) to save its state...", d.pid);
            warned = true;
        }
        thread::sleep(Duration::from_millis(5));
    }
    // A clean daemon removes its state file; a failed one says why. (A
    // file of another pid is a new daemon's, mounted meanwhile.)
    let Some(left) = state.read().filter(|l| l.pid == d.pid) else {
        return Ok(());
    };
    state.remove();
    let why = left.failed.unwrap_or_else(|| "it exited without saying why".into());
    bail!(
        "unmounted {m}, but the daemon could not save a clean state ({why}); the next mount recovers {}; log: {}",
        d.image,
        state.log.display()
    )
}

/// The canonical path of a mount point, also when it is a dead FUSE mount
/// (whose root cannot be stat'ed): then its parent is canonicalized.
fn resolve_mounted_path(path: &Path) -> Result<PathBuf> {
    let p = path.display();
    match fs::canonicalize(path) {
        Ok(c) => Ok(c),
        Err(e) if e.kind() == io::ErrorKind::NotFound => bail!("{p} does not exist"),
        Err(e) => {
            let abs = std::path::absolute(path).with_context(|| format!("{p}: {e}"))?;
            match (abs.parent(), abs.file_name()) {
                (Some(dir), Some(name)) => Ok(fs::canonicalize(dir).with_context(|| format!("{p}: {e}"))?.join(name)),
                _ => bail!("{p}: {e}"),
            }
        }
    }
}

/// The control channel of the live novafs daemon serving `path`, or
/// None when `path` is not a novafs mount point.
pub fn control_socket(path: &Path) -> Result<Option<PathBuf>> {
    if !fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        return Ok(None);
    }
    let mnt = resolve_mounted_path(path)?;
    if find_mount(&mnt)?.is_none_or(|m| !m.fstype.starts_with("fuse")) {
        return Ok(None);
    }
    let state = StatePaths::new(&mnt)?;
    match state.read() {
        Some(d) if d.alive() => Ok(Some(state.ctl)),
        _ => bail!("{} is mounted but its novafs daemon is not running", mnt.display()),
    }
}
