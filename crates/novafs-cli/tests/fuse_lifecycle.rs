//! The mount's life cycle: bad input is refused with one line and leaves
//! the image untouched; the image lock keeps a mounted image from a second
//! mount or fsck; signals and umount end the daemon with a clean image;
//! read-only mounts refuse writes.

mod fuse_common;

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use fuse_common::{
    is_mount_point, mount_helpers, novafs, ok, process_alive, require_fuse, require_fuse_root, run, shm_dir,
    wait_until, Mount,
};
use nix::sys::signal::Signal;

/// Runs `novafs ARGS`, expects failure with exactly one line on stderr
/// containing `needle`; returns that line.
fn refused(cmd: &mut Command, needle: &str) -> String {
    let out = run(cmd);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{cmd:?} should fail; stderr: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err:?}");
    assert!(err.contains(needle), "{err:?} lacks {needle:?}");
    err
}

fn bytes(p: &Path) -> Vec<u8> {
    fs::read(p).expect("read image")
}

fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn mount_cmd(image: &Path, mnt: &Path) -> Command {
    let mut c = novafs(["mount"]);
    c.arg(image).arg(mnt);
    // Keep the daemon's state and log beside the image, in the test's dir.
    if let Some(dir) = image.parent() {
        c.env("NOVAFS_RUN_DIR", dir.join("run"));
    }
    c
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn bad_mount_points_are_refused_in_one_line_and_the_image_is_untouched() {
    require_fuse();
    let dir = shm_dir();
    let image = dir.path().join("image");
    ok(novafs(["mkfs", "--size", "64M"]).arg(&image));
    let before = bytes(&image);
    let missing = dir.path().join("missing");
    refused(&mut mount_cmd(&image, &missing), "does not exist");
    let file = dir.path().join("file");
    fs::write(&file, "x").expect("write");
    refused(&mut mount_cmd(&image, &file), "not a directory");
    // A mount point that is already a mount (here: another novafs).
    let other = Mount::new("64M", &[]);
    refused(&mut mount_cmd(&image, &other.mnt), "already a mount point");
    refused(
        novafs(["mount", "-o", "data=journal"]).arg(&image).arg(dir.path()),
        "unknown mount option 'data=journal'",
    );
    refused(
        novafs(["mount", "-o", "threads=zero"]).arg(&image).arg(dir.path()),
        "threads=zero",
    );
    refused(novafs(["umount"]).arg(dir.path()), "not mounted");
    assert!(bytes(&image) == before, "the image changed");
    other.finish();
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn bad_images_are_refused_in_one_line_and_left_untouched() {
    require_fuse();
    let dir = shm_dir();
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).expect("mkdir");
    refused(&mut mount_cmd(&dir.path().join("nope"), &mnt), "does not exist");
    // Not novafs: 64 MiB of something else.
    let junk = dir.path().join("junk");
    fs::write(&junk, vec![0x5au8; 64 << 20]).expect("write");
    refused(&mut mount_cmd(&junk, &mnt), "not a novafs image");
    assert!(bytes(&junk).iter().all(|&b| b == 0x5a), "junk image changed");
    // A newer format version (the superblock's CRC made to match).
    let newer = dir.path().join("newer");
    ok(novafs(["mkfs", "--size", "64M"]).arg(&newer));
    let mut img = bytes(&newer);
    img[8..12].copy_from_slice(&99u32.to_le_bytes());
    let csum = crc32c(&img[..432]);
    img[432..436].copy_from_slice(&csum.to_le_bytes());
    fs::write(&newer, &img).expect("write");
    refused(&mut mount_cmd(&newer, &mnt), "upgrade novafs");
    assert!(bytes(&newer) == img, "newer image changed");
    assert!(!is_mount_point(&mnt));
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn a_mounted_image_is_shared_by_a_second_mount_and_cannot_be_checked() {
    require_fuse();
    let m = Mount::new("64M", &["stats"]);
    fs::write(m.path("f"), "data").expect("write");
    let before = bytes(&m.image);
    let second = m.dir.path().join("second");
    fs::create_dir(&second).expect("mkdir");
    refused(
        m.novafs(&["mount", "--foreground"]).arg(&m.image).arg(&second),
        "in use",
    );
    assert!(bytes(&m.image) == before, "a refused mount changed the image");
    if nix::unistd::geteuid().is_root() {
        // As a kernel file system mounted twice shares its superblock, a
        // second mount shares the daemon (xfstests generic/732); options
        // of the daemon's own may be named again, not changed.
        refused(
            m.novafs(&["mount", "-o", "stats,writeback_cache"])
                .arg(&m.image)
                .arg(&second),
            "mounted already",
        );
        let out = ok(m.novafs(&["mount", "-o", "stats"]).arg(&m.image).arg(&second));
        assert!(out.contains("shared with its mount"), "{out}");
        assert_eq!(fs::read_to_string(second.join("f")).expect("read"), "data");
        fs::rename(second.join("f"), second.join("g")).expect("rename");
        assert_eq!(fs::read_to_string(m.path("g")).expect("read"), "data");
        fs::rename(m.path("g"), m.path("f")).expect("rename back");
        let out = ok(m.novafs(&["umount"]).arg(&second));
        assert!(out.contains("stays mounted"), "{out}");
    } else {
        refused(&mut mount_cmd(&m.image, &second), "in use");
    }
    let before = bytes(&m.image);
    let out = run(novafs(["fsck"]).arg(&m.image));
    assert_eq!(out.status.code(), Some(2), "fsck of a mounted image");
    assert!(String::from_utf8_lossy(&out.stderr).contains("in use"));
    assert!(bytes(&m.image) == before, "the image changed");
    assert!(!is_mount_point(&second));
    m.finish();
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn sigterm_and_sigint_unmount_cleanly() {
    require_fuse();
    let mut m = Mount::new("64M", &[]);
    fs::write(m.path("kept"), "kept across SIGTERM").expect("write");
    signal(m.pid as i32, Signal::SIGTERM);
    wait_until("the daemon to exit", Duration::from_secs(30), || !process_alive(m.pid));
    assert!(!is_mount_point(&m.mnt));
    m.mounted = false;
    assert!(m.fsck().contains("cleanly unmounted"));
    // In the foreground, Ctrl-C (SIGINT) does the same.
    let child = m
        .novafs(&["mount", "--foreground"])
        .arg(&m.image)
        .arg(&m.mnt)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    wait_until("the foreground mount", Duration::from_secs(30), || {
        is_mount_point(&m.mnt)
    });
    assert_eq!(fs::read_to_string(m.path("kept")).expect("read"), "kept across SIGTERM");
    signal(child.id() as i32, Signal::SIGINT);
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("serving in the foreground"));
    assert!(!is_mount_point(&m.mnt));
    assert!(m.fsck().contains("cleanly unmounted"));
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn a_busy_mount_refuses_umount_and_sigterm_detaches_until_the_last_close() {
    require_fuse();
    let mut m = Mount::new("64M", &[]);
    let mut open = File::create(m.path("open")).expect("create");
    open.write_all(b"before").expect("write");
    refused(m.novafs(&["umount"]).arg(&m.mnt), "busy");
    assert!(is_mount_point(&m.mnt));
    signal(m.pid as i32, Signal::SIGTERM);
    wait_until("the detach", Duration::from_secs(30), || !is_mount_point(&m.mnt));
    m.mounted = false;
    // Detached, not dead: the open file still works until it is closed.
    assert!(process_alive(m.pid));
    open.write_all(b" and after").expect("write after detach");
    drop(open);
    wait_until("the daemon to exit", Duration::from_secs(30), || !process_alive(m.pid));
    assert!(m.fsck().contains("cleanly unmounted"));
    m.mount(&[]);
    assert_eq!(fs::read_to_string(m.path("open")).expect("read"), "before and after");
    m.finish();
}

/// `-o mode=`: a mount in the mode it names (the image's default
/// otherwise), the RELAXED bit shown by info while a relaxed mount lives
/// and gone after its umount; a bad mode is one line.
#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn a_mount_takes_the_mode_it_names_and_info_shows_a_relaxed_one_while_it_lives() {
    require_fuse();
    let mut m = Mount::new("64M", &["threads=1,mode=relaxed"]);
    let mode_line = |m: &Mount| {
        let out = ok(novafs(["info"]).arg(&m.image));
        out.lines()
            .find(|l| l.starts_with("mode:"))
            .expect("a mode line")
            .to_string()
    };
    fs::write(m.path("f"), "relaxed").expect("write");
    assert_eq!(
        mode_line(&m),
        "mode:         strict (default for mounts); a relaxed mount is in use or crashed \
         (the next mount reseals its data-write intents)"
    );
    m.umount();
    assert_eq!(mode_line(&m), "mode:         strict (default for mounts)");
    refused(
        mount_cmd(&m.image, &m.mnt).args(["-o", "mode=bogus"]),
        "mode=bogus: unknown consistency mode 'bogus': use strict or relaxed",
    );
    assert!(!is_mount_point(&m.mnt));
    m.mount(&["threads=1,mode=strict"]);
    assert_eq!(fs::read_to_string(m.path("f")).expect("read"), "relaxed");
    assert_eq!(mode_line(&m), "mode:         strict (default for mounts)");
    m.finish();
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn read_only_mounts_serve_reads_and_refuse_writes() {
    require_fuse();
    let mut m = Mount::new("64M", &["threads=1"]);
    fs::create_dir(m.path("d")).expect("mkdir");
    fs::write(m.path("d/f"), "read me").expect("write");
    m.umount();
    m.mount(&["ro,threads=3"]);
    let mut s = String::new();
    File::open(m.path("d/f"))
        .expect("open")
        .read_to_string(&mut s)
        .expect("read");
    assert_eq!(s, "read me");
    let err = OpenOptions::new()
        .append(true)
        .open(m.path("d/f"))
        .expect_err("write open on ro");
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    let err = fs::create_dir(m.path("e")).expect_err("mkdir on ro");
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    m.finish();
}

#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn without_root_and_without_fusermount3_mount_says_what_to_install() {
    require_fuse_root();
    let setpriv = Path::new(SETPRIV);
    let dir = shm_dir();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).expect("chmod");
    let image = dir.path().join("image");
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).expect("mkdir");
    fs::set_permissions(&mnt, fs::Permissions::from_mode(0o777)).expect("chmod");
    ok(novafs(["mkfs", "--size", "64M"]).arg(&image));
    let before = bytes(&image);
    let mut cmd = Command::new(setpriv);
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(fuse_common::NOVAFS)
        .arg("mount")
        .arg(&image)
        .arg(&mnt)
        .env("PATH", "/nonexistent")
        .env("NOVAFS_RUN_DIR", dir.path().join("run"));
    refused(&mut cmd, "fusermount3");
    assert!(bytes(&image) == before, "the image changed");
}

#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn allow_other_lets_other_users_in_and_permissions_still_apply() {
    require_fuse_root();
    let setpriv = Path::new(SETPRIV);
    let as_nobody = |args: &[&Path]| {
        let mut c = Command::new(setpriv);
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
        c.args(args);
        run(&mut c).status.success()
    };
    let cat = Path::new("/bin/cat");
    let mut m = Mount::new("64M", &[]);
    fs::set_permissions(m.dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    fs::write(m.path("public"), "for everyone").expect("write");
    fs::write(m.path("private"), "root only").expect("write");
    fs::set_permissions(m.path("private"), fs::Permissions::from_mode(0o600)).expect("chmod");
    assert!(!as_nobody(&[cat, &m.path("public")]), "without allow_other");
    m.umount();
    m.mount(&["allow_other"]);
    assert!(as_nobody(&[cat, &m.path("public")]), "with allow_other");
    assert!(!as_nobody(&[cat, &m.path("private")]), "default_permissions");
    m.finish();
}

/// Runs a program as another user (util-linux; the test runs as root).
const SETPRIV: &str = "/usr/bin/setpriv";

/// Sends `sig` to a process this test started.
fn signal(pid: i32, sig: Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).expect("kill");
}

/// mount(8) mounts novafs through its helpers: an /etc/fstab-style line of
/// type novafs, and `mount -t fuse.novafs`, with options it passes along
/// (noexec) and fstab's own (defaults, nofail, x-*) accepted, printing
/// nothing on success; `mount -o remount,ro` and back change the mount in
/// place; a mount right after umount(8) waits for the old daemon to save
/// the image. One option it cannot honour fails the mount with
/// a clear message.
#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn mount_8_mounts_through_the_helpers() {
    require_fuse_root();
    let exe = fs::canonicalize(fuse_common::NOVAFS).expect("the novafs binary");
    let _helpers = mount_helpers::Installed::new(mount_helpers::Places::sbin(), &exe);
    let mut m = Mount::new("32M", &[]);
    m.umount();
    let fstab = m.image.with_extension("fstab");
    let line = format!(
        "{} {} novafs defaults,nofail,x-test=1,noexec,stats 0 0\n",
        m.image.display(),
        m.mnt.display()
    );
    fs::write(&fstab, line).expect("fstab");
    let ok = |cmd: &mut Command| {
        let out = cmd.output().expect("run mount(8)");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    };
    let mount_line = || {
        let mounts = fs::read_to_string("/proc/mounts").expect("/proc/mounts");
        mounts
            .lines()
            .find(|l| l.contains(m.mnt.to_str().expect("utf-8")))
            .expect("mounted")
            .to_string()
    };
    ok(Command::new("mount").arg("--fstab").arg(&fstab).arg(&m.mnt));
    let line = mount_line();
    assert!(line.contains(" fuse.novafs ") && line.contains("noexec"), "{line}");
    // mount(8)'s defaults, dev and suid, hold for root as on ext4.
    assert!(!line.contains("nodev") && !line.contains("nosuid"), "{line}");
    fs::write(m.path("f"), "x").expect("write");
    // The daemon's own options may be named again unchanged (mount(8)
    // passes fstab's along), not changed.
    ok(Command::new("mount").args(["-o", "remount,ro,stats"]).arg(&m.mnt));
    assert!(mount_line().contains(" ro,"), "{}", mount_line());
    let err = fs::write(m.path("g"), "y").expect_err("read-only");
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    ok(Command::new("mount").args(["-o", "remount,rw"]).arg(&m.mnt));
    assert!(
        mount_line().contains("noexec"),
        "remount keeps the other flags: {}",
        mount_line()
    );
    fs::write(m.path("g"), "y").expect("writable again");
    let out = Command::new("mount")
        .args(["-o", "remount,threads=2"])
        .arg(&m.mnt)
        .output()
        .expect("run mount(8)");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot change on a remount"));
    ok(Command::new("umount").arg(&m.mnt));
    // At once: the new daemon waits for the old one to let the image go.
    ok(Command::new("mount")
        .args(["-t", "fuse.novafs", "-o", "ro,nosuid"])
        .arg(&m.image)
        .arg(&m.mnt));
    assert_eq!(fs::read_to_string(m.path("f")).expect("read"), "x");
    let line = mount_line();
    assert!(line.contains("nosuid") && !line.contains("nodev"), "{line}");
    ok(Command::new("umount").arg(&m.mnt));
    let out = Command::new("mount")
        .args(["-t", "fuse.novafs", "-o", "data=journal"])
        .arg(&m.image)
        .arg(&m.mnt)
        .output()
        .expect("run mount(8)");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown mount option 'data=journal'"), "{err}");
    // umount(8) returns before the daemon has marked the image clean.
    wait_until("a clean image", Duration::from_secs(5), || {
        let out = novafs(["fsck"]).arg(&m.image).output().expect("fsck");
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("cleanly unmounted")
    });
    // mount(8) starts its daemons without NOVAFS_RUN_DIR: their logs went
    // to the machine's state directory. Leave it as it was.
    let ours = m
        .dir
        .path()
        .file_name()
        .expect("a named directory")
        .to_string_lossy()
        .into_owned();
    if let Ok(entries) = fs::read_dir("/run/novafs") {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().contains(&ours) {
                let _ = fs::remove_file(e.path());
            }
        }
    }
}

/// What a helper path holds: a link (its target), a file (contents and
/// mode), or nothing; and its mtime.
#[derive(Debug, PartialEq)]
enum Held {
    Link(PathBuf, i64),
    File(Vec<u8>, u32, i64),
    Absent,
}

fn held(paths: &[PathBuf]) -> Vec<Held> {
    paths
        .iter()
        .map(|p| match fs::symlink_metadata(p) {
            Ok(m) if m.file_type().is_symlink() => Held::Link(fs::read_link(p).expect("readlink"), m.mtime()),
            Ok(m) => Held::File(fs::read(p).expect("read"), m.permissions().mode(), m.mtime()),
            Err(_) => Held::Absent,
        })
        .collect()
}

/// The mount helpers a test installs are put back as they were (a link, a
/// file, nothing; with their times): when the test ends, when it panics,
/// and, after a run killed midway, by the next run before it installs its
/// own.
#[test]
fn installed_mount_helpers_are_put_back() {
    let dir = shm_dir();
    let places = || mount_helpers::Places {
        helpers: ["mount.link", "mount.file", "mount.absent"]
            .iter()
            .map(|n| dir.path().join(n))
            .collect(),
        lock: dir.path().to_path_buf(),
        saved: dir.path().join("saved"),
    };
    let helpers = places().helpers;
    std::os::unix::fs::symlink("/elsewhere/bin/novafs", &helpers[0]).expect("symlink");
    fs::write(&helpers[1], "#!/bin/sh\nexit 0\n").expect("write");
    fs::set_permissions(&helpers[1], fs::Permissions::from_mode(0o751)).expect("chmod");
    // Old times, which a copy made now would not have.
    for h in &helpers[..2] {
        ok(Command::new("touch").args(["-h", "-t", "200001021234.56"]).arg(h));
    }
    let before = held(&helpers);
    let exe = Path::new(fuse_common::NOVAFS);
    let targets = || helpers.iter().map(|p| fs::read_link(p).ok()).collect::<Vec<_>>();
    let installed = vec![Some(exe.to_path_buf()); 3];

    let guard = mount_helpers::Installed::new(places(), exe);
    assert_eq!(targets(), installed);
    drop(guard);
    assert_eq!(held(&helpers), before, "after the test");
    assert!(!places().saved.exists());

    let panicked = std::panic::catch_unwind(|| {
        let _guard = mount_helpers::Installed::new(places(), exe);
        panic!("a failing test");
    });
    assert!(panicked.is_err());
    assert_eq!(held(&helpers), before, "after a panic");

    mount_helpers::Installed::new(places(), exe).abandon();
    assert_eq!(targets(), installed, "a killed run leaves them");
    let guard = mount_helpers::Installed::new(places(), Path::new("/another/build/novafs"));
    drop(guard);
    assert_eq!(held(&helpers), before, "after the next run");
    assert!(!places().saved.exists());
}
