//! A full image through the mount: writers fill it while snapshots are
//! taken and deleted on a timer through the daemon's control channel.
//! Nothing may hang (a watchdog kills the daemon and fails the test when
//! a call takes over a minute), and the full image must empty: after a
//! SIGKILL of the daemon, every snapshot deletes offline, the remounted
//! tree removes with `rm -rf`'s system calls, `novafs umount` and
//! `novafs fsck --repair` succeed, and the space comes back to the empty
//! image's figure with fsck finding nothing leaked.
//!
//! Longer: `NOVAFS_STRESS_SECS=120 NOVAFS_STRESS_SEED=S cargo test --release
//! --test fuse_full -- --nocapture`.

mod fuse_common;

use std::fs;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fuse_common::*;

fn env_u64(k: &str) -> Option<u64> {
    std::env::var(k).ok().and_then(|v| v.parse().ok())
}

/// Sets the flag when dropped, also by a panic.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Free 4 KiB blocks and the root directory's size (its log), as statfs
/// and stat report them through the mount.
fn free_and_root(mnt: &Path) -> (u64, u64) {
    let st = nix::sys::statvfs::statvfs(mnt).expect("statfs");
    (st.blocks_free(), fs::metadata(mnt).expect("stat root").len())
}

/// One writer's loop in its own directory: files created, written and
/// removed until `stop`; returns how often the device was full.
fn writer(dir: &Path, seed: u64, stop: &AtomicBool, busy: &AtomicU64, epoch: Instant) -> u64 {
    let mut rng = SplitMix::new(seed);
    let buf: Vec<u8> = (0..256 * 1024).map(|i| (i % 251) as u8).collect();
    let mut full = 0;
    while !stop.load(Ordering::Acquire) {
        let f: PathBuf = dir.join(format!("f{}", rng.next_u64() % 48));
        busy.store(epoch.elapsed().as_millis() as u64 + 1, Ordering::Release);
        let r = match rng.next_u64() % 6 {
            0..=2 => fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&f)
                .and_then(|mut h| h.write_all(&buf[..1 + (rng.next_u64() % buf.len() as u64) as usize])),
            3 => fs::remove_file(&f),
            4 => fs::rename(&f, dir.join(format!("f{}", rng.next_u64() % 48))),
            _ => fs::OpenOptions::new().write(true).open(&f).and_then(|h| h.set_len(0)),
        };
        busy.store(0, Ordering::Release);
        match r {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => full += 1,
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => panic!("{}: {e}", f.display()),
        }
    }
    full
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn a_full_mount_under_snapshots_never_hangs_and_empties_after_a_kill() {
    require_fuse();
    let seed = env_u64("NOVAFS_STRESS_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs() % 1_000_000)
    });
    let secs = env_u64("NOVAFS_STRESS_SECS").unwrap_or(5);
    eprintln!("full mount: seed {seed}, {secs} s");
    let mut m = Mount::new("48M", &[]);
    // The snapshot list's log takes a page and its mirror for good.
    ok(m.novafs(&["snapshot", "create"]).arg(&m.mnt).arg("first"));
    ok(m.novafs(&["snapshot", "delete"]).arg(&m.mnt).arg("first"));
    let start = free_and_root(&m.mnt);
    let dirs: Vec<PathBuf> = (0..4).map(|w| m.path(&format!("d{w}"))).collect();
    for d in &dirs {
        fs::create_dir(d).unwrap();
    }
    let stop = AtomicBool::new(false);
    let busy: Vec<AtomicU64> = (0..dirs.len()).map(|_| AtomicU64::new(0)).collect();
    let epoch = Instant::now();
    let mut taken = Vec::new();
    let full: u64 = std::thread::scope(|s| {
        // A failed assertion below stops the writers too.
        let _stop = StopOnDrop(&stop);
        let handles: Vec<_> = dirs
            .iter()
            .zip(&busy)
            .enumerate()
            .map(|(w, (d, b))| {
                let stop = &stop;
                s.spawn(move || writer(d, seed ^ (w as u64 + 1), stop, b, epoch))
            })
            .collect();
        let end = Instant::now() + Duration::from_secs(secs);
        let mut i = 0;
        while Instant::now() < end {
            // A writer stuck in the kernel for a minute: the daemon hung.
            let now = epoch.elapsed().as_millis() as u64;
            if let Some(w) = busy.iter().position(|b| {
                let t = b.load(Ordering::Acquire);
                t != 0 && now.saturating_sub(t) > CALL_LIMIT.as_millis() as u64
            }) {
                sigkill(m.pid);
                panic!("seed {seed}: writer {w} waited over {CALL_LIMIT:?} for the daemon: it hung (killed)");
            }
            i += 1;
            let name = format!("s{i}");
            let out = bounded(
                m.novafs(&["snapshot", "create"]).arg(&m.mnt).arg(&name),
                "snapshot create",
            );
            if out.status.success() {
                taken.push(name);
            } else {
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(err.contains("no space"), "snapshot create: {err}");
            }
            while taken.len() > 4 {
                let old = taken.remove(0);
                let out = bounded(
                    m.novafs(&["snapshot", "delete"]).arg(&m.mnt).arg(&old),
                    "snapshot delete",
                );
                assert!(
                    out.status.success(),
                    "snapshot delete {old}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Release);
        handles.into_iter().map(|h| h.join().expect("writer")).sum()
    });
    assert!(
        full > 0,
        "seed {seed}: the writers never filled the image: the test proves nothing"
    );
    assert!(!taken.is_empty(), "no snapshot was taken");

    // SIGKILL on the full image; then everything offline and remounted.
    sigkill(m.pid);
    wait_until("the daemon's end", Duration::from_secs(10), || !process_alive(m.pid));
    let _ = run(m.novafs(&["umount"]).arg(&m.mnt));
    if is_mount_point(&m.mnt) {
        let _ = run(Command::new("umount").arg("-l").arg(&m.mnt));
    }
    m.mounted = false;
    for name in &taken {
        let out = bounded(
            m.novafs(&["snapshot", "delete"]).arg(&m.image).arg(name),
            "offline snapshot delete",
        );
        assert!(
            out.status.success(),
            "offline delete {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    m.mount(&[]);
    for d in &dirs {
        fs::remove_dir_all(d).unwrap_or_else(|e| panic!("rm -rf {} on the full image: {e}", d.display()));
    }
    // A removed directory's log goes when the kernel forgets the
    // directory (`Fs::remember`), which FUSE sends on its own time after
    // rmdir returns: wait a bounded while for it.
    let expected = || {
        let (free, root) = free_and_root(&m.mnt);
        (free, start.0 - 2 * (root - start.1) / 4096)
    };
    let settle = Instant::now() + Duration::from_secs(10);
    let (mut free, mut want) = expected();
    while free != want && Instant::now() < settle {
        std::thread::sleep(Duration::from_millis(20));
        (free, want) = expected();
    }
    assert_eq!(free, want, "the space did not all come back");
    m.umount();
    let out = bounded(novafs(["fsck", "--repair"]).arg(&m.image), "fsck --repair");
    assert!(
        out.status.success(),
        "fsck --repair: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let report = m.fsck();
    assert!(!report.contains("leaked"), "{report}");
}

/// On a nearly full mount, the space of a file just removed serves the
/// next allocation at once, though it comes back only when the kernel's
/// FORGET reaches novafs, a moment after `rm` returned (xfstests
/// generic/213: `rm big; fallocate big2`).
#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn space_of_a_file_just_removed_serves_the_next_allocation() {
    use std::os::fd::AsRawFd;
    require_fuse();
    let m = Mount::new("96M", &[]);
    let free = free_and_root(&m.mnt).0 * 4096;
    // More than half of what is free: two cannot be there at once.
    let size = (free * 11 / 20) & !((1 << 20) - 1);
    for round in 0..10 {
        let p = m.path(&format!("big{round}"));
        let f = fs::File::create(&p).expect("create");
        // SAFETY: a descriptor owned by `f`; no pointers.
        let rc = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, size as libc::off_t) };
        let err = std::io::Error::last_os_error();
        assert_eq!(
            rc, 0,
            "round {round}: fallocate of {size} bytes with {free} free: {err}"
        );
        drop(f);
        fs::remove_file(&p).expect("rm");
    }
    m.finish();
}
