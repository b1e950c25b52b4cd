//! `-o` options: what `novafs mount` (and mount(8) through its helper) takes.

use std::path::PathBuf;
use std::thread;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use novafs::{Atime, Batching, Consistency, MetaReplicas};
use pm::{Nvmm, Prefault, WriteProtect};

/// Parsed `-o` options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Options {
    pub(super) read_only: bool,
    pub(super) allow_other: bool,
    pub(super) devices: bool,
    pub(super) setuid: bool,
    pub(super) exec: bool,
    pub(super) threads: usize,
    /// Serve through FUSE over io_uring when the kernel offers it
    /// (`transport=auto`, the default) or always through /dev/fuse.
    pub(super) uring: bool,
    pub(super) queue_depth: usize,
    /// Time every request by operation (`novafs stats MOUNTPOINT`).
    pub(super) stats: bool,
    /// Send every open to novafs, so that chattr's immutable and
    /// append-only flags refuse the open itself (as on ext4) rather than
    /// the first write, at one request per open.
    pub(super) open_checks: bool,
    pub(super) eadr: bool,
    /// Emulate a slower NVMM's writes (pm's nvmm module), as `novafs
    /// bench --nvmm`.
    pub(super) nvmm: Nvmm,
    /// When the image's page tables are built: on each page's first use
    /// (the default; see pm's `prefault` module for the measurements),
    /// behind the mount, or before the mount returns.
    pub(super) prefault: Prefault,
    pub(super) protect: WriteProtect,
    pub(super) meta_replicas: MetaReplicas,
    /// The consistency mode (NOVA-Fortis §4.6); None: the image's default.
    pub(super) consistency: Option<Consistency>,
    /// Relaxed mode only: batch in-place metadata changes (FGM §III-C1).
    pub(super) batch: Option<Batching>,
    pub(super) atime: Atime,
    pub(super) no_dir_atime: bool,
    /// Serve this snapshot of the image, read-only, instead of its live
    /// state (`novafs snapshot mount IMAGE NAME DIR`).
    pub(super) snapshot: Option<String>,
    /// `.novafs-ino.<N>` in the root names inode N (novafs-fuse's
    /// `inode_names`): how a process reopens a file by inode number.
    pub(super) inode_names: bool,
    /// A lock file every process using the mount holds shared: the
    /// daemon unmounts itself once it can lock it exclusively (`unused`).
    pub(super) until_unused: Option<PathBuf>,
    /// The kernel's writeback cache (`writeback_cache`): writes durable at
    /// fsync or close, not when they return (README, "Writeback cache").
    pub(super) writeback_cache: bool,
}

/// Every option `parse_options` takes (`novafs mount --help` describes each).
const KNOWN_OPTIONS: &str = "ro, rw, snapshot=NAME, allow_other, dev, nodev, suid, nosuid, exec, noexec, \
     relatime, atime, noatime, strictatime, nodiratime, diratime, lazytime, nolazytime, sync, dirsync, async, \
     threads=N, transport=auto|dev, queue_depth=N, stats, open_checks, eadr, nvmm=dram|stt|pcm, prefault=first_use|background|now, protect=off|auto|pkey|mprotect, meta_protection=on|off, \
     mode=strict|relaxed, batch, batch=WORDS, commit=SECS, inode_names, until_unused=PATH, writeback_cache (and fstab's defaults, auto, noauto, nofail, _netdev, user, users, owner, group, x-*, comment=*)";

pub(super) fn parse_options(list: &[String]) -> Result<Options> {
    let mut o = Options {
        read_only: false,
        allow_other: false,
        devices: false,
        setuid: false,
        exec: true,
        threads: thread::available_parallelism().map_or(1, |n| n.get()),
        uring: true,
        queue_depth: DEFAULT_QUEUE_DEPTH,
        stats: false,
        open_checks: false,
        eadr: false,
        nvmm: Nvmm::DRAM,
        prefault: Prefault::OnFirstUse,
        protect: WriteProtect::default(),
        meta_replicas: MetaReplicas::AsFormatted,
        consistency: None,
        batch: None,
        atime: Atime::Relative,
        no_dir_atime: false,
        snapshot: None,
        inode_names: false,
        until_unused: None,
        writeback_cache: false,
    };
    // Asked for: every write durable at return (strict mode gives it).
    let mut sync = false;
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
            _ if opt.starts_with("nvmm=") => o.nvmm = opt["nvmm=".len()..].parse().map_err(|e| anyhow!("nvmm: {e}"))?,
            "transport=auto" => o.uring = true,
            "transport=dev" => o.uring = false,
            _ if opt.starts_with("transport=") => bail!("{opt}: use transport=auto or transport=dev"),
            "prefault=background" => o.prefault = Prefault::Background,
            "prefault=first_use" => o.prefault = Prefault::OnFirstUse,
            "prefault=now" => o.prefault = Prefault::Now,
            _ if opt.starts_with("prefault=") => bail!("{opt}: use prefault=background, first_use or now"),
            "stats" => o.stats = true,
            "open_checks" => o.open_checks = true,
            "inode_names" => o.inode_names = true,
            "writeback_cache" => o.writeback_cache = true,
            // The daemon works from /: a relative path would name another file.
            _ if opt.starts_with("until_unused=/") => {
                o.until_unused = Some(PathBuf::from(&opt["until_unused=".len()..]))
            }
            _ if opt.starts_with("until_unused=") => bail!("{opt}: until_unused takes an absolute path"),
            // What /etc/fstab and mount(8) pass along that is theirs, not
            // the file system's.
            "defaults" | "auto" | "noauto" | "nofail" | "_netdev" | "user" | "users" | "owner" | "group" => {}
            _ if opt.starts_with("x-") || opt.starts_with("comment=") => {}
            // Every operation is durable when it returns (strict mode):
            // as synchronous as sync and dirsync ask, which async allows.
            "sync" => sync = true,
            "dirsync" | "async" => {}
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
            _ if opt.starts_with("mode=") => {
                let mode = opt["mode=".len()..].parse().map_err(|e| anyhow!("{opt}: {e}"))?;
                o.consistency = Some(mode);
            }
            "batch" => o.batch = Some(o.batch.unwrap_or_default()),
            _ if opt.starts_with("batch=") => {
                let words = opt["batch=".len()..]
                    .parse::<usize>()
                    .ok()
                    .filter(|&w| w > 0)
                    .ok_or_else(|| anyhow!("{opt}: batch= takes a number of words, at least 1"))?;
                o.batch = Some(Batching {
                    words,
                    ..o.batch.unwrap_or_default()
                });
            }
            _ if opt.starts_with("commit=") => {
                let secs = opt["commit=".len()..]
                    .parse::<f64>()
                    .ok()
                    .filter(|s| *s > 0.0 && s.is_finite())
                    .ok_or_else(|| anyhow!("{opt}: commit= takes a number of seconds above 0"))?;
                o.batch = Some(Batching {
                    interval: Duration::from_secs_f64(secs),
                    ..o.batch.unwrap_or_default()
                });
            }
            _ if opt.starts_with("snapshot=") => {
                o.snapshot = Some(opt["snapshot=".len()..].to_string());
                o.read_only = true;
            }
            _ if opt.starts_with("protect=") => {
                o.protect = opt["protect=".len()..].parse().map_err(|e: String| anyhow!(e))?;
            }
            _ if opt.starts_with("threads=") => o.threads = count(opt)?,
            _ if opt.starts_with("queue_depth=") => o.queue_depth = count(opt)?,
            _ => bail!("unknown mount option '{opt}'; known options: {KNOWN_OPTIONS}"),
        }
    }
    if sync && o.writeback_cache {
        bail!("writeback_cache delays writes until fsync or close, which sync forbids; drop one of them");
    }
    Ok(o)
}

/// Requests in flight per io_uring queue: enough for the threads of one
/// CPU to wait on the file system at once.
const DEFAULT_QUEUE_DEPTH: usize = 16;

/// The N of a `KEY=N` option: 1 to 1024.
fn count(opt: &str) -> Result<usize> {
    let (key, n) = opt.split_once('=').unwrap_or((opt, ""));
    n.parse()
        .ok()
        .filter(|n| (1..=1024).contains(n))
        .ok_or_else(|| anyhow!("{key}={n} is not a count; use 1 to 1024"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every option the refusal of an unknown one (and so `--help`) lists
    /// is one the parser takes, with each value it names.
    #[test]
    fn every_listed_option_parses() {
        let list = KNOWN_OPTIONS.replace(" (and fstab's ", ", ").replace(')', "");
        for listed in list.split(", ") {
            let spellings: Vec<String> = match listed.split_once('=') {
                Some((key, "NAME" | "*")) => vec![format!("{key}=x")],
                Some((key, "PATH")) => vec![format!("{key}=/x")],
                Some((key, "N" | "WORDS" | "SECS")) => vec![format!("{key}=2")],
                Some((key, values)) => values.split('|').map(|v| format!("{key}={v}")).collect(),
                None => vec![listed.replace('*', "test")],
            };
            for opt in spellings {
                if matches!(opt.as_str(), "dev" | "suid") && !nix::unistd::geteuid().is_root() {
                    continue;
                }
                parse_options(std::slice::from_ref(&opt)).unwrap_or_else(|e| panic!("{opt}: {e}"));
            }
        }
    }

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
        assert_eq!(o.nvmm, Nvmm::DRAM);
        let o = parse_options(&["nvmm=pcm".into()]).expect("valid");
        assert_eq!(o.nvmm, Nvmm::PCM);
        let o = parse_options(&["nvmm=0:8".into()]).expect("valid");
        assert_eq!(o.nvmm.to_string(), "0:8");
        let e = parse_options(&["nvmm=fast".into()]).expect_err("bad model");
        assert!(e.to_string().contains("use dram, stt, pcm or NS:DIVISOR"), "{e}");
        let e = parse_options(&["data=journal".into()]).expect_err("unknown");
        assert!(e.to_string().contains("unknown mount option 'data=journal'"));
        // The block-granular journal is the benchmark's alone.
        assert!(parse_options(&["bench_block_journal".into()]).is_err());
        // fstab's and mount(8)'s own, and what strict mode already gives.
        let o = parse_options(&["defaults,nofail,x-systemd.automount,sync,noatime".into()]).expect("accepted");
        assert!(!o.read_only);
        assert_eq!(o.atime, Atime::Never);
        let o = parse_options(&["inode_names,until_unused=/run/x/lock".into()]).expect("valid");
        assert!(o.inode_names);
        assert_eq!(o.until_unused.as_deref(), Some(std::path::Path::new("/run/x/lock")));
        let e = parse_options(&["until_unused=lock".into()]).expect_err("relative");
        assert!(e.to_string().contains("until_unused takes an absolute path"), "{e}");
        let o = parse_options(&[String::new()]).expect("none");
        assert!(!o.inode_names && o.until_unused.is_none(), "both off by default");
        assert!(!o.writeback_cache, "writes durable at return by default");
        let o = parse_options(&["writeback_cache,dirsync".into()]).expect("valid");
        assert!(o.writeback_cache);
        let e = parse_options(&["sync,writeback_cache".into()]).expect_err("contradicts");
        assert!(e.to_string().contains("which sync forbids"), "{e}");
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
    fn the_consistency_mode_is_the_images_unless_named() {
        assert_eq!(parse_options(&[String::new()]).expect("none").consistency, None);
        let o = parse_options(&["mode=relaxed".into()]).expect("valid");
        assert_eq!(o.consistency, Some(Consistency::Relaxed));
        let o = parse_options(&["mode=relaxed,ro,mode=strict".into()]).expect("valid");
        assert_eq!(o.consistency, Some(Consistency::Strict), "the last one wins");
        for bad in ["mode=bogus", "mode=", "mode=Relaxed"] {
            let e = parse_options(&[bad.into()]).expect_err("bad mode");
            let word = &bad["mode=".len()..];
            assert_eq!(
                e.to_string(),
                format!("{bad}: unknown consistency mode '{word}': use strict or relaxed")
            );
        }
    }

    #[test]
    fn batching_takes_its_size_and_timer_and_refuses_nonsense() {
        assert_eq!(parse_options(&[String::new()]).expect("none").batch, None);
        let o = parse_options(&["mode=relaxed,batch".into()]).expect("valid");
        assert_eq!(o.batch, Some(Batching::default()));
        let o = parse_options(&["batch=64,commit=0.5".into()]).expect("valid");
        assert_eq!(
            o.batch,
            Some(Batching {
                words: 64,
                interval: Duration::from_millis(500)
            })
        );
        let o = parse_options(&["commit=2".into()]).expect("valid");
        assert_eq!(
            o.batch.map(|b| (b.words, b.interval)),
            Some((1024, Duration::from_secs(2)))
        );
        for (bad, says) in [
            ("batch=0", "batch= takes a number of words, at least 1"),
            ("batch=x", "batch= takes a number of words, at least 1"),
            ("commit=0", "commit= takes a number of seconds above 0"),
            ("commit=-1", "commit= takes a number of seconds above 0"),
        ] {
            let e = parse_options(&[bad.into()]).expect_err("bad");
            assert_eq!(e.to_string(), format!("{bad}: {says}"));
        }
    }
}
