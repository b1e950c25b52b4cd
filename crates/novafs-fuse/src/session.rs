//! Mounting and serving: [`Mounted`] owns one FUSE session over one `Fs`
//! from the kernel mount to the end of the last worker, and hands the `Fs`
//! back so the caller can unmount it cleanly (NOVA §4.7).

use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fuser::{Config, MountOption, Session, SessionACL, SessionUnmounter};
use nix::mount::{umount2, MntFlags, MsFlags};
use nix::unistd::{geteuid, getgid, getuid};
use novafs::{Atime, Fs};

use crate::adapter::FuseFs;

/// How to mount.
#[derive(Clone, Debug)]
pub struct MountConfig {
    /// Mount read-only (the `Fs` should be opened read-only too).
    pub read_only: bool,
    /// Let users other than the one mounting use the file system.
    pub allow_other: bool,
    /// Device nodes on the mount open devices (`dev`; root only).
    pub devices: bool,
    /// Set-user-ID and set-group-ID bits take effect (`suid`; root only).
    pub setuid: bool,
    /// Programs on the mount may be executed (`exec`, the default).
    pub exec: bool,
    /// Worker threads, each reading requests from its own descriptor.
    pub threads: usize,
    /// The mount's source as shown in /proc/mounts (e.g. the image path).
    pub fsname: String,
}

/// A live mount: the kernel has answered INIT, so requests are flowing.
pub struct Mounted {
    session: Session<FuseFs>,
    fs: Arc<Fs>,
    /// The mount point when the kernel mount was made here (as root), so
    /// unmounting it is ours too.
    own_mount: Option<PathBuf>,
}

/// A mount that failed; the `Fs` comes back for a clean unmount.
pub struct MountError {
    pub error: io::Error,
    pub fs: Option<Fs>,
}

impl Mounted {
    /// Mounts `fs` on `mountpoint` and completes the FUSE handshake. Always
    /// with `default_permissions` (the kernel checks access against the
    /// attributes we return); `nodev,nosuid` unless root asks otherwise.
    ///
    /// As root the kernel mount is made here, with mount(2) and the type
    /// `fuse.novafs`, so /proc/mounts and `df -T` name the file system
    /// (fuser's own mount(2) says only `fuse`). Otherwise fuser goes
    /// through fusermount3, which turns the subtype into the same type.
    pub fn mount(fs: Fs, mountpoint: &Path, cfg: &MountConfig) -> Result<Mounted, Box<MountError>> {
        let fs = Arc::new(fs);
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName(cfg.fsname.clone()),
            MountOption::Subtype(SUBTYPE.into()),
            MountOption::DefaultPermissions,
            if cfg.read_only {
                MountOption::RO
            } else {
                MountOption::RW
            },
            if cfg.exec {
                MountOption::Exec
            } else {
                MountOption::NoExec
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
        let session = if geteuid().is_root() {
            kernel_mount(mountpoint, cfg, fs.atime()).and_then(|fd| {
                let acl = config.acl;
                Session::from_fd(FuseFs::new(fs.clone()), fd, acl, config).inspect_err(|_| {
                    // The handshake failed: take the mount down again.
                    let _ = umount2(mountpoint, MntFlags::MNT_DETACH);
                })
            })
        } else {
            Session::new(FuseFs::new(fs.clone()), mountpoint, &config)
        };
        match session {
            Ok(session) => Ok(Mounted {
                session,
                fs,
                own_mount: geteuid().is_root().then(|| mountpoint.to_path_buf()),
            }),
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
        match &self.own_mount {
            Some(path) => Unmounter::Kernel(path.clone()),
            None => Unmounter::Fuser(self.session.unmount_callable()),
        }
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
        let Mounted { session, fs, .. } = self;
        let result = session.run();
        (result, fs)
    }
}

/// Unmounts a [`Mounted`] from another thread.
pub enum Unmounter {
    /// The kernel mount made here as root: umount(2).
    Kernel(PathBuf),
    /// fuser's (through fusermount3).
    Fuser(SessionUnmounter),
}

impl Unmounter {
    /// Unmounts the kernel mount (as root with umount(2), which fails with
    /// EBUSY while files are open there; otherwise lazily with fusermount3).
    /// Taking the mount here also keeps fuser from trying to unmount the
    /// mount point again when the session ends (fuser 0.18 does so even
    /// when the mount is already gone, which could hit a newer mount).
    pub fn unmount(&mut self) -> io::Result<()> {
        match self {
            Unmounter::Kernel(path) => Ok(umount2(path.as_path(), MntFlags::empty())?),
            Unmounter::Fuser(u) => u.unmount(),
        }
    }
}

/// The mount's type is `fuse.` and this.
pub(crate) const SUBTYPE: &str = "novafs";

/// Opens /dev/fuse and mounts it on `mountpoint` as `fuse.novafs` (needs
/// root); returns the descriptor to serve.
pub(crate) fn kernel_mount(
    mountpoint: &Path,
    cfg: &MountConfig,
    (atime, no_dir_atime): (Atime, bool),
) -> io::Result<OwnedFd> {
    let dev = OpenOptions::new().read(true).write(true).open("/dev/fuse")?;
    let root_type = std::fs::metadata(mountpoint)?.mode() & libc::S_IFMT;
    let mut options = format!(
        "fd={},rootmode={root_type:o},user_id={},group_id={},default_permissions",
        dev.as_raw_fd(),
        getuid(),
        getgid()
    );
    if cfg.allow_other {
        options.push_str(",allow_other");
    }
    // The access-time rule novafs follows (the kernel leaves FUSE's atimes
    // to the file system), as /proc/mounts should show it.
    let mut flags = match atime {
        Atime::Never => MsFlags::MS_NOATIME,
        Atime::Relative => MsFlags::MS_RELATIME,
        Atime::Strict => MsFlags::MS_STRICTATIME,
    };
    for (wanted, flag) in [
        (no_dir_atime, MsFlags::MS_NODIRATIME),
        (!cfg.devices, MsFlags::MS_NODEV),
        (!cfg.setuid, MsFlags::MS_NOSUID),
        (!cfg.exec, MsFlags::MS_NOEXEC),
        (cfg.read_only, MsFlags::MS_RDONLY),
    ] {
        if wanted {
            flags |= flag;
        }
    }
    let fstype = format!("fuse.{SUBTYPE}");
    nix::mount::mount(
        Some(cfg.fsname.as_str()),
        mountpoint,
        Some(fstype.as_str()),
        flags,
        Some(options.as_str()),
    )?;
    Ok(OwnedFd::from(dev))
}
