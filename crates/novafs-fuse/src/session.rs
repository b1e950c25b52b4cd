//! Mounting and serving: [`Mounted`] owns one FUSE session over one `Fs`
//! from the kernel mount to the end of the last worker, and hands the `Fs`
//! back so the caller can unmount it cleanly (NOVA §4.7).

use std::fs::OpenOptions;
use std::io;
use std::path::Path;
use std::sync::Arc;

use fuser::{Config, MountOption, Session, SessionACL, SessionUnmounter};
use novafs::Fs;

use crate::adapter::FuseFs;

/// How to mount.
#[derive(Clone, Debug)]
pub struct MountConfig {
    /// Mount read-only (the `Fs` should be opened read-only too).
    pub read_only: bool,
    /// Let users other than the one mounting use the file system.
    pub allow_other: bool,
    /// Worker threads, each reading requests from its own descriptor.
    pub threads: usize,
    /// The mount's source as shown in /proc/mounts (e.g. the image path).
    pub fsname: String,
}

/// A live mount: the kernel has answered INIT, so requests are flowing.
pub struct Mounted {
    session: Session<FuseFs>,
    fs: Arc<Fs>,
}

/// A mount that failed; the `Fs` comes back for a clean unmount.
pub struct MountError {
    pub error: io::Error,
    pub fs: Option<Fs>,
}

impl Mounted {
    /// Mounts `fs` on `mountpoint` and completes the FUSE handshake. Always
    /// with `default_permissions` (the kernel checks access against the
    /// attributes we return) and `nodev,nosuid` (fuser's defaults).
    pub fn mount(fs: Fs, mountpoint: &Path, cfg: &MountConfig) -> Result<Mounted, Box<MountError>> {
        let fs = Arc::new(fs);
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName(cfg.fsname.clone()),
            MountOption::Subtype("novafs".into()),
            MountOption::DefaultPermissions,
            if cfg.read_only {
                MountOption::RO
            } else {
                MountOption::RW
            },
        ];
        config.acl = if cfg.allow_other {
            SessionACL::All
        } else {
            SessionACL::Owner
        };
        config.n_threads = Some(cfg.threads.max(1));
        // A descriptor per worker (FUSE_DEV_IOC_CLONE) needs /dev/fuse to
        // be openable by us, which an unprivileged user of fusermount3 may
        // not have; then the workers share one descriptor.
        config.clone_fd = cfg.threads > 1 && OpenOptions::new().read(true).write(true).open("/dev/fuse").is_ok();
        match Session::new(FuseFs::new(fs.clone()), mountpoint, &config) {
            Ok(session) => Ok(Mounted { session, fs }),
            // The session and its FuseFs are gone: we hold the last Arc.
            Err(error) => Err(Box::new(MountError {
                error,
                fs: Arc::try_unwrap(fs).ok(),
            })),
        }
    }

    /// A handle that unmounts the kernel side from another thread (e.g. on
    /// a signal), ending [`Mounted::serve`].
    pub fn unmounter(&mut self) -> Unmounter {
        Unmounter(self.session.unmount_callable())
    }

    /// The mounted file system, for work beside the requests (a scrub
    /// asked for by the daemon's control channel).
    pub fn fs(&self) -> Arc<Fs> {
        self.fs.clone()
    }

    /// Serves requests until the kernel mount goes away (umount, or the
    /// connection is aborted). Returns how the session ended and the `Fs`,
    /// which no request can reach any more; the caller takes it back from
    /// the `Arc` once any other holder ([`Mounted::fs`]) is done.
    pub fn serve(self) -> (io::Result<()>, Arc<Fs>) {
        let Mounted { session, fs } = self;
        let result = session.run();
        (result, fs)
    }
}

/// Unmounts a [`Mounted`] from another thread.
pub struct Unmounter(SessionUnmounter);

impl Unmounter {
    /// Unmounts the kernel mount (as root with umount(2), which fails with
    /// EBUSY while files are open there; otherwise lazily with fusermount3).
    /// Taking the mount here also keeps fuser from trying to unmount the
    /// mount point again when the session ends (fuser 0.18 does so even
    /// when the mount is already gone, which could hit a newer mount).
    pub fn unmount(&mut self) -> io::Result<()> {
        self.0.unmount()
    }
}
