//! The state file: which daemon serves a mount point, and its log.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::sys;

/// The files of one mount point in the state directory.
pub(super) struct StatePaths {
    pub(super) pid: PathBuf,
    pub(super) log: PathBuf,
    /// The daemon's control channel (`control`).
    pub(super) ctl: PathBuf,
    /// The request table a mount with `-o stats` leaves when it ends.
    pub(super) stats: PathBuf,
}

/// What a state file says.
pub(super) struct DaemonState {
    pub(super) pid: u32,
    pub(super) start: u64,
    pub(super) image: String,
    /// The `-o` options the daemon was started with, comma-separated.
    pub(super) options: String,
    pub(super) failed: Option<String>,
}

impl DaemonState {
    /// True while the recorded process runs (same start time: not a
    /// recycled pid) and is not a zombie with all its threads gone.
    pub(super) fn alive(&self) -> bool {
        // A leader that has exited shows as a zombie while its other threads
        // (the queue threads, io_uring's workers) are still exiting, and
        // they hold the image (its lock, its mapping) until the last one is
        // gone: only then is the daemon gone.
        sys::process_stat(self.pid)
            .is_some_and(|p| p.start == self.start && (p.threads > 1 || (p.state != 'Z' && p.state != 'X')))
    }
}

/// `$NOVAFS_RUN_DIR`, else /run/novafs for root, else
/// `$XDG_RUNTIME_DIR/novafs`, else /tmp/novafs-UID; created private.
pub(crate) fn state_dir() -> Result<PathBuf> {
    let uid = sys::euid();
    let dir = if let Some(d) = std::env::var_os("NOVAFS_RUN_DIR") {
        PathBuf::from(d)
    } else if uid == 0 {
        PathBuf::from("/run/novafs")
    } else if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR") {
        PathBuf::from(x).join("novafs")
    } else {
        PathBuf::from(format!("/tmp/novafs-{uid}"))
    };
    match fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) => bail!("cannot create the state directory {}: {e}", dir.display()),
    }
    let meta = fs::symlink_metadata(&dir).with_context(|| format!("state directory {}", dir.display()))?;
    if !meta.is_dir() || meta.uid() != uid {
        bail!(
            "state directory {} is not a directory owned by you; remove it or set NOVAFS_RUN_DIR",
            dir.display()
        );
    }
    Ok(dir)
}

impl StatePaths {
    pub(super) fn new(mnt: &Path) -> Result<StatePaths> {
        let dir = state_dir()?;
        let bytes = mnt.as_os_str().as_bytes();
        // FNV-1a: stable across runs and versions, unlike std's hasher.
        let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        let readable: String = String::from_utf8_lossy(bytes)
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let readable = readable.trim_start_matches('_');
        let tail = &readable[readable.len().saturating_sub(48)..];
        let key = format!("{tail}-{hash:016x}");
        Ok(StatePaths {
            pid: dir.join(format!("{key}.pid")),
            log: dir.join(format!("{key}.log")),
            ctl: dir.join(format!("{key}.ctl")),
            stats: dir.join(format!("{key}.stats")),
        })
    }

    /// Records this daemon: its pid, image, mount point, log, and the
    /// `-o` options it was started with (`options`, comma-separated).
    pub(super) fn write(&self, image: &Path, mnt: &Path, options: &str) -> io::Result<()> {
        let pid = std::process::id();
        let start = sys::process_stat(pid).map_or(0, |p| p.start);
        let text = format!(
            "pid={pid}\nstart={start}\nimage={}\nmountpoint={}\nlog={}\noptions={options}\n",
            image.display(),
            mnt.display(),
            self.log.display()
        );
        let tmp = self.pid.with_extension("pid.tmp");
        fs::write(&tmp, text)?;
        fs::rename(&tmp, &self.pid)
    }

    pub(super) fn read(&self) -> Option<DaemonState> {
        let text = fs::read_to_string(&self.pid).ok()?;
        let field = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
                .map(str::to_string)
        };
        Some(DaemonState {
            pid: field("pid")?.parse().ok()?,
            start: field("start")?.parse().ok()?,
            image: field("image").unwrap_or_default(),
            options: field("options").unwrap_or_default(),
            failed: field("failed"),
        })
    }

    /// The `-o` options of the daemon recorded as serving `mnt`, if one is.
    pub(super) fn running_options(mnt: &Path) -> Option<String> {
        StatePaths::new(mnt).ok()?.read().map(|d| d.options)
    }

    /// Whether the state file records this process: once the kernel has
    /// let go of the mount point, a new daemon for it may start (and write
    /// its own) while this one is still saving the image.
    fn ours(&self) -> bool {
        self.read().is_some_and(|d| d.pid == std::process::id())
    }

    /// Appends this daemon's failure to its state file, unless a new
    /// daemon's has replaced it.
    pub(super) fn record_failure(&self, msg: &str) {
        if !self.ours() {
            tracing::warn!(
                "{} is another daemon's now: the failure is in this log only",
                self.pid.display()
            );
            return;
        }
        let appended = OpenOptions::new()
            .append(true)
            .open(&self.pid)
            .and_then(|mut f| writeln!(f, "failed={msg}"));
        if let Err(e) = appended {
            tracing::warn!("cannot record the failure in {}: {e}", self.pid.display());
        }
    }

    pub(super) fn remove(&self) {
        let _ = fs::remove_file(&self.pid);
    }

    /// [`remove`](Self::remove) for the daemon itself: only its own file.
    pub(super) fn remove_own(&self) {
        if self.ours() {
            self.remove();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// umount(8) returns once the kernel lets go, and a new daemon for
    /// the same mount point may write its state file while the old one is
    /// still saving the image: the old one must leave that file alone.
    #[test]
    fn a_finishing_daemon_leaves_a_new_daemons_state_file_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let at = |ext: &str| dir.path().join(format!("m.{ext}"));
        let state = StatePaths {
            pid: at("pid"),
            log: at("log"),
            ctl: at("ctl"),
            stats: at("stats"),
        };
        let other = std::process::id().wrapping_add(1);
        let theirs = format!("pid={other}\nstart=5\nimage=/i\nmountpoint=/m\nlog=/l\noptions=stats\n");
        fs::write(&state.pid, theirs).expect("write");
        state.record_failure("saving failed");
        state.remove_own();
        let d = state.read().expect("still there");
        assert_eq!((d.pid, d.failed, d.options.as_str()), (other, None, "stats"));
        state
            .write(Path::new("/i"), Path::new("/m"), "stats,writeback_cache")
            .expect("write");
        assert_eq!(state.read().expect("ours").options, "stats,writeback_cache");
        state.record_failure("saving failed");
        assert_eq!(state.read().expect("ours").failed.as_deref(), Some("saving failed"));
        state.remove_own();
        assert!(state.read().is_none());
    }
}
