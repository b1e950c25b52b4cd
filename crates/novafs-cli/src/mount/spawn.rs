//! The parent: checks what it can, starts the daemon and waits until it
//! is ready; or shares the mount of an image that is mounted already.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

use anyhow::{bail, Context, Result};
use novafs::Atime;

use super::checks::{check_fuse_available, check_mountpoint};
use super::mountinfo::mount_point_of;
use super::options::{parse_options, Options};
use super::state::StatePaths;
use super::{sys, MountArgs};

pub(super) fn spawn_daemon(args: &MountArgs) -> Result<ExitCode> {
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
    if let Some(transport) = line.strip_prefix("ready ") {
        if args.quiet {
            return Ok(ExitCode::SUCCESS);
        }
        println!(
            "novafs: mounted {} on {} ({transport}; daemon pid {}, log {})",
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

/// Mounts an image that is mounted already (at `at`) a second time at
/// `mnt`, as a kernel file system shares one superblock between two
/// mounts of a device: a bind mount served by the same daemon, with the
/// read-only and VFS flags asked for. Options that belong to the daemon
/// (threads, protection, snapshots...) cannot differ from those it was
/// started with (its state file keeps them), and are refused.
fn share_mount(image: &Path, at: &Path, mnt: &Path, opts: &Options, quiet: bool) -> Result<ExitCode> {
    let fresh = parse_options(&[])?;
    // An option's daemon part: the flags a bind mount sets left out.
    let daemon_part = |o: &Options| Options {
        read_only: fresh.read_only,
        allow_other: fresh.allow_other,
        devices: fresh.devices,
        setuid: fresh.setuid,
        exec: fresh.exec,
        atime: fresh.atime,
        no_dir_atime: fresh.no_dir_atime,
        ..o.clone()
    };
    let running = StatePaths::running_options(at)
        .and_then(|o| parse_options(&[o]).ok())
        .unwrap_or_else(|| fresh.clone());
    if daemon_part(opts) != daemon_part(&running) {
        bail!(
            "{} is mounted already at {}: a second mount shares its daemon, so only ro, rw, dev, nodev, suid, nosuid, exec, noexec and the access-time options may differ from the first mount's",
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
