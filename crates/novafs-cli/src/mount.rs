//! `novafs mount` and `novafs umount`: the FUSE daemon's life cycle.
//!
//! `mount` checks everything that can be checked without touching the
//! image (mount point, /dev/fuse, privileges), then opens the image under
//! its exclusive lock and mounts it with `novafs-fuse`. Without
//! `--foreground` it re-executes itself as a daemon (new session, stdout a
//! pipe back to the parent, stderr the log file) and returns once the
//! daemon reports "ready" (the kernel answered INIT) or an error line.
//!
//! Each daemon records its pid in a state file named after the mount point.
//! The daemon ends when the kernel mount goes away — `novafs umount`,
//! umount(8), fusermount3 -u, or SIGTERM/SIGINT/SIGHUP, on which it
//! unmounts itself — and then unmounts the `Fs` cleanly (allocator state
//! saved, image marked clean) and removes the state file. `umount` waits
//! for that, so when it returns the image is clean. After SIGKILL the flock
//! dies with the process and the next mount recovers (NOVA §4.7).

use std::ffi::OsString;
use std::fs::{self, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use novafs::{Atime, Fs, MetaReplicas, MountOptions};
use novafs_fuse::{MountConfig, MountError, Mounted, Unmounter};
use pm::{MapOptions, MmapRegion, WriteProtect};

use crate::control;
use crate::image::{explain, explain_fs};

#[derive(clap::Args)]
pub struct MountArgs {
    /// Serve in the foreground, logging to stderr, instead of from a
    /// background daemon.
    #[arg(long)]
    foreground: bool,
    /// Comma-separated mount options: ro, rw, allow_other, dev, nodev,
    /// suid, nosuid (dev and suid from root only; default nodev,nosuid),
    /// exec, noexec, threads=N
    /// (default: one per CPU), eadr (the platform's caches are persistent),
    /// protect=off|auto|pkey|mprotect (keep the image read-only outside
    /// novafs' own stores; default auto: memory protection keys where the
    /// CPU has them), meta_protection=on|off (require the metadata
    /// replicas, or skip writing them on this mount: faster, and the next
    /// protected mount rewrites them; default: as the image was made).
    #[arg(short = 'o', value_name = "OPTIONS")]
    options: Vec<String>,
    /// Set by `novafs mount` when it starts the daemon: report readiness on
    /// stdout.
    #[arg(long, hide = true)]
    daemon: bool,
    /// Print nothing on success (mount(8)'s helpers are quiet).
    #[arg(long, hide = true)]
    quiet: bool,
    /// The novafs image (a file, or a devdax device).
    image: PathBuf,
    /// An existing directory that is not a mount point already.
    mountpoint: PathBuf,
}

/// Parsed `-o` options.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Options {
    read_only: bool,
    allow_other: bool,
    devices: bool,
    setuid: bool,
    exec: bool,
    threads: usize,
    eadr: bool,
    protect: WriteProtect,
    meta_replicas: MetaReplicas,
    atime: Atime,
    no_dir_atime: bool,
    /// Serve this snapshot of the image, read-only, instead of its live
    /// state (`novafs snapshot mount IMAGE NAME DIR`).
    snapshot: Option<String>,
}

const KNOWN_OPTIONS: &str = "ro, rw, snapshot=NAME, allow_other, dev, nodev, suid, nosuid, exec, noexec, \
     relatime, noatime, strictatime, atime, lazytime, nodiratime, sync, \
     threads=N, eadr, protect=off|auto|pkey|mprotect, meta_protection=on|off (and fstab's defaults, noauto, nofail, x-*)";

fn parse_options(list: &[String]) -> Result<Options> {
    let mut o = Options {
        read_only: false,
        allow_other: false,
        devices: false,
        setuid: false,
        exec: true,
        threads: thread::available_parallelism().map_or(1, |n| n.get()),
        eadr: false,
        protect: WriteProtect::default(),
        meta_replicas: MetaReplicas::AsFormatted,
        atime: Atime::Relative,
        no_dir_atime: false,
        snapshot: None,
    };
    for opt in list.iter().flat_map(|s| s.split(',')).filter(|s| !s.is_empty()) {
        match opt {
            "ro" => o.read_only = true,
            "rw" => o.read_only = false,
            "allow_other" => o.allow_other = true,
            "dev" | "suid" if !nix::unistd::geteuid().is_root() => {
                bail!("{opt} needs root: a mount by another user is always nodev,nosuid")
            }
            "dev" => o.devices = true,
            "nodev" => o.devices = false,
            "suid" => o.setuid = true,
            "nosuid" => o.setuid = false,
            "exec" => o.exec = true,
            "noexec" => o.exec = false,
            "eadr" => o.eadr = true,
            // What /etc/fstab and mount(8) pass along that is theirs, not
            // the file system's.
            "defaults" | "auto" | "noauto" | "nofail" | "_netdev" | "user" | "users" | "owner" | "group" => {}
            _ if opt.starts_with("x-") || opt.starts_with("comment=") => {}
            // Every operation is durable when it returns (strict mode):
            // as synchronous as sync and dirsync ask, which async allows.
            "sync" | "dirsync" | "async" => {}
            // Access times, as Linux: relatime unless asked otherwise.
            "noatime" => o.atime = Atime::Never,
            "relatime" | "atime" => o.atime = Atime::Relative,
            "strictatime" => o.atime = Atime::Strict,
            "nodiratime" => o.no_dir_atime = true,
            "diratime" => o.no_dir_atime = false,
            // Every update novafs makes is durable at once (one log
            // entry); there is nothing to keep in memory for later.
            "lazytime" | "nolazytime" => {}
            "meta_protection=on" => o.meta_replicas = MetaReplicas::Required,
            "meta_protection=off" => o.meta_replicas = MetaReplicas::Skipped,
            _ if opt.starts_with("meta_protection=") => {
                bail!("{opt}: use meta_protection=on or meta_protection=off")
            }
            _ if opt.starts_with("snapshot=") => {
                o.snapshot = Some(opt["snapshot=".len()..].to_string());
                o.read_only = true;
            }
            _ if opt.starts_with("protect=") => {
                o.protect = opt["protect=".len()..].parse().map_err(|e: String| anyhow!(e))?;
            }
            _ => match opt.strip_prefix("threads=") {
                Some(n) => {
                    o.threads = n
                        .parse()
                        .ok()
                        .filter(|n| (1..=1024).contains(n))
                        .ok_or_else(|| anyhow!("threads={n} is not a thread count; use 1 to 1024"))?;
                }
                None => bail!("unknown mount option '{opt}'; known options: {KNOWN_OPTIONS}"),
            },
        }
    }
    Ok(o)
}

/// What mount(8)'s helper call `mount.novafs SOURCE TARGET [-sfnv] [-N
/// NAMESPACE] [-o OPTIONS] [-t TYPE]` (for `-t fuse.novafs` and fstab
/// lines of type novafs) asks for.
pub enum HelperCall {
    /// Mount: the `novafs mount` command line that does it, quiet unless
    /// `-v`.
    Mount(Vec<OsString>),
    /// `-o remount,...`: change the mount's flags in the kernel
    /// ([`remount`]).
    Remount { target: OsString, options: Vec<String> },
    /// `-f` (fake): nothing to do.
    Nothing,
}

/// Parses mount(8)'s helper call. `-s` (sloppy) is not honoured: an
/// option novafs does not know still fails the mount, so that none is
/// silently dropped.
pub fn helper_call(args: &[OsString]) -> Result<HelperCall> {
    let mut positional = Vec::new();
    let mut options = Vec::new();
    let mut verbose = false;
    let mut rest = args.iter().skip(1);
    while let Some(a) = rest.next() {
        match a.to_str() {
            Some("-o") => options.push(rest.next().context("mount.novafs: -o needs options")?.clone()),
            Some("-t") => {
                let t = rest.next().context("mount.novafs: -t needs a type")?;
                if t != "novafs" && t != "fuse.novafs" {
                    bail!("mount.novafs mounts type novafs, not {}", t.to_string_lossy());
                }
            }
            Some("-N") => bail!("mount.novafs: -N (another mount namespace) is not supported"),
            Some(flags) if flags.starts_with('-') && flags.len() > 1 => {
                for f in flags[1..].chars() {
                    match f {
                        'f' => return Ok(HelperCall::Nothing),
                        'v' => verbose = true,
                        's' | 'n' => {}
                        _ => bail!("mount.novafs: unknown flag -{f}"),
                    }
                }
            }
            _ => positional.push(a.clone()),
        }
    }
    let [source, target] = <[OsString; 2]>::try_from(positional)
        .map_err(|_| anyhow!("usage: mount.novafs IMAGE MOUNTPOINT [-o OPTIONS]"))?;
    let list: Vec<String> = options
        .iter()
        .flat_map(|o| o.to_string_lossy().split(',').map(str::to_owned).collect::<Vec<_>>())
        .filter(|o| !o.is_empty())
        .collect();
    if list.iter().any(|o| o == "remount") {
        return Ok(HelperCall::Remount { target, options: list });
    }
    let mut line: Vec<OsString> = vec!["novafs".into(), "mount".into()];
    if verbose {
        line.push("-v".into());
    } else {
        line.push("--quiet".into());
    }
    for o in options {
        line.push("-o".into());
        line.push(o);
    }
    // mount(8)'s defaults are dev and suid, which it does not pass on
    // (only nodev and nosuid): for root, as for kernel file systems and
    // libfuse's mount.fuse3, a mount through mount(8) has them unless
    // told otherwise. `novafs mount` itself keeps nodev,nosuid.
    if sys::is_root() {
        for (default, negation) in [("dev", "nodev"), ("suid", "nosuid")] {
            if !list.iter().any(|o| o == negation) {
                line.push("-o".into());
                line.push(default.into());
            }
        }
    }
    line.extend([source, target]);
    Ok(HelperCall::Mount(line))
}

/// `mount -o remount,...` of a novafs mount: the kernel changes the
/// mount's flags (read-only, nosuid, nodev, noexec, access times), keeping
/// those the options do not name; the daemon goes on serving (the VFS
/// refuses writes to a read-only mount before they reach it). Options
/// that only a new mount can change are refused with a message.
pub fn remount(target: &Path, options: &[String]) -> Result<()> {
    let t = target.display();
    if !sys::is_root() {
        bail!("remounting {t} needs root");
    }
    let mut flags = sys::mount_flags(target).with_context(|| format!("{t} is not a mount point"))?;
    for o in options {
        let (set, clear) = match o.as_str() {
            "remount"
            | "defaults"
            | "auto"
            | "noauto"
            | "nofail"
            | "_netdev"
            | "sync"
            | "dirsync"
            | "async"
            | "lazytime"
            | "nolazytime"
            | "allow_other"
            | "default_permissions" => continue,
            _ if o.starts_with("x-") || o.starts_with("comment=") => continue,
            // What mount(8) merges in from the mount's current options.
            _ if o.starts_with("user_id=") || o.starts_with("group_id=") || o.starts_with("rootmode=") => continue,
            "ro" => (libc::MS_RDONLY, 0),
            "rw" => (0, libc::MS_RDONLY),
            "nosuid" => (libc::MS_NOSUID, 0),
            "suid" => (0, libc::MS_NOSUID),
            "nodev" => (libc::MS_NODEV, 0),
            "dev" => (0, libc::MS_NODEV),
            "noexec" => (libc::MS_NOEXEC, 0),
            "exec" => (0, libc::MS_NOEXEC),
            "noatime" => (libc::MS_NOATIME, libc::MS_RELATIME | libc::MS_STRICTATIME),
            "relatime" | "atime" => (libc::MS_RELATIME, libc::MS_NOATIME | libc::MS_STRICTATIME),
            "strictatime" => (libc::MS_STRICTATIME, libc::MS_NOATIME | libc::MS_RELATIME),
            "nodiratime" => (libc::MS_NODIRATIME, 0),
            "diratime" => (0, libc::MS_NODIRATIME),
            _ => bail!("{o} cannot change on a remount of {t}; unmount and mount again with it"),
        };
        flags = (flags | set) & !clear;
    }
    sys::remount(target, flags).with_context(|| format!("cannot remount {t}"))
}

pub fn run(args: &MountArgs) -> ExitCode {
    if args.foreground || args.daemon {
        return serve(args);
    }
    match spawn_daemon(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("novafs: {e:#}");
            ExitCode::FAILURE
        }
    }
}

// ---- the parent: start the daemon, wait until it is ready ----

fn spawn_daemon(args: &MountArgs) -> Result<ExitCode> {
    // The cheap checks here too, so that they fail before any log exists;
    // the daemon repeats them (things may change in between).
    let opts = parse_options(&args.options)?;
    let mnt = check_mountpoint(&args.mountpoint)?;
    check_fuse_available()?;
    let image = std::path::absolute(&args.image).with_context(|| format!("{}: bad path", args.image.display()))?;
    if let Some(at) = sys::is_root().then(|| mount_point_of(&image)).flatten() {
        return share_mount(&image, &at, &mnt, &opts, args.quiet);
    }
    let state = StatePaths::new(&mnt)?;
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&state.log)
        .with_context(|| format!("cannot open the log file {}", state.log.display()))?;
    let exe = std::env::current_exe().context("cannot find the novafs executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("mount").arg("--daemon");
    for o in &args.options {
        cmd.arg("-o").arg(o);
    }
    cmd.arg("--").arg(&image).arg(&mnt);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .env("NO_COLOR", "1");
    if std::env::var_os("RUST_LOG").is_none() {
        cmd.env("RUST_LOG", "info,fuser=error");
    }
    let mut child = cmd.spawn().context("cannot start the mount daemon")?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        // EOF (an empty line) means the daemon died before reporting.
        let _ = BufReader::new(out).read_line(&mut line);
    }
    let line = line.trim_end();
    if line == "ready" {
        if args.quiet {
            return Ok(ExitCode::SUCCESS);
        }
        println!(
            "novafs: mounted {} on {} (daemon pid {}, log {})",
            image.display(),
            mnt.display(),
            child.id(),
            state.log.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let status = child.wait();
    match line.strip_prefix("error ") {
        Some(msg) => eprintln!("novafs: {msg}"),
        None => eprintln!(
            "novafs: the mount daemon exited ({}) before the mount was ready; see {}",
            status.map_or_else(|e| e.to_string(), |s| s.to_string()),
            state.log.display()
        ),
    }
    Ok(ExitCode::FAILURE)
}

// ---- the daemon (or the foreground process) ----

/// Where readiness goes: the parent's pipe (daemon) or the terminal.
enum Reporter {
    Pipe(io::Stdout),
    Terminal,
}

impl Reporter {
    fn ready(&mut self, image: &Path, mnt: &Path) {
        tracing::info!("mounted {} on {}", image.display(), mnt.display());
        match self {
            Reporter::Pipe(out) => {
                let _ = writeln!(out, "ready").and_then(|()| out.flush());
            }
            Reporter::Terminal => println!(
                "novafs: mounted {} on {}; serving in the foreground (Ctrl-C or `novafs umount {}` unmounts)",
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

fn serve(args: &MountArgs) -> ExitCode {
    let mut reporter = if args.daemon {
        // A daemon of its own: no controlling terminal, no hold on the
        // caller's working directory (our paths are absolute).
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
    let control = control::Server::start(&state.ctl, mounted.fs(), mount_snapshot)
        .inspect_err(|e| tracing::warn!("no control channel ({e}): `novafs scrub` cannot reach this mount"))
        .ok();
    reporter.ready(&image, &mnt);
    let (result, fs) = mounted.serve();
    if let Err(e) = result {
        tracing::error!("FUSE session ended with an error: {e}");
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
    match outcome {
        Ok(()) => {
            state.remove();
            tracing::info!("unmounted {}; image marked clean", mnt.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            let msg = format!("{e:#}").replace('\n', " ");
            tracing::error!("clean unmount failed: {msg}; the next mount will recover");
            state.record_failure(&msg);
            ExitCode::FAILURE
        }
    }
}

/// A daemon that has mounted: what `serve` needs afterwards.
struct Daemon {
    image: PathBuf,
    mnt: PathBuf,
    state: StatePaths,
    mounted: Mounted,
    snapshots: Arc<SnapshotMounts>,
}

/// Read-only mounts of snapshots this daemon serves beside its own
/// (`novafs snapshot mount`), each with a thread of its own, ended by
/// `novafs umount` or with the daemon.
struct SnapshotMounts {
    /// The live mount's configuration, which they follow.
    cfg: MountConfig,
    served: std::sync::Mutex<Vec<(Unmounter, thread::JoinHandle<()>)>>,
}

impl SnapshotMounts {
    fn new(cfg: MountConfig) -> Arc<SnapshotMounts> {
        Arc::new(SnapshotMounts {
            cfg,
            served: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// Mounts a view of snapshot `name` of `fs` read-only at `mnt`.
    fn mount(&self, fs: &Fs, name: &[u8], mnt: &Path) -> Result<()> {
        let mnt = check_mountpoint(mnt)?;
        let shown = String::from_utf8_lossy(name).into_owned();
        let view = fs.open_snapshot(name).map_err(|e| match e {
            novafs::Error::NotFound => anyhow!("there is no snapshot '{shown}'; `novafs snapshot list` shows them"),
            e => anyhow!("snapshot '{shown}': {e}"),
        })?;
        let cfg = MountConfig {
            read_only: true,
            threads: 1,
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
    fn stop(&self) {
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
fn snapshot_fsname(image: &Path, name: &str) -> String {
    fsname(Path::new(&format!("{}@{name}", image.display())))
}

fn snapshot_error(image: &Path, name: &str, e: novafs::Error) -> anyhow::Error {
    match e {
        novafs::Error::NotFound => anyhow!(
            "{} has no snapshot '{name}'; `novafs snapshot list {}` shows them",
            image.display(),
            image.display()
        ),
        e => explain_fs(image, e),
    }
}

impl Daemon {
    /// Every check, then the image, then the kernel mount. Errors before
    /// the image is opened leave it untouched.
    fn start(args: &MountArgs) -> Result<Daemon> {
        let opts = parse_options(&args.options)?;
        let mnt = check_mountpoint(&args.mountpoint)?;
        check_fuse_available()?;
        let state = StatePaths::new(&mnt)?;
        let image = fs::canonicalize(&args.image).map_err(|e| image_error(&args.image, e))?;
        tracing::info!(
            "novafs {} daemon pid {}: mounting {} on {} ({} threads{}{}{})",
            env!("CARGO_PKG_VERSION"),
            std::process::id(),
            image.display(),
            mnt.display(),
            opts.threads,
            if opts.read_only { ", ro" } else { "" },
            if opts.allow_other { ", allow_other" } else { "" },
            if opts.eadr { ", eadr" } else { "" },
        );
        state
            .write(&image, &mnt)
            .with_context(|| format!("cannot write {}", state.pid.display()))?;
        let map = MapOptions {
            eadr: opts.eadr,
            populate: true,
            lock: true,
            protect: opts.protect,
        };
        let opened = open_when_released(&image, &map)
            .map_err(|e| explain(&image, e))
            .and_then(|region| {
                tracing::info!(protection = %region.protection(), "write protection");
                let mount_opts = MountOptions {
                    read_only: opts.read_only,
                    meta_replicas: opts.meta_replicas,
                    atime: opts.atime,
                    no_dir_atime: opts.no_dir_atime,
                };
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
                state.remove();
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
        };
        match Mounted::mount(fs, &mnt, &cfg) {
            Ok(mounted) => Ok(Daemon {
                image,
                mnt,
                state,
                mounted,
                snapshots: SnapshotMounts::new(cfg),
            }),
            Err(failed) => {
                let MountError { error, fs } = *failed;
                state.remove();
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
fn fsname(image: &Path) -> String {
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

fn mount_error(mnt: &Path, e: &io::Error, allow_other: bool) -> anyhow::Error {
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

/// The mount point must exist, be a directory and not be a mount point
/// already (Linux would happily stack a second mount on top).
fn check_mountpoint(path: &Path) -> Result<PathBuf> {
    let p = path.display();
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            bail!("mount point {p} does not exist; create it with `mkdir -p {p}`")
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            bail!("{p} is a FUSE mount whose daemon has died; run `novafs umount {p}` first")
        }
        Err(e) => bail!("mount point {p}: {e}"),
    };
    if !meta.is_dir() {
        bail!("mount point {p} is not a directory; give an empty directory");
    }
    let canon = fs::canonicalize(path).with_context(|| format!("mount point {p}"))?;
    if let Some(m) = find_mount(&canon)? {
        bail!(
            "{} is already a mount point ({} from {}); unmount it first or choose another directory",
            canon.display(),
            m.fstype,
            m.source
        );
    }
    Ok(canon)
}

fn check_fuse_available() -> Result<()> {
    if !Path::new("/dev/fuse").exists() {
        bail!("/dev/fuse is missing: load the fuse kernel module (`modprobe fuse`) or use a system with FUSE");
    }
    if sys::is_root() {
        return Ok(());
    }
    if !in_path("fusermount3") {
        bail!("mounting without root needs fusermount3: install the fuse3 package, or run as root");
    }
    // fuser opens /dev/fuse itself before it turns to fusermount3.
    if let Err(e) = OpenOptions::new().read(true).write(true).open("/dev/fuse") {
        bail!("/dev/fuse: {e}; mount as root, or let users open it (mode 0666, as the fuse3 package sets it)");
    }
    Ok(())
}

fn in_path(prog: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths)
            .any(|dir| fs::metadata(dir.join(prog)).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
    })
}

/// First signal: unmount the kernel mount, which ends the session and
/// leads to the clean unmount. If files are still open there, detach it
/// instead and finish when the last one is closed. Second signal: exit now
/// (a crash: the image is consistent and the next mount recovers).
fn on_signals(signals: &sys::SignalSet, mut unmounter: Unmounter, mnt: &Path) {
    let mut seen = 0;
    loop {
        let sig = match signals.wait() {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("sigwait: {e}");
                return;
            }
        };
        seen += 1;
        if seen > 1 {
            tracing::warn!("signal {sig} again: exiting without a clean unmount; the next mount recovers");
            std::process::exit(1);
        }
        tracing::info!("signal {sig}: unmounting {}", mnt.display());
        match unmounter.unmount() {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                tracing::warn!(
                    "{} is busy: detaching it; the daemon finishes when the last open file there is closed",
                    mnt.display()
                );
                if let Err(e) = kernel_unmount(mnt, true) {
                    tracing::error!("cannot detach {}: {e}", mnt.display());
                }
            }
            Err(e) => tracing::error!("cannot unmount {}: {e}", mnt.display()),
        }
    }
}

/// Unmounts the kernel side: umount2(2) as root, else fusermount3 -u.
/// `lazy` detaches a busy mount (MNT_DETACH, fusermount3 -z).
fn kernel_unmount(mnt: &Path, lazy: bool) -> io::Result<()> {
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

// ---- novafs umount ----

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
    // A clean daemon removes its state file; a failed one says why.
    let Some(left) = state.read() else {
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

// ---- /proc/self/mountinfo ----

struct MountEntry {
    fstype: String,
    source: String,
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

/// A mount point where `image` is mounted, if any.
fn mount_point_of(image: &Path) -> Option<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = fs::canonicalize(image).ok()?.to_string_lossy().into_owned();
    info.lines()
        .filter_map(parse_mountinfo_line)
        .find(|(_, entry)| entry.source == want && entry.fstype.starts_with("fuse"))
        .map(|(point, _)| PathBuf::from(std::ffi::OsString::from_vec(point)))
}

/// Mounts an image that is mounted already (at `at`) a second time at
/// `mnt`, as a kernel file system shares one superblock between two
/// mounts of a device: a bind mount served by the same daemon, with the
/// read-only and VFS flags asked for. Options that belong to the daemon
/// (threads, protection, snapshots...) cannot differ, and are refused.
fn share_mount(image: &Path, at: &Path, mnt: &Path, opts: &Options, quiet: bool) -> Result<ExitCode> {
    let fresh = parse_options(&[])?;
    let flags_only = Options {
        read_only: fresh.read_only,
        allow_other: fresh.allow_other,
        devices: fresh.devices,
        setuid: fresh.setuid,
        exec: fresh.exec,
        atime: fresh.atime,
        no_dir_atime: fresh.no_dir_atime,
        ..opts.clone()
    };
    if flags_only != fresh {
        bail!(
            "{} is mounted already at {}: a second mount shares its daemon and takes only ro, rw, dev, nodev, suid, nosuid, exec, noexec and the access-time options",
            image.display(),
            at.display()
        );
    }
    let mut flags = 0;
    for (wanted, flag) in [
        (opts.read_only, libc::MS_RDONLY),
        (!opts.devices, libc::MS_NODEV),
        (!opts.setuid, libc::MS_NOSUID),
        (!opts.exec, libc::MS_NOEXEC),
        (opts.no_dir_atime, libc::MS_NODIRATIME),
    ] {
        if wanted {
            flags |= flag;
        }
    }
    flags |= match opts.atime {
        Atime::Never => libc::MS_NOATIME,
        Atime::Relative => libc::MS_RELATIME,
        Atime::Strict => libc::MS_STRICTATIME,
    };
    sys::bind(at, mnt, flags)
        .with_context(|| format!("cannot mount {} again at {}", image.display(), mnt.display()))?;
    if !quiet {
        println!(
            "novafs: mounted {} on {} too (shared with its mount at {})",
            image.display(),
            mnt.display(),
            at.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether some mount has `image` as its source.
fn image_is_mounted(image: &Path) -> bool {
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return true;
    };
    let want = image.to_string_lossy();
    info.lines()
        .filter_map(parse_mountinfo_line)
        .any(|(_, entry)| entry.source == want)
}

/// The mount whose mount point is exactly `path` (the last one, if
/// several are stacked).
fn find_mount(path: &Path) -> Result<Option<MountEntry>> {
    let info = fs::read_to_string("/proc/self/mountinfo").context("cannot read /proc/self/mountinfo")?;
    let want = path.as_os_str().as_bytes();
    Ok(info.lines().filter_map(parse_mountinfo_line).fold(
        None,
        |found, (point, entry)| {
            if point == want {
                Some(entry)
            } else {
                found
            }
        },
    ))
}

/// Field 5 is the mount point; after the " - " separator come the type
/// and the source. Paths escape space, tab, newline and backslash as \ooo.
fn parse_mountinfo_line(line: &str) -> Option<(Vec<u8>, MountEntry)> {
    let (left, right) = line.split_once(" - ")?;
    let point = unescape(left.split(' ').nth(4)?);
    let mut r = right.split(' ');
    let fstype = r.next()?.to_string();
    let source = String::from_utf8_lossy(&unescape(r.next().unwrap_or(""))).into_owned();
    Some((point, MountEntry { fstype, source }))
}

fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push(d.iter().fold(0u8, |v, c| v.wrapping_mul(8) + (c - b'0')));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

// ---- the state file: which daemon serves a mount point ----

/// The files of one mount point in the state directory.
struct StatePaths {
    pid: PathBuf,
    log: PathBuf,
    /// The daemon's control channel (`control`).
    ctl: PathBuf,
}

/// What a state file says.
struct DaemonState {
    pid: u32,
    start: u64,
    image: String,
    failed: Option<String>,
}

impl DaemonState {
    /// True while the recorded process runs (same start time: not a
    /// recycled pid) and is not a zombie.
    fn alive(&self) -> bool {
        sys::process_start(self.pid).is_some_and(|(state, start)| start == self.start && state != 'Z' && state != 'X')
    }
}

/// `$NOVAFS_RUN_DIR`, else /run/novafs for root, else
/// `$XDG_RUNTIME_DIR/novafs`, else /tmp/novafs-UID; created private.
fn state_dir() -> Result<PathBuf> {
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
    fn new(mnt: &Path) -> Result<StatePaths> {
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
        })
    }

    fn write(&self, image: &Path, mnt: &Path) -> io::Result<()> {
        let pid = std::process::id();
        let start = sys::process_start(pid).map_or(0, |(_, s)| s);
        let text = format!(
            "pid={pid}\nstart={start}\nimage={}\nmountpoint={}\nlog={}\n",
            image.display(),
            mnt.display(),
            self.log.display()
        );
        let tmp = self.pid.with_extension("pid.tmp");
        fs::write(&tmp, text)?;
        fs::rename(&tmp, &self.pid)
    }

    fn read(&self) -> Option<DaemonState> {
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
            failed: field("failed"),
        })
    }

    fn record_failure(&self, msg: &str) {
        let appended = OpenOptions::new()
            .append(true)
            .open(&self.pid)
            .and_then(|mut f| writeln!(f, "failed={msg}"));
        if let Err(e) = appended {
            tracing::warn!("cannot record the failure in {}: {e}", self.pid.display());
        }
    }

    fn remove(&self) {
        let _ = fs::remove_file(&self.pid);
    }
}

/// The few system calls std does not wrap, through nix's safe wrappers
/// (unsafe code stays in the pm crate).
mod sys {
    use std::io;
    use std::path::Path;

    use nix::mount::{mount, umount2, MntFlags, MsFlags};
    use nix::sys::signal::{SigSet, Signal};

    pub fn euid() -> u32 {
        nix::unistd::geteuid().as_raw()
    }

    pub fn is_root() -> bool {
        euid() == 0
    }

    pub fn setsid() {
        // Failure (already a group leader) leaves us in our session: harmless.
        let _ = nix::unistd::setsid();
    }

    /// The MS_* flags of the mount at `target` (from statvfs).
    pub fn mount_flags(target: &Path) -> io::Result<libc::c_ulong> {
        use nix::sys::statvfs::{statvfs, FsFlags};
        let f = statvfs(target).map_err(io::Error::from)?.flags();
        let map = [
            (FsFlags::ST_RDONLY, libc::MS_RDONLY),
            (FsFlags::ST_NOSUID, libc::MS_NOSUID),
            (FsFlags::ST_NODEV, libc::MS_NODEV),
            (FsFlags::ST_NOEXEC, libc::MS_NOEXEC),
            (FsFlags::ST_NOATIME, libc::MS_NOATIME),
            (FsFlags::ST_NODIRATIME, libc::MS_NODIRATIME),
            (FsFlags::ST_RELATIME, libc::MS_RELATIME),
        ];
        Ok(map
            .iter()
            .filter(|(st, _)| f.contains(*st))
            .fold(0, |acc, (_, ms)| acc | ms))
    }

    /// Bind-mounts `from` at `to`, then gives the new mount `flags`.
    pub fn bind(from: &Path, to: &Path, flags: libc::c_ulong) -> io::Result<()> {
        mount(Some(from), to, None::<&str>, MsFlags::MS_BIND, None::<&str>).map_err(io::Error::from)?;
        let again = MsFlags::from_bits_truncate(flags | libc::MS_BIND | libc::MS_REMOUNT);
        mount(None::<&str>, to, None::<&str>, again, None::<&str>).map_err(io::Error::from)
    }

    /// mount(2) with MS_REMOUNT and `flags` on `target`.
    pub fn remount(target: &Path, flags: libc::c_ulong) -> io::Result<()> {
        let flags = MsFlags::from_bits_truncate(flags | libc::MS_REMOUNT);
        mount(None::<&str>, target, None::<&str>, flags, None::<&str>).map_err(io::Error::from)
    }

    pub fn umount(mnt: &Path, lazy: bool) -> io::Result<()> {
        let flags = MntFlags::UMOUNT_NOFOLLOW | if lazy { MntFlags::MNT_DETACH } else { MntFlags::empty() };
        umount2(mnt, flags).map_err(io::Error::from)
    }

    /// SIGTERM, SIGINT and SIGHUP, blocked so only `wait` receives them.
    pub struct SignalSet(SigSet);

    pub fn block_termination_signals() -> io::Result<SignalSet> {
        let mut set = SigSet::empty();
        for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
            set.add(sig);
        }
        set.thread_block().map_err(io::Error::from)?;
        Ok(SignalSet(set))
    }

    impl SignalSet {
        /// Waits for one of the signals; returns its number.
        pub fn wait(&self) -> io::Result<i32> {
            self.0.wait().map(|s| s as i32).map_err(io::Error::from)
        }
    }

    /// State letter and start time (clock ticks since boot) of a process,
    /// from /proc/PID/stat; None when there is no such process.
    pub fn process_start(pid: u32) -> Option<(char, u64)> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name (field 2) may contain spaces: parse after it.
        let rest = stat.get(stat.rfind(')')? + 1..)?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let state = fields.first()?.chars().next()?;
        let start = fields.get(19)?.parse().ok()?;
        Some((state, start))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_and_reject_unknown_ones() {
        let o = parse_options(&["ro,threads=3".into(), "allow_other".into()]).expect("valid");
        assert!(o.read_only && o.allow_other && !o.eadr);
        assert!(!o.devices && !o.setuid && o.exec, "safe defaults: nodev, nosuid, exec");
        assert_eq!(o.threads, 3);
        let o = parse_options(&["noexec,exec,noexec".into()]).expect("valid");
        assert!(!o.exec, "the last one wins");
        if nix::unistd::geteuid().is_root() {
            let o = parse_options(&["dev,suid".into()]).expect("root may");
            assert!(o.devices && o.setuid);
        } else {
            let e = parse_options(&["suid".into()]).expect_err("root only");
            assert!(e.to_string().contains("suid needs root"), "{e}");
        }
        assert!(parse_options(&["threads=0".into()]).is_err());
        let e = parse_options(&["data=journal".into()]).expect_err("unknown");
        assert!(e.to_string().contains("unknown mount option 'data=journal'"));
        // fstab's and mount(8)'s own, and what strict mode already gives.
        let o = parse_options(&["defaults,nofail,x-systemd.automount,sync,noatime".into()]).expect("accepted");
        assert!(!o.read_only);
        assert_eq!(o.atime, Atime::Never);
        let o = parse_options(&[String::new()]).expect("none");
        assert_eq!(
            (o.atime, o.no_dir_atime),
            (Atime::Relative, false),
            "relatime by default, as Linux"
        );
        let o = parse_options(&["strictatime,lazytime,nodiratime".into()]).expect("accepted");
        assert_eq!((o.atime, o.no_dir_atime), (Atime::Strict, true));
        assert_eq!(o.protect, WriteProtect::Auto);
        let o = parse_options(&["protect=mprotect".into()]).expect("valid");
        assert_eq!(o.protect, WriteProtect::Mprotect);
        let e = parse_options(&["protect=yes".into()]).expect_err("bad mode");
        assert!(e.to_string().contains("use off, auto, pkey or mprotect"), "{e}");
        assert_eq!(o.meta_replicas, MetaReplicas::AsFormatted);
        let o = parse_options(&["meta_protection=off".into()]).expect("valid");
        assert_eq!(o.meta_replicas, MetaReplicas::Skipped);
        let o = parse_options(&["meta_protection=on".into()]).expect("valid");
        assert_eq!(o.meta_replicas, MetaReplicas::Required);
        let e = parse_options(&["meta_protection=maybe".into()]).expect_err("bad value");
        assert!(
            e.to_string().contains("use meta_protection=on or meta_protection=off"),
            "{e}"
        );
    }

    #[test]
    fn mountinfo_lines_unescape_mount_points() {
        let line = "36 35 0:40 / /tmp/a\\040b rw,relatime shared:1 - fuse /img\\054x rw,user_id=0";
        let (point, m) = parse_mountinfo_line(line).expect("parses");
        assert_eq!(point, b"/tmp/a b");
        assert_eq!(m.fstype, "fuse");
        assert_eq!(m.source, "/img,x");
    }

    #[test]
    fn own_process_is_alive_and_has_a_start_time() {
        let (state, start) = sys::process_start(std::process::id()).expect("self");
        assert!(state != 'Z' && start > 0);
    }
}
