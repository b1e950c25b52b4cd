//! What a process under the preload shim needs from a daemon it hands the
//! image over to (PRELOAD.md): files reopened by inode number through the
//! mount (`-o inode_names`), a daemon that goes away with the last process
//! using it (`-o until_unused=PATH`), and a daemon that keeps none of its
//! starter's descriptors.

mod fuse_common;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use fuse_common::{is_mount_point, novafs, ok, process_alive, require_fuse, require_fuse_root, wait_until, Mount};
use nix::fcntl::{Flock, FlockArg};

fn by_number(m: &Mount, ino: u64) -> std::path::PathBuf {
    m.path(&format!(".novafs-ino.{ino}"))
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn inode_names_open_files_by_number_through_the_mount() {
    require_fuse();
    let m = Mount::new("64M", &["inode_names"]);
    fs::create_dir(m.path("d")).expect("mkdir");
    fs::write(m.path("d/f"), b"reached by number").expect("write");
    let ino = fs::metadata(m.path("d/f")).expect("stat").ino();
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(by_number(&m, ino))
        .expect("open by number");
    let mut got = String::new();
    f.read_to_string(&mut got).expect("read");
    assert_eq!(got, "reached by number");
    assert_eq!(f.metadata().expect("fstat").ino(), ino);
    // The same file: written through one name, read through the other.
    f.seek(SeekFrom::Start(0)).expect("seek");
    f.write_all(b"REACHED").expect("write");
    drop(f);
    assert_eq!(fs::read(m.path("d/f")).expect("read"), b"REACHED by number");
    // Never listed; a free number is ENOENT; the names cannot be made.
    let listed: Vec<String> = fs::read_dir(&m.mnt)
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(listed, ["d"]);
    let free = fs::metadata(by_number(&m, 999_999)).expect_err("free number");
    assert_eq!(free.raw_os_error(), Some(libc::ENOENT));
    let bad = fs::metadata(m.path(".novafs-ino.0012")).expect_err("malformed");
    assert_eq!(bad.raw_os_error(), Some(libc::ENOENT));
    let made = File::create(by_number(&m, 999_999)).expect_err("reserved name");
    assert_eq!(made.raw_os_error(), Some(libc::EPERM));
    // Unlinked, it is ENOENT at once, also while open: the kernel kept no
    // entry, and a removed file is not reachable again.
    let open = File::open(m.path("d/f")).expect("open");
    assert!(fs::metadata(by_number(&m, ino)).is_ok());
    fs::remove_file(m.path("d/f")).expect("rm");
    let gone = fs::metadata(by_number(&m, ino)).expect_err("unlinked");
    assert_eq!(gone.raw_os_error(), Some(libc::ENOENT));
    drop(open);
    m.finish();
}

/// A lock file in a directory of its own, held shared as each process
/// under the shim holds it.
fn held_lock(dir: &Path) -> (std::path::PathBuf, Flock<File>) {
    let run = dir.join("shim");
    fs::create_dir(&run).expect("mkdir");
    let lock = run.join("lock");
    let f = File::create(&lock).expect("create the lock file");
    let held = Flock::lock(f, FlockArg::LockShared).map_err(|(_, e)| e).expect("flock");
    (lock, held)
}

#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn until_unused_unmounts_once_the_last_holder_lets_go_and_the_mount_is_free() {
    // Root: only umount(2) says EBUSY (fusermount3 detaches lazily).
    require_fuse_root();
    let dir = fuse_common::shm_dir();
    let (lock, held) = held_lock(dir.path());
    // A second holder, as a forked child holds its own description.
    let second = Flock::lock(File::open(&lock).expect("open"), FlockArg::LockShared)
        .map_err(|(_, e)| e)
        .expect("flock");
    let mut m = Mount::new("64M", &[&format!("until_unused={}", lock.display())]);
    fs::write(m.path("kept"), b"written before the end").expect("write");
    drop(held);
    std::thread::sleep(Duration::from_millis(500));
    assert!(is_mount_point(&m.mnt), "unmounted while a holder was left");
    // The last holder gone while a file is open there: busy, tried again
    // until the file is closed.
    let open = File::open(m.path("kept")).expect("open");
    drop(second);
    std::thread::sleep(Duration::from_millis(700));
    assert!(is_mount_point(&m.mnt), "unmounted while busy");
    assert!(process_alive(m.pid));
    drop(open);
    wait_until("the daemon to unmount and exit", Duration::from_secs(10), || {
        !is_mount_point(&m.mnt) && !process_alive(m.pid)
    });
    m.mounted = false;
    assert!(!lock.exists(), "the lock file stays");
    assert!(!m.mnt.exists(), "the mount point stays");
    assert!(!lock.parent().expect("dir").exists(), "the lock's directory stays");
    let report = m.fsck();
    assert!(report.contains("cleanly unmounted"), "{report}");
    // The image holds what was written.
    let mnt = dir.path().join("again");
    fs::create_dir(&mnt).expect("mkdir");
    m.mnt = mnt;
    m.mount(&[]);
    assert_eq!(fs::read(m.path("kept")).expect("read"), b"written before the end");
    m.finish();
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn until_unused_needs_an_existing_absolute_lock_file() {
    require_fuse();
    let dir = fuse_common::shm_dir();
    let image = dir.path().join("image");
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).expect("mkdir");
    ok(novafs(["mkfs", "--size", "64M"]).arg(&image));
    let missing = dir.path().join("no-lock");
    for (opt, says) in [
        (
            format!("until_unused={}", missing.display()),
            format!("until_unused={}: No such file or directory", missing.display()),
        ),
        (
            "until_unused=lock".to_string(),
            "until_unused=lock: until_unused takes an absolute path".to_string(),
        ),
    ] {
        let out = novafs(["mount", "-o", &opt])
            .arg(&image)
            .arg(&mnt)
            .env("NOVAFS_RUN_DIR", dir.path().join("run"))
            .stdin(Stdio::null())
            .output()
            .expect("mount");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(&says), "{opt}: {err}");
        assert!(!is_mount_point(&mnt));
    }
    let report = ok(novafs(["fsck"]).arg(&image));
    assert!(report.contains("cleanly unmounted"), "{report}");
}

/// `novafs mount` in a pipeline with one more descriptor onto the pipe
/// (as a program's inherited pipe end): the pipeline ends when `novafs
/// mount` does, the daemon holding neither its stdout nor the other one.
#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn the_daemon_keeps_none_of_its_starters_descriptors() {
    require_fuse();
    let dir = fuse_common::shm_dir();
    let image = dir.path().join("image");
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).expect("mkdir");
    ok(novafs(["mkfs", "--size", "64M"]).arg(&image));
    let run = dir.path().join("run");
    let script = r#""$0" mount "$1" "$2" 5>&1 | cat"#;
    let mut sh = Command::new("sh")
        .args(["-c", script, fuse_common::NOVAFS])
        .arg(&image)
        .arg(&mnt)
        .env("NOVAFS_RUN_DIR", &run)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sh");
    let mut out = sh.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = tx.send(out.read_to_string(&mut text).map(|_| text));
    });
    let got: Result<io::Result<String>, _> = rx.recv_timeout(Duration::from_secs(30));
    let unmounted = novafs(["umount"]).arg(&mnt).env("NOVAFS_RUN_DIR", &run).output();
    let status = sh.wait().expect("wait");
    let text = got
        .expect("the pipeline never ended: the daemon holds its pipe")
        .expect("read");
    assert!(status.success() && text.starts_with("novafs: mounted "), "{text}");
    assert!(unmounted.expect("umount").status.success());
}
