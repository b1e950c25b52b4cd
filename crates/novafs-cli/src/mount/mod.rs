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
//!
//! One job per file: `options` (`-o`), `helper` (mount(8)'s helper and
//! remount), `spawn` (the parent), `daemon` (serving), `snapshots`
//! (snapshot mounts beside the live one), `signals`, `umount`, `checks`
//! (before the image is touched), `mountinfo`, `state` (the state files),
//! `unused` (`-o until_unused`: a mount that ends with its last user)
//! and `sys` (the system calls std lacks).

use std::path::PathBuf;
use std::process::ExitCode;

mod checks;
mod daemon;
mod helper;
mod mountinfo;
mod options;
mod signals;
mod snapshots;
mod spawn;
mod state;
mod sys;
mod umount;
mod unused;

pub use helper::{helper_call, remount, HelperCall};
pub(crate) use mountinfo::mount_point_of;
pub(crate) use state::state_dir;
pub use umount::{control_socket, umount};

#[derive(clap::Args)]
pub struct MountArgs {
    /// Serve in the foreground, logging to stderr, instead of from a
    /// background daemon.
    #[arg(long)]
    foreground: bool,
    /// Comma-separated mount options (--help lists them all).
    ///
    /// ro, rw; snapshot=NAME (serve that snapshot, read-only).
    ///
    /// allow_other; dev, nodev, suid, nosuid (dev and suid from root only;
    /// default nodev,nosuid); exec, noexec.
    ///
    /// Access times, as Linux: relatime (the default; atime is the same),
    /// noatime, strictatime, nodiratime, diratime; lazytime and nolazytime
    /// are accepted (every update is durable at once).
    ///
    /// sync, dirsync and async are accepted: every operation is durable
    /// when it returns.
    ///
    /// writeback_cache (the kernel caches written pages and sends them
    /// later: a write is durable once fsync, fdatasync or a close of the
    /// file returns, no longer when write returns; other operations stay
    /// durable at return; refused with sync; README, "Writeback cache").
    ///
    /// transport=auto|dev (auto, the default: FUSE over io_uring when the
    /// kernel offers it, which root turns on with `echo Y >
    /// /sys/module/fuse/parameters/enable_uring`; dev: always /dev/fuse);
    /// queue_depth=N (requests in flight per io_uring queue, default 16);
    /// stats (time every request: `novafs stats MOUNTPOINT`); open_checks
    /// (send every open to novafs, so that chattr's immutable and
    /// append-only flags refuse the open itself as on ext4, not the first
    /// write; one request per open).
    ///
    /// threads=N (/dev/fuse workers; default: one per CPU); eadr (the platform's caches are
    /// persistent); nvmm=dram|stt|pcm (emulate a slower NVMM's writes,
    /// NOVA's Table 1: stt, a 200 ns persist barrier; pcm, 500 ns and 1/8
    /// of DRAM's write bandwidth; or nvmm=NS:DIVISOR, any barrier and
    /// bandwidth divisor; reads stay at DRAM speed; default dram); prefault=first_use|background|now (when the image's
    /// page tables are built: by each page's first access, the default; by
    /// a low-priority thread behind the mount; or before the mount
    /// returns, which then takes time in proportion to the image); protect=off|auto|pkey|mprotect (keep the image
    /// read-only outside novafs' own stores; default auto: memory
    /// protection keys where the CPU has them); meta_protection=on|off
    /// (require the metadata replicas, or skip writing them on this mount:
    /// faster, and the next protected mount rewrites them; default: as the
    /// image was made); mode=strict|relaxed (the consistency mode:
    /// strict, every write atomic; relaxed, NOVA-Fortis §4.6, file data
    /// overwritten in place, metadata still atomic; default: the image's,
    /// `novafs mkfs --mode`, `novafs tune --mode`); batch, batch=WORDS and
    /// commit=SECS (relaxed mode only: in-place metadata changes wait in a
    /// running transaction of WORDS words, default 1024, committed when
    /// full, every SECS seconds, default 5, and at fsync: a crash may
    /// lose those of the last interval, FGM §III-C1).
    ///
    /// inode_names (`.novafs-ino.<N>` in the root opens inode N, for a
    /// process that reopens files by inode number; such names are reserved
    /// there: never listed, never made, renamed or removed, EPERM);
    /// until_unused=PATH (an absolute path to a lock file every process
    /// using the mount holds flock(LOCK_SH) on: once the last has let go
    /// the daemon unmounts itself, retrying while the mount is busy, and
    /// removes PATH, the mount point and PATH's directory if empty). Both
    /// serve `novafs exec`.
    ///
    /// What /etc/fstab and mount(8) pass along is accepted and left to
    /// them: defaults, auto, noauto, nofail, _netdev, user, users, owner,
    /// group, x-*, comment=*.
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

pub fn run(args: &MountArgs) -> ExitCode {
    if args.foreground || args.daemon {
        return daemon::serve(args);
    }
    match spawn::spawn_daemon(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("novafs: {e:#}");
            ExitCode::FAILURE
        }
    }
}
