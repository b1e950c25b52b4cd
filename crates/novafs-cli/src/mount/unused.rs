//! `-o until_unused=PATH`: a mount that lives while processes use it.
//! Each process using the mount holds `flock(LOCK_SH)` on PATH through
//! its own open file description, inherited across fork and exec (the
//! preload shim's processes, PRELOAD.md). The daemon waits for
//! `flock(LOCK_EX)` on a description of its own, granted once the last of
//! them has exited, then unmounts its mount and ends as after `novafs
//! umount` (the image marked clean); last it removes PATH, the mount
//! point and PATH's directory if that is empty.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use anyhow::{Context, Result};
use nix::fcntl::{Flock, FlockArg};
use novafs_fuse::Unmounter;

/// How often a busy mount is tried again: a process that does not hold
/// the lock (a shell's cwd, an open file) keeps it busy until it lets go.
const BUSY_RETRY: Duration = Duration::from_millis(200);

/// PATH, opened before the mount so that a bad path fails the mount.
pub(super) struct UntilUnused {
    path: PathBuf,
    file: File,
}

/// The watch running; knows whether it ended the mount.
pub(super) struct Watch {
    path: PathBuf,
    fired: Arc<AtomicBool>,
}

impl UntilUnused {
    pub(super) fn open(path: &Path) -> Result<UntilUnused> {
        let file = File::open(path).with_context(|| format!("until_unused={}", path.display()))?;
        Ok(UntilUnused {
            path: path.to_path_buf(),
            file,
        })
    }

    /// Starts the thread that waits for the lock and then unmounts `mnt`.
    pub(super) fn watch(self, mut unmounter: Unmounter, mnt: PathBuf) -> Result<Watch> {
        let fired = Arc::new(AtomicBool::new(false));
        let watch = Watch {
            path: self.path.clone(),
            fired: fired.clone(),
        };
        thread::Builder::new()
            .name("until-unused".into())
            .spawn(move || {
                let lock = match Flock::lock(self.file, FlockArg::LockExclusive) {
                    Ok(lock) => lock,
                    Err((_, e)) => {
                        tracing::error!("cannot lock {}: {e}; the mount stays", self.path.display());
                        return;
                    }
                };
                tracing::info!("{} is unused: unmounting {}", self.path.display(), mnt.display());
                fired.store(true, Ordering::Release);
                let mut warned = false;
                loop {
                    match unmounter.unmount() {
                        Ok(()) => break,
                        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                            if !warned {
                                tracing::warn!("{} is busy: retrying until it is not", mnt.display());
                                warned = true;
                            }
                            thread::sleep(BUSY_RETRY);
                        }
                        Err(e) => {
                            tracing::error!("cannot unmount {}: {e}", mnt.display());
                            return;
                        }
                    }
                }
                // Held until the process exits, after PATH is gone: a
                // process that locks PATH meanwhile finds it unlinked.
                let _held = lock;
                loop {
                    thread::park();
                }
            })
            .context("cannot start the until_unused thread")?;
        Ok(watch)
    }
}

impl Watch {
    /// After the daemon's exit, if the watch ended the mount: PATH, the
    /// mount point, the daemon's `log` when given (a clean unmount) and
    /// PATH's directory if empty go (best effort).
    pub(super) fn clean_up(&self, mnt: &Path, log: Option<&Path>) {
        if !self.fired.load(Ordering::Acquire) {
            return;
        }
        let dir = self.path.parent();
        if let Some(log) = log {
            let _ = fs::remove_file(log);
        }
        for (what, removed) in [
            (self.path.as_path(), fs::remove_file(&self.path)),
            (mnt, fs::remove_dir(mnt)),
        ] {
            match removed {
                Ok(()) => tracing::info!("removed {}", what.display()),
                Err(e) => tracing::warn!("cannot remove {}: {e}", what.display()),
            }
        }
        if let Some(dir) = dir.filter(|d| fs::read_dir(d).is_ok_and(|mut e| e.next().is_none())) {
            match fs::remove_dir(dir) {
                Ok(()) => tracing::info!("removed {}", dir.display()),
                Err(e) => tracing::warn!("cannot remove {}: {e}", dir.display()),
            }
        }
    }
}
