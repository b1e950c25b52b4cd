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

    pub(super) fn record_failure(&self, msg: &str) {
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
}
