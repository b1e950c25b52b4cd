//! Mounting and serving: [`Mounted`] owns one FUSE session over one `Fs`
//! from the kernel mount to the end of the last worker, and hands the `Fs`
//! back so the caller can unmount it cleanly (NOVA §4.7). The session
//! itself (INIT, transports, workers) is `serve`'s.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use nix::mount::MsFlags;
use nix::unistd::{getgid, getuid};
use novafs::{Atime, Fs};

use crate::handler::{FuseFs, MAX_WRITE};
pub use crate::serve::Transport;
use crate::serve::{self, ServeConfig, Session, SessionStats};

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
    /// /dev/fuse worker threads, each reading requests from its own
    /// descriptor (with io_uring: one per CPU queue instead).
    pub threads: usize,
    /// The mount's source as shown in /proc/mounts (e.g. the image path).
    pub fsname: String,
    /// Serve through FUSE over io_uring when the kernel offers it.
    pub uring: bool,
    /// Requests in flight per io_uring queue.
    pub queue_depth: usize,
    /// Time every request by operation ([`Mounted::stats`]).
    pub stats: bool,
    /// `.novafs-ino.<N>` in the root names inode N, so that a process can
    /// open a file by its inode number; such names are reserved.
    pub inode_names: bool,
    /// Let the kernel cache writes: each is durable at the file's next
    /// fsync or close instead of when write(2) returns (README,
    /// "Writeback cache").
    pub writeback_cache: bool,
}

/// A live mount: the kernel has answered INIT, so requests are flowing.
pub struct Mounted {
    session: Session,
    fs: Arc<Fs>,
    handler: Arc<FuseFs>,
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
    /// `fuse.novafs`, so /proc/mounts and `df -T` name the file system.
    /// Otherwise fusermount3 mounts and hands over the descriptor.
    pub fn mount(fs: Fs, mountpoint: &Path, cfg: &MountConfig) -> Result<Mounted, Box<MountError>> {
        let fs = Arc::new(fs);
        let serve_cfg = ServeConfig {
            mount: cfg.clone(),
            atime: fs.atime(),
            max_write: MAX_WRITE,
        };
        let handler = Arc::new(
            FuseFs::new(fs.clone())
                .with_inode_names(cfg.inode_names)
                .with_writeback_cache(cfg.writeback_cache),
        );
        match Session::mount(handler.clone(), mountpoint, &serve_cfg) {
            Ok(session) => Ok(Mounted { session, fs, handler }),
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
        Unmounter(self.session.unmounter())
    }

    /// The mounted file system, for work beside the requests (a scrub
    /// asked for by the daemon's control channel).
    pub fn fs(&self) -> Arc<Fs> {
        self.fs.clone()
    }

    /// How requests travel.
    pub fn transport(&self) -> Transport {
        self.session.transport()
    }

    /// Whether the kernel took the writeback cache
    /// ([`MountConfig::writeback_cache`]) at INIT.
    pub fn writeback_cache(&self) -> bool {
        self.handler.writeback_cache_granted()
    }

    /// The requests served so far, by operation, as a plain-text table
    /// (timed when [`MountConfig::stats`] is on).
    pub fn stats(&self) -> MountStats {
        MountStats(self.session.stats())
    }

    /// Serves requests until the kernel mount goes away (umount, or the
    /// connection is aborted). Returns how the session ended and the `Fs`,
    /// which no request can reach any more; the caller takes it back from
    /// the `Arc` once any other holder ([`Mounted::fs`]) is done.
    pub fn serve(self) -> (io::Result<()>, Arc<Fs>) {
        let Mounted { session, fs, handler } = self;
        // The session's workers hold the handler (and so the `Fs`) now.
        drop(handler);
        (session.serve(), fs)
    }
}

/// A live view of a mount's request counts and times.
#[derive(Clone)]
pub struct MountStats(Arc<SessionStats>);

impl MountStats {
    /// The table, one line per operation seen.
    pub fn render(&self) -> String {
        self.0.render()
    }
}

/// Unmounts a [`Mounted`] from another thread.
pub struct Unmounter(serve::Unmounter);

impl Unmounter {
    /// Unmounts the kernel mount (as root with umount(2), which fails with
    /// EBUSY while files are open there; otherwise lazily with fusermount3).
    pub fn unmount(&mut self) -> io::Result<()> {
        self.0.unmount()
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
