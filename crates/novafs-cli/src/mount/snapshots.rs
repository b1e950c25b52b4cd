//! Snapshots the daemon serves read-only beside its own mount.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread;

use anyhow::{anyhow, Context, Result};
use novafs::Fs;
use novafs_fuse::{MountConfig, Mounted, Unmounter};

use super::checks::check_mountpoint;
use super::daemon::{fsname, mount_error};
use crate::image::explain_fs;

/// Read-only mounts of snapshots this daemon serves beside its own
/// (`novafs snapshot mount`), each with a thread of its own, ended by
/// `novafs umount` or with the daemon.
pub(super) struct SnapshotMounts {
    /// The live mount's configuration, which they follow.
    cfg: MountConfig,
    served: Mutex<Vec<(Unmounter, thread::JoinHandle<()>)>>,
}

impl SnapshotMounts {
    pub(super) fn new(cfg: MountConfig) -> Arc<SnapshotMounts> {
        Arc::new(SnapshotMounts {
            cfg,
            served: Mutex::new(Vec::new()),
        })
    }

    /// Mounts a view of snapshot `name` of `fs` read-only at `mnt`.
    pub(super) fn mount(&self, fs: &Fs, name: &[u8], mnt: &Path) -> Result<()> {
        let mnt = check_mountpoint(mnt)?;
        let shown = String::from_utf8_lossy(name).into_owned();
        let view = fs.open_snapshot(name).map_err(|e| match e {
            novafs::Error::NotFound => anyhow!("there is no snapshot '{shown}'; `novafs snapshot list` shows them"),
            e => anyhow!("snapshot '{shown}': {e}"),
        })?;
        let cfg = MountConfig {
            read_only: true,
            threads: 1,
            // Nothing is written through a snapshot.
            writeback_cache: false,
            fsname: snapshot_fsname(Path::new(&self.cfg.fsname), &shown),
            ..self.cfg.clone()
        };
        let mut mounted =
            Mounted::mount(view, &mnt, &cfg).map_err(|failed| mount_error(&mnt, &failed.error, cfg.allow_other))?;
        let unmounter = mounted.unmounter();
        let thread = thread::Builder::new()
            .name("snapshot".into())
            .spawn(move || {
                let (result, _view) = mounted.serve();
                if let Err(e) = result {
                    tracing::warn!("snapshot mount ended with an error: {e}");
                }
            })
            .context("cannot start the snapshot mount's thread")?;
        tracing::info!("mounted snapshot {shown} on {}", mnt.display());
        self.served
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((unmounter, thread));
        Ok(())
    }

    /// Unmounts every snapshot mount still there (lazily: a busy one goes
    /// when its last file is closed) and waits for their threads.
    pub(super) fn stop(&self) {
        let served = std::mem::take(&mut *self.served.lock().unwrap_or_else(|p| p.into_inner()));
        for (mut unmounter, thread) in served {
            let _ = unmounter.unmount();
            if !thread.is_finished() {
                tracing::warn!("a snapshot mount is busy: it stays until its files are closed");
                continue;
            }
            let _ = thread.join();
        }
    }
}

/// The source a snapshot's mount shows: IMAGE@NAME.
pub(super) fn snapshot_fsname(image: &Path, name: &str) -> String {
    fsname(Path::new(&format!("{}@{name}", image.display())))
}

pub(super) fn snapshot_error(image: &Path, name: &str, e: novafs::Error) -> anyhow::Error {
    match e {
        novafs::Error::NotFound => anyhow!(
            "{} has no snapshot '{name}'; `novafs snapshot list {}` shows them",
            image.display(),
            image.display()
        ),
        e => explain_fs(image, e),
    }
}
