//! mount(8)'s helper: `/sbin/mount.novafs` and `/sbin/mount.fuse.novafs`
//! calls, and `mount -o remount`.

use std::ffi::OsString;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};

use super::state::StatePaths;
use super::sys;

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
    // What the daemon serving it was started with may be named again
    // unchanged (mount(8) passes fstab's options along on a remount).
    let running = StatePaths::running_options(target).unwrap_or_default();
    let unchanged = |o: &str| running.split(',').any(|r| r == o);
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
            _ if unchanged(o) => continue,
            _ => bail!("{o} cannot change on a remount of {t}; unmount and mount again with it"),
        };
        flags = (flags | set) & !clear;
    }
    sys::remount(target, flags).with_context(|| format!("cannot remount {t}"))
}
