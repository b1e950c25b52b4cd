//! Mounting and serving over the crate's own FUSE protocol layer: mount
//! (mount(2) as root, fusermount3 otherwise), the INIT handshake on
//! /dev/fuse, then the transport workers (FUSE over io_uring where the
//! kernel offers it, /dev/fuse workers always) until the kernel ends the
//! connection.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use nix::mount::{umount2, MntFlags};
use nix::unistd::geteuid;
use novafs::Atime;

use crate::session::{kernel_mount, MountConfig, SUBTYPE};
use crate::stats::Stats;
use crate::transport::dev::{self, Notifier};
use crate::transport::uring::{Queues, UringConfig};
use crate::transport::{fusermount, Answer, Args, Handler, Incoming};
use crate::wire::abi::{InitIn, InitOut, FUSE_INIT, FUSE_INIT_EXT, FUSE_MAX_PAGES, FUSE_OVER_IO_URING};
use zerocopy::{FromBytes, IntoBytes};

/// The kernel's request size when max_pages is not negotiated
/// (FUSE_DEFAULT_MAX_PAGES_PER_REQ pages), and its floor for buffers
/// (FUSE_MIN_READ_BUFFER).
const DEFAULT_MAX_PAGES: usize = 32;
const MIN_READ_BUFFER: usize = 8192;
const PAGE: usize = 4096;

/// How to mount and serve.
#[derive(Clone, Debug)]
pub(crate) struct ServeConfig {
    pub mount: MountConfig,
    /// The access-time rule for the mount flags (`Fs::atime()`).
    pub atime: (Atime, bool),
    /// The largest WRITE the kernel may send; set in the INIT reply.
    pub max_write: u32,
}

/// How requests travel once the mount is up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Uring,
    Dev,
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transport::Uring => "FUSE over io_uring",
            Transport::Dev => "/dev/fuse",
        })
    }
}

/// Request timing of both transports of one session.
pub(crate) struct SessionStats {
    pub dev: Arc<Stats>,
    pub uring: Arc<Stats>,
}

impl SessionStats {
    pub(crate) fn render(&self) -> String {
        let mut out = self.dev.render("/dev/fuse");
        if self.uring.total() > 0 {
            out.push('\n');
            out.push_str(&self.uring.render(
                "FUSE over io_uring (a reply is committed by the call that waits for the next request: its time is in wait_us)",
            ));
        }
        out
    }
}

/// A mounted, initialised FUSE connection and its workers.
pub(crate) struct Session {
    unmounter: Unmounter,
    transport: Transport,
    stats: Arc<SessionStats>,
    workers: Vec<JoinHandle<io::Result<()>>>,
}

impl Session {
    /// Mounts on `mountpoint` (mount(2) as root, fusermount3 otherwise)
    /// and [starts](Session::start) the session there.
    pub(crate) fn mount(handler: Arc<dyn Handler>, mountpoint: &Path, cfg: &ServeConfig) -> io::Result<Session> {
        let via_fusermount = !geteuid().is_root();
        let dev = if via_fusermount {
            fusermount::mount(mountpoint, &fusermount_options(cfg))?
        } else {
            kernel_mount(mountpoint, &cfg.mount, cfg.atime)?
        };
        let unmounter = Unmounter {
            mountpoint: mountpoint.to_path_buf(),
            via_fusermount,
        };
        Session::start(handler, dev, unmounter, cfg)
    }

    /// Answers INIT on the freshly mounted `dev` through `handler` (adding
    /// max_write, and FUSE_OVER_IO_URING when io_uring is wanted, offered
    /// and its queues are made) and starts the workers. On failure the
    /// mount is taken down with `unmounter`.
    pub(crate) fn start(
        handler: Arc<dyn Handler>,
        dev: OwnedFd,
        unmounter: Unmounter,
        cfg: &ServeConfig,
    ) -> io::Result<Session> {
        let dev = Arc::new(dev);
        let stats = Arc::new(SessionStats {
            dev: Arc::new(Stats::new(cfg.mount.stats)),
            uring: Arc::new(Stats::new(cfg.mount.stats)),
        });
        handler.connected(Notifier::new(dev.clone()));
        match handshake(&dev, &handler, cfg, &stats) {
            Ok((transport, workers)) => {
                tracing::info!(%transport, mountpoint = %unmounter.mountpoint.display(), "FUSE session up");
                Ok(Session {
                    unmounter,
                    transport,
                    stats,
                    workers,
                })
            }
            Err(e) => {
                if let Err(undo) = unmounter.detach() {
                    tracing::warn!(error = %undo, "cannot take the failed mount down");
                }
                Err(e)
            }
        }
    }

    pub(crate) fn transport(&self) -> Transport {
        self.transport
    }

    pub(crate) fn stats(&self) -> Arc<SessionStats> {
        self.stats.clone()
    }

    pub(crate) fn unmounter(&self) -> Unmounter {
        self.unmounter.clone()
    }

    /// Waits until every worker has ended (the kernel ended the connection:
    /// unmount or abort); the first worker error, if any.
    pub(crate) fn serve(self) -> io::Result<()> {
        let mut result = Ok(());
        for worker in self.workers {
            let ended = worker
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("a FUSE worker panicked")));
            if let Err(e) = ended {
                tracing::error!(error = %e, "FUSE worker failed");
                result = result.and(Err(e));
            }
        }
        result
    }
}

/// Takes a [`Session`]'s mount down from another thread, ending its
/// workers.
#[derive(Clone, Debug)]
pub(crate) struct Unmounter {
    mountpoint: PathBuf,
    via_fusermount: bool,
}

impl Unmounter {
    /// For a mount made by [`fusermount::mount`].
    #[cfg(test)]
    pub(crate) fn fusermount(mountpoint: &Path) -> Unmounter {
        Unmounter {
            mountpoint: mountpoint.to_path_buf(),
            via_fusermount: true,
        }
    }

    /// Unmounts: umount(2) as root, which fails with EBUSY while files are
    /// open there; fusermount3's lazy unmount otherwise.
    pub(crate) fn unmount(&self) -> io::Result<()> {
        if self.via_fusermount {
            fusermount::unmount(&self.mountpoint)
        } else {
            Ok(umount2(&self.mountpoint, MntFlags::empty())?)
        }
    }

    fn detach(&self) -> io::Result<()> {
        if self.via_fusermount {
            fusermount::unmount(&self.mountpoint)
        } else {
            Ok(umount2(&self.mountpoint, MntFlags::MNT_DETACH)?)
        }
    }
}

/// The mount options fusermount3 takes for `cfg` (it adds nosuid and
/// nodev itself for a user).
pub(crate) fn fusermount_options(cfg: &ServeConfig) -> String {
    let mut options = format!(
        "fsname={},subtype={SUBTYPE},default_permissions,{},{}",
        cfg.mount.fsname,
        if cfg.mount.read_only { "ro" } else { "rw" },
        if cfg.mount.exec { "exec" } else { "noexec" },
    );
    // fusermount3 (3.14) knows only noatime of the access-time options;
    // relatime is the kernel's default, and strictatime cannot be asked for.
    match cfg.atime.0 {
        Atime::Never => options.push_str(",noatime"),
        Atime::Relative => {}
        Atime::Strict => tracing::info!("fusermount3 cannot mount with strictatime; relatime instead"),
    }
    if cfg.mount.allow_other {
        options.push_str(",allow_other");
    }
    options
}

type Workers = Vec<JoinHandle<io::Result<()>>>;

/// Reads INIT, answers it, and starts the workers: the io_uring queues
/// (made before the reply, registered after it) and the /dev/fuse workers.
fn handshake(
    dev: &Arc<OwnedFd>,
    handler: &Arc<dyn Handler>,
    cfg: &ServeConfig,
    stats: &SessionStats,
) -> io::Result<(Transport, Workers)> {
    let max_write = cfg.max_write.max(PAGE as u32);
    let mut request = vec![0u8; max_write as usize + PAGE];
    let mut out = vec![0u8; max_write as usize + PAGE];
    loop {
        let Some(n) = dev::receive(dev.as_fd(), &mut request)? else {
            return Err(io::Error::other("the kernel ended the connection before INIT"));
        };
        let Some((header, args)) = request.get(..n).and_then(dev::parse) else {
            tracing::error!(n, "malformed request from /dev/fuse");
            continue;
        };
        if header.opcode != FUSE_INIT {
            dev::send(dev.as_fd(), header.unique, Answer::Error(libc::EIO), &out)?;
            continue;
        }
        stats.dev.record(FUSE_INIT, None);
        // An older kernel sends a shorter struct: the rest reads as zero.
        let mut init = InitIn::default();
        let known = args.len().min(size_of::<InitIn>());
        init.as_mut_bytes()[..known].copy_from_slice(&args[..known]);
        let offered = init.flags & FUSE_INIT_EXT as u32 != 0 && u64::from(init.flags2) << 32 & FUSE_OVER_IO_URING != 0;
        let incoming = Incoming {
            header: &header,
            args: Args::Whole(args),
        };
        let len = match handler.handle(&incoming, &mut out) {
            Answer::Reply(len) if len >= size_of::<InitOut>() && len <= out.len() => len,
            answer => {
                dev::send(dev.as_fd(), header.unique, answer, &out)?;
                return Err(io::Error::other("the handler did not accept INIT"));
            }
        };
        let Ok((reply, _)) = InitOut::mut_from_prefix(&mut out[..len]) else {
            return Err(io::Error::other("the handler's INIT reply is misaligned"));
        };
        reply.max_write = max_write;
        let pages = if u64::from(reply.flags) & FUSE_MAX_PAGES != 0 {
            usize::from(reply.max_pages).max(1)
        } else {
            DEFAULT_MAX_PAGES
        };
        // What the kernel may put in one request or ask for in one reply
        // besides the headers (its ring's max_payload_sz).
        let payload_size = MIN_READ_BUFFER.max(max_write as usize).max(pages * PAGE);
        let queues = match (cfg.mount.uring, offered) {
            (true, true) => {
                let uring_cfg = UringConfig {
                    queue_depth: cfg.mount.queue_depth,
                    payload_size,
                };
                Queues::start(dev, uring_cfg, handler, &stats.uring)
                    .inspect_err(|e| tracing::warn!(error = %e, "cannot set up FUSE over io_uring"))
                    .ok()
            }
            (true, false) => {
                tracing::info!("the kernel does not offer FUSE over io_uring (enable_uring is off or missing)");
                None
            }
            (false, _) => None,
        };
        if queues.is_some() {
            reply.flags |= FUSE_INIT_EXT as u32;
            reply.flags2 |= (FUSE_OVER_IO_URING >> 32) as u32;
        }
        if let Err(e) = dev::send(dev.as_fd(), header.unique, Answer::Reply(len), &out) {
            if let Some(queues) = queues {
                queues.abandon();
            }
            return Err(e);
        }
        let mut workers = Vec::new();
        let transport = match queues.map(Queues::register) {
            Some((Ok(()), threads)) => {
                workers.extend(threads);
                Transport::Uring
            }
            Some((Err(e), threads)) => {
                tracing::warn!(error = %e, "FUSE over io_uring refused; serving through /dev/fuse");
                workers.extend(threads);
                Transport::Dev
            }
            None => Transport::Dev,
        };
        // With io_uring only forgets and interrupts come through /dev/fuse.
        let threads = match transport {
            Transport::Uring => 1,
            Transport::Dev => cfg.mount.threads,
        };
        workers.extend(dev::spawn_workers(
            dev,
            threads,
            payload_size + PAGE,
            handler,
            &stats.dev,
        )?);
        return Ok((transport, workers));
    }
}
