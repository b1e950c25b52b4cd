//! The daemon (or the foreground process): opens the image, mounts it,
//! serves until the kernel mount goes, then unmounts the image cleanly.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use novafs::{Fs, MountOptions};
use novafs_fuse::{MountConfig, MountError, Mounted};
use pm::{MapOptions, MmapRegion};

use super::checks::{check_fuse_available, check_mountpoint};
use super::mountinfo::image_is_mounted;
use super::options::parse_options;
use super::signals::on_signals;
use super::snapshots::{snapshot_error, snapshot_fsname, SnapshotMounts};
use super::state::StatePaths;
use super::unused::UntilUnused;
use super::{sys, MountArgs};
use crate::control;
use crate::image::{explain, explain_fs};

/// Where readiness goes: the parent's pipe (daemon) or the terminal.
enum Reporter {
    Pipe(io::Stdout),
    Terminal,
}

impl Reporter {
    /// The mount is up; `transport` names how requests travel.
    /// `how`: the transport, and the writeback cache if the kernel took it.
    fn ready(&mut self, image: &Path, mnt: &Path, how: &str) {
        tracing::info!("mounted {} on {} ({how})", image.display(), mnt.display());
        match self {
            Reporter::Pipe(out) => {
                let _ = writeln!(out, "ready {how}").and_then(|()| out.flush());
            }
            Reporter::Terminal => println!(
                "novafs: mounted {} on {} ({how}); serving in the foreground (Ctrl-C or `novafs umount {}` unmounts)",
                image.display(),
                mnt.display(),
                mnt.display()
            ),
        }
    }

    fn error(&mut self, e: &anyhow::Error) {
        let msg = format!("{e:#}").replace('\n', " ");
        match self {
            Reporter::Pipe(out) => {
                tracing::error!("{msg}");
                let _ = writeln!(out, "error {msg}").and_then(|()| out.flush());
            }
            Reporter::Terminal => eprintln!("novafs: {msg}"),
        }
    }
}

pub(super) fn serve(args: &MountArgs) -> ExitCode {
    let mut reporter = if args.daemon {
        // A daemon of its own: no controlling terminal, no hold on the
        // caller's working directory (our paths are absolute), nor on any
        // descriptor its starter left open.
        sys::close_inherited();
        sys::setsid();
        let _ = std::env::set_current_dir("/");
        Reporter::Pipe(io::stdout())
    } else {
        Reporter::Terminal
    };
    // Fail-stop: a panic may leave DRAM state half-updated, and a clean
    // unmount would then persist it. Dying instead is a crash, which the
    // next mount recovers from.
    std::panic::set_hook(Box::new(|info| {
        tracing::error!("fatal: {info}; aborting (the next mount recovers)");
        eprintln!("novafs: fatal: {info}");
        std::process::abort();
    }));
    // Before any thread exists, so every thread inherits the mask and the
    // signals reach only the signal thread's sigwait.
    let signals = match sys::block_termination_signals() {
        Ok(s) => s,
        Err(e) => {
            reporter.error(&anyhow!("cannot block signals: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let daemon = match Daemon::start(args) {
        Ok(d) => d,
        Err(e) => {
            reporter.error(&e);
            return ExitCode::FAILURE;
        }
    };
    let Daemon {
        image,
        mnt,
        state,
        mut mounted,
        snapshots,
        timed,
        until_unused,
    } = daemon;
    let unmounter = mounted.unmounter();
    let signal_mnt = mnt.clone();
    let spawned = thread::Builder::new()
        .name("signals".into())
        .spawn(move || on_signals(&signals, unmounter, &signal_mnt));
    if let Err(e) = spawned {
        tracing::warn!("no signal thread ({e}): SIGTERM will not unmount");
    }
    let served = snapshots.clone();
    let mount_snapshot: control::MountSnapshot = Box::new(move |fs, name, mnt| served.mount(fs, name, mnt));
    let watch = until_unused.and_then(|u| {
        u.watch(mounted.unmounter(), mnt.clone())
            .inspect_err(|e| tracing::error!("{e:#}: the mount stays until `novafs umount`"))
            .ok()
    });
    let stats = mounted.stats();
    let control = control::Server::start(&state.ctl, mounted.fs(), stats.clone(), mount_snapshot)
        .inspect_err(|e| tracing::warn!("no control channel ({e}): `novafs scrub` cannot reach this mount"))
        .ok();
    let how = match (mounted.transport(), mounted.writeback_cache()) {
        (transport, true) => format!("{transport}; writeback cache: writes durable at fsync or close"),
        (transport, false) => transport.to_string(),
    };
    reporter.ready(&image, &mnt, &how);
    let (result, fs) = mounted.serve();
    if let Err(e) = result {
        tracing::error!("FUSE session ended with an error: {e}");
    }
    if timed {
        if let Err(e) = fs::write(&state.stats, stats.render()) {
            tracing::warn!("cannot write {}: {e}", state.stats.display());
        }
    }
    // A scrub in progress stops at its next inode and lets the file
    // system go, so that it can be unmounted cleanly.
    if let Some(c) = control {
        c.stop();
    }
    snapshots.stop();
    let outcome = match Arc::try_unwrap(fs).ok() {
        Some(fs) => fs.unmount().map_err(|e| explain_fs(&image, e)),
        None => Err(anyhow!("the file system was still referenced")),
    };
    let clean = outcome.is_ok();
    let code = match outcome {
        Ok(()) => {
            state.remove_own();
            tracing::info!("unmounted {}; image marked clean", mnt.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            let msg = format!("{e:#}").replace('\n', " ");
            tracing::error!("clean unmount failed: {msg}; the next mount will recover");
            state.record_failure(&msg);
            ExitCode::FAILURE
        }
    };
    if let Some(w) = watch {
        // A mount that ended with its last user leaves no log behind
        // unless something went wrong.
        w.clean_up(&mnt, clean.then_some(state.log.as_path()));
    }
    code
}

/// A daemon that has mounted: what `serve` needs afterwards.
struct Daemon {
    image: PathBuf,
    mnt: PathBuf,
    state: StatePaths,
    mounted: Mounted,
    snapshots: Arc<SnapshotMounts>,
    /// `-o stats`: leave the request table beside the log at the end.
    timed: bool,
    /// `-o until_unused=PATH`: unmount once PATH's users are gone.
    until_unused: Option<UntilUnused>,
}

impl Daemon {
    /// Every check, then the image, then the kernel mount. Errors before
    /// the image is opened leave it untouched.
    fn start(args: &MountArgs) -> Result<Daemon> {
        let opts = parse_options(&args.options)?;
        let mnt = check_mountpoint(&args.mountpoint)?;
        check_fuse_available()?;
        let state = StatePaths::new(&mnt)?;
        let until_unused = opts.until_unused.as_deref().map(UntilUnused::open).transpose()?;
        let image = fs::canonicalize(&args.image).map_err(|e| image_error(&args.image, e))?;
        tracing::info!(
            "novafs {} daemon pid {}: mounting {} on {} ({} threads{}{}{}{})",
            env!("CARGO_PKG_VERSION"),
            std::process::id(),
            image.display(),
            mnt.display(),
            opts.threads,
            if opts.read_only { ", ro" } else { "" },
            if opts.allow_other { ", allow_other" } else { "" },
            if opts.eadr { ", eadr" } else { "" },
            if opts.nvmm.is_emulated() {
                format!(", NVMM {}", opts.nvmm.explain())
            } else {
                String::new()
            },
        );
        state
            .write(&image, &mnt, &args.options.join(",").replace('\n', " "))
            .with_context(|| format!("cannot write {}", state.pid.display()))?;
        let map = MapOptions {
            eadr: opts.eadr,
            nvmm: opts.nvmm,
            prefault: opts.prefault,
            lock: true,
            protect: opts.protect,
        };
        let opened = open_when_released(&image, &map)
            .map_err(|e| explain(&image, e))
            .and_then(|region| {
                tracing::info!(protection = %region.protection(), "write protection");
                let mount_opts = MountOptions::default()
                    .read_only(opts.read_only)
                    .meta_replicas(opts.meta_replicas)
                    .consistency(opts.consistency)
                    .batch(opts.batch)
                    .atime(opts.atime)
                    .no_dir_atime(opts.no_dir_atime)
                    // Opens cost no FUSE request unless asked: the kernel's
                    // references keep unlinked files (novafs-fuse's `no_open`).
                    .lookups_hold_files(!opts.open_checks);
                let fs = Fs::open(Arc::new(region), mount_opts).map_err(|e| explain_fs(&image, e))?;
                match &opts.snapshot {
                    None => Ok(fs),
                    Some(name) => fs
                        .open_snapshot(name.as_bytes())
                        .map_err(|e| snapshot_error(&image, name, e)),
                }
            });
        let fs = match opened {
            Ok(fs) => fs,
            Err(e) => {
                state.remove_own();
                return Err(e);
            }
        };
        let cfg = MountConfig {
            read_only: opts.read_only,
            allow_other: opts.allow_other,
            devices: opts.devices,
            setuid: opts.setuid,
            exec: opts.exec,
            threads: opts.threads,
            fsname: match &opts.snapshot {
                None => fsname(&image),
                Some(name) => snapshot_fsname(&image, name),
            },
            uring: opts.uring,
            queue_depth: opts.queue_depth,
            stats: opts.stats,
            inode_names: opts.inode_names,
            writeback_cache: opts.writeback_cache,
        };
        match Mounted::mount(fs, &mnt, &cfg) {
            Ok(mounted) => Ok(Daemon {
                image,
                mnt,
                state,
                mounted,
                snapshots: SnapshotMounts::new(cfg),
                timed: opts.stats,
                until_unused,
            }),
            Err(failed) => {
                let MountError { error, fs } = *failed;
                state.remove_own();
                if let Some(fs) = fs {
                    if let Err(e) = fs.unmount() {
                        tracing::warn!("clean unmount after the failed mount: {e}");
                    }
                }
                Err(mount_error(&mnt, &error, opts.allow_other))
            }
        }
    }
}

/// The source shown in /proc/mounts: the image, unless its path would
/// break the comma-separated option string fusermount3 gets.
pub(super) fn fsname(image: &Path) -> String {
    let s = image.to_string_lossy();
    if s.contains([',', ' ', '\t', '\n', '\\']) {
        "novafs".into()
    } else {
        s.into_owned()
    }
}

fn image_error(image: &Path, e: io::Error) -> anyhow::Error {
    let p = image.display();
    if e.kind() == io::ErrorKind::NotFound {
        anyhow!("{p} does not exist; create it with `novafs mkfs {p}`")
    } else {
        anyhow!("{p}: {e}")
    }
}

pub(super) fn mount_error(mnt: &Path, e: &io::Error, allow_other: bool) -> anyhow::Error {
    let m = mnt.display();
    let text = e.to_string();
    if allow_other && text.contains("user_allow_other") {
        anyhow!("allow_other needs 'user_allow_other' in /etc/fuse.conf (or mounting as root)")
    } else if e.kind() == io::ErrorKind::PermissionDenied || e.raw_os_error() == Some(libc::EPERM) {
        anyhow!("cannot mount on {m}: permission denied; mount as root, or own {m} and have fusermount3 installed")
    } else {
        anyhow!(
            "cannot mount on {m}: {}",
            text.lines().next().unwrap_or("unknown error")
        )
    }
}

/// Maps `image` for the daemon. A daemon whose mount was just unmounted
/// (umount(8) returns before it has saved the image and let go of its
/// lock) is waited for, up to [`RELEASE_WAIT`]: the image is locked but
/// no mount names it any more. A mounted image is refused at once.
fn open_when_released(image: &Path, map: &MapOptions) -> Result<MmapRegion, pm::PmError> {
    let start = Instant::now();
    loop {
        match MmapRegion::open(image, map) {
            Err(pm::PmError::Busy { .. }) if start.elapsed() < RELEASE_WAIT && !image_is_mounted(image) => {
                thread::sleep(Duration::from_millis(10));
            }
            r => return r,
        }
    }
}

/// How long a mount waits for the previous daemon of its image to exit.
const RELEASE_WAIT: Duration = Duration::from_secs(10);
