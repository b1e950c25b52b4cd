//! SIGKILL the daemon in the middle of a workload: the next mount
//! recovers, fsck is clean, and every operation that returned before the
//! kill is there (strict mode: durable when it returns).

mod fuse_common;

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::io::IntoRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use fuse_common::{is_mount_point, ok, process_alive, random_bytes, require_fuse, wait_until, Mount, SplitMix};

/// The workload's view of what must be on the image: name → contents.
type Model = BTreeMap<String, Vec<u8>>;

/// Writes `data` to a file opened with `opts` and closes it, failing if
/// the close fails: with the writeback cache the close is where the data
/// is written back (std's `File` drop ignores that error).
fn write_closed(path: &Path, opts: &OpenOptions, data: &[u8]) -> io::Result<()> {
    let mut f = opts.open(path)?;
    f.write_all(data)?;
    // SAFETY: the descriptor is ours alone, taken out of the File, and
    // closed once.
    if unsafe { libc::close(f.into_raw_fd()) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Creates, overwrites, appends to, renames and removes files until an
/// operation fails (the daemon is gone). Returns the model of everything
/// that returned, and the names the failed operation touched.
fn workload(mnt: &Path, done: &AtomicUsize) -> (Model, Vec<String>) {
    let mut model = Model::new();
    let mut rng = SplitMix::new(0xdead);
    let p = |n: &str| -> PathBuf { mnt.join(n) };
    for i in 0.. {
        let name = format!("f{i:05}");
        let len = 1 + rng.below(20_000) as usize;
        let data = random_bytes(&mut rng, len);
        let create = OpenOptions::new().write(true).create(true).truncate(true).clone();
        if write_closed(&p(&name), &create, &data).is_err() {
            return (model, vec![name]);
        }
        model.insert(name.clone(), data);
        // Append a record to a log kept open across many operations.
        let line = format!("{i}\n");
        let append = OpenOptions::new().append(true).create(true).clone();
        if write_closed(&p("log"), &append, line.as_bytes()).is_err() {
            return (model, vec!["log".into()]);
        }
        model
            .entry("log".into())
            .or_default()
            .extend_from_slice(line.as_bytes());
        if i % 3 == 0 {
            let to = format!("r{i:05}");
            if fs::rename(p(&name), p(&to)).is_err() {
                return (model, vec![name, to]);
            }
            let data = model.remove(&name).unwrap_or_default();
            model.insert(to, data);
        }
        if i % 5 == 0 && i > 0 {
            let victim = format!("f{:05}", i - 1);
            if model.contains_key(&victim) {
                if fs::remove_file(p(&victim)).is_err() {
                    return (model, vec![victim]);
                }
                model.remove(&victim);
            }
        }
        done.store(i + 1, Ordering::Release);
    }
    unreachable!("the loop ends when the daemon dies")
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn sigkill_mid_workload_then_remount_recovers_everything_that_returned() {
    sigkill_mid_workload(&[]);
}

/// With the writeback cache a write is durable once the file's close
/// returns, and the workload closes each file it writes: the same model
/// must come back.
#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn with_the_writeback_cache_everything_closed_before_a_sigkill_is_recovered() {
    sigkill_mid_workload(&["writeback_cache"]);
}

fn sigkill_mid_workload(opts: &[&str]) {
    require_fuse();
    let mut m = Mount::new("256M", opts);
    let done = Arc::new(AtomicUsize::new(0));
    let worker = {
        let mnt = m.mnt.clone();
        let done = done.clone();
        thread::spawn(move || workload(&mnt, &done))
    };
    wait_until("the workload to get going", Duration::from_secs(60), || {
        done.load(Ordering::Acquire) >= 1500
    });
    // SAFETY: kill(2) with a pid we started; no memory is involved.
    assert_eq!(unsafe { libc::kill(m.pid as i32, libc::SIGKILL) }, 0);
    let (model, in_flight) = worker.join().expect("workload thread");
    assert!(model.len() > 100, "too little happened before the kill");
    wait_until("the daemon to die", Duration::from_secs(10), || !process_alive(m.pid));
    wait_for_image_lock(&m);
    // The image is consistent as the kill left it (the lock died with the
    // daemon), and the dead mount point is refused until cleared.
    let report = m.fsck();
    assert!(report.contains("not cleanly unmounted: clean"), "{report}");
    let out = fuse_common::run(m.novafs(&["mount"]).arg(&m.image).arg(&m.mnt));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("daemon has died"));
    // novafs umount clears the dead kernel mount and says so.
    let out = ok(m.novafs(&["umount"]).arg(&m.mnt));
    assert!(out.contains("daemon had died"), "{out}");
    assert!(!is_mount_point(&m.mnt));
    m.mounted = false;
    m.mount(&[]);
    let mut names: Vec<String> = fs::read_dir(&m.mnt)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for (name, want) in &model {
        let got = fs::read(m.path(name));
        if !in_flight.contains(name) {
            let got = got.unwrap_or_else(|e| panic!("{name} lost: {e}"));
            assert!(got == *want, "{name}: contents differ after recovery");
            continue;
        }
        // The interrupted operation happened whole or not at all.
        match got {
            Ok(got) if name == "log" => assert!(got.starts_with(want), "log lost records"),
            Ok(got) => assert!(got == *want, "{name}: contents differ after recovery"),
            // Removed, or renamed to the other name it touched.
            Err(_) => {
                if let Some(to) = in_flight.iter().find(|n| *n != name) {
                    assert!(fs::read(m.path(to)).is_ok_and(|g| g == *want), "{name} lost");
                }
            }
        }
    }
    for name in &names {
        assert!(
            model.contains_key(name) || in_flight.contains(name),
            "{name} exists but was never created or was removed before the kill"
        );
    }
    m.finish();
}

/// Waits until the killed daemon's image lock is gone: its first thread
/// dies before the others, which hold the lock until the last exits.
fn wait_for_image_lock(m: &Mount) {
    wait_until("the image lock to go", Duration::from_secs(10), || {
        let out = fuse_common::run(fuse_common::novafs(["fsck"]).arg(&m.image));
        !String::from_utf8_lossy(&out.stderr).contains("in use")
    });
}

/// Free blocks of the file system at `path` (statvfs).
fn free_blocks(path: &Path) -> u64 {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL");
    // SAFETY: a NUL-terminated path and a statvfs to fill, both live
    // across the call.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0, "statvfs");
    st.f_bfree
}

/// Through the mount an unlinked file lives on while the kernel still
/// holds it (its lookups; README, "Opens cost no request"). When the
/// daemon is killed then, the recovery mount frees it: the space comes
/// back and fsck is clean.
#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn files_unlinked_while_held_are_freed_by_the_recovery_after_a_sigkill() {
    require_fuse();
    let mut m = Mount::new("128M", &[]);
    let before = free_blocks(&m.mnt);
    let mut held = Vec::new();
    for i in 0..4 {
        let p = m.path(&format!("held{i}"));
        fs::write(&p, vec![0xa5u8; 4 << 20]).expect("write 4 MiB");
        held.push(fs::File::open(&p).expect("open"));
        fs::remove_file(&p).expect("unlink");
    }
    let during = free_blocks(&m.mnt);
    assert!(
        before - during >= 4 * 1024,
        "the held files keep their 16 MiB: {before} free before, {during} now"
    );
    // SAFETY: kill(2) with a pid we started; no memory is involved.
    assert_eq!(unsafe { libc::kill(m.pid as i32, libc::SIGKILL) }, 0);
    wait_until("the daemon to die", Duration::from_secs(10), || !process_alive(m.pid));
    drop(held);
    wait_for_image_lock(&m);
    ok(m.novafs(&["umount"]).arg(&m.mnt));
    m.mounted = false;
    m.mount(&[]);
    let after = free_blocks(&m.mnt);
    assert!(
        after + 64 >= before,
        "the recovery frees the held files: {before} free before, {after} after"
    );
    assert_eq!(fs::read_dir(&m.mnt).expect("list").count(), 0, "nothing is left");
    m.finish();
}
