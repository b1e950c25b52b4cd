//! POSIX behaviour through the mount: the errno of every failing operation
//! is exact, and the corners programs rely on work (unlink while open,
//! set-group-ID directories, large directories listed while they change,
//! renameat2 flags, running out of space).

mod fuse_common;

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

use std::process::Command;
use std::time::Duration;

use fuse_common::{as_nobody, require_fuse, require_fuse_root, run, wait_until, Mount};

fn errno<T: std::fmt::Debug>(r: io::Result<T>) -> i32 {
    r.expect_err("should fail").raw_os_error().expect("an errno")
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("no NUL")
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn renameat2(from: &Path, to: &Path, flags: libc::c_uint) -> io::Result<()> {
    let (a, b) = (cstr(from), cstr(to));
    // SAFETY: both strings are NUL-terminated and live across the call.
    check(unsafe { libc::renameat2(libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), flags) })
}

fn fallocate(f: &File, mode: i32, off: i64, len: i64) -> io::Result<()> {
    // SAFETY: `f` stays open across the call.
    check(unsafe { libc::fallocate(f.as_raw_fd(), mode, off, len) })
}

/// The mount's line in /proc/mounts.
fn mounts_line(m: &Mount) -> String {
    let mounts = fs::read_to_string("/proc/mounts").expect("/proc/mounts");
    mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == m.mnt.to_str())
        .expect("the mount is listed")
        .to_string()
}

fn free_blocks(p: &Path) -> u64 {
    let c = cstr(p);
    // SAFETY: an all-zero statvfs is valid storage for the result.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated; `s` is a valid out pointer.
    check(unsafe { libc::statvfs(c.as_ptr(), &mut s) }).expect("statvfs");
    assert_eq!(s.f_bsize, 4096);
    assert_eq!(s.f_namemax, 255);
    s.f_bfree
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn failing_operations_return_the_exact_errno() {
    require_fuse();
    let m = Mount::new("64M", &[]);
    let p = |s: &str| m.path(s);
    fs::create_dir(p("d")).expect("mkdir");
    fs::write(p("d/f"), "x").expect("write");
    fs::create_dir(p("e")).expect("mkdir");
    fs::write(p("file"), "y").expect("write");
    assert_eq!(errno(fs::create_dir(p("d"))), libc::EEXIST);
    assert_eq!(errno(fs::remove_dir(p("d"))), libc::ENOTEMPTY);
    assert_eq!(errno(fs::remove_dir(p("file"))), libc::ENOTDIR);
    assert_eq!(errno(fs::remove_file(p("d"))), libc::EISDIR);
    assert_eq!(errno(File::open(p("missing"))), libc::ENOENT);
    assert_eq!(errno(File::open(p("file/x"))), libc::ENOTDIR);
    assert_eq!(errno(File::create(p(&"n".repeat(256)))), libc::ENAMETOOLONG);
    File::create(p(&"n".repeat(255))).expect("255 bytes is fine");
    assert_eq!(errno(fs::rename(p("d"), p("d/inside"))), libc::EINVAL);
    assert_eq!(errno(fs::rename(p("file"), p("e"))), libc::EISDIR);
    assert_eq!(errno(fs::rename(p("e"), p("file"))), libc::ENOTDIR);
    assert_eq!(errno(fs::rename(p("e"), p("d"))), libc::ENOTEMPTY);
    assert_eq!(errno(fs::hard_link(p("d"), p("dlink"))), libc::EPERM);
    assert_eq!(errno(fs::read_link(p("file"))), libc::EINVAL);
    assert_eq!(
        errno(renameat2(&p("file"), &p("d/f"), libc::RENAME_NOREPLACE)),
        libc::EEXIST
    );
    assert_eq!(
        errno(renameat2(&p("file"), &p("nothing"), libc::RENAME_EXCHANGE)),
        libc::ENOENT
    );
    renameat2(&p("file"), &p("d/f"), libc::RENAME_EXCHANGE).expect("exchange");
    assert_eq!(fs::read_to_string(p("file")).expect("read"), "x");
    assert_eq!(fs::read_to_string(p("d/f")).expect("read"), "y");
    let f = OpenOptions::new().read(true).write(true).open(p("file")).expect("open");
    assert_eq!(errno(f.write_at(b"z", 1 << 52)), libc::EFBIG);
    assert_eq!(errno(f.set_len(1 << 53)), libc::EFBIG);
    assert_eq!(
        errno(fallocate(&f, libc::FALLOC_FL_COLLAPSE_RANGE, 0, 4096)),
        libc::EOPNOTSUPP
    );
    // SAFETY: lseek on a descriptor `f` keeps open.
    let past_end = unsafe { libc::lseek(f.as_raw_fd(), 4096, libc::SEEK_DATA) };
    assert_eq!(past_end, -1);
    assert_eq!(io::Error::last_os_error().raw_os_error(), Some(libc::ENXIO));
    let name = cstr(&p("file"));
    let attr = CString::new("user.test").expect("no NUL");
    let mut buf = [0u8; 16];
    // SAFETY: valid strings and a buffer of the stated length.
    let rc = unsafe { libc::getxattr(name.as_ptr(), attr.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(rc, -1);
    // A missing attribute: ENODATA, as on ext4 and tmpfs.
    assert_eq!(io::Error::last_os_error().raw_os_error(), Some(libc::ENODATA));
    drop(f);
    m.finish();
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn running_out_of_space_is_enospc_and_deleting_gives_the_space_back() {
    require_fuse();
    let mut m = Mount::new("64M", &[]);
    let free_before = free_blocks(&m.mnt);
    let mut f = File::create(m.path("big")).expect("create");
    let chunk = vec![0xabu8; 1 << 20];
    let err = loop {
        if let Err(e) = f.write_all(&chunk) {
            break e;
        }
    };
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
    drop(f);
    assert!(free_blocks(&m.mnt) < free_before / 10);
    fs::remove_file(m.path("big")).expect("rm");
    // Freed when the kernel forgets the file, right after the unlink.
    wait_until("the file's space", Duration::from_secs(10), || {
        free_blocks(&m.mnt) == free_before
    });
    m.umount();
    assert!(m.fsck().contains("cleanly unmounted"));
    m.mount(&[]);
    assert_eq!(free_blocks(&m.mnt), free_before);
    m.finish();
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn an_unlinked_file_lives_until_its_last_close() {
    require_fuse();
    let m = Mount::new("64M", &[]);
    let free_before = free_blocks(&m.mnt);
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.path("doomed"))
        .expect("create");
    f.write_all(&vec![7u8; 1 << 20]).expect("write");
    fs::remove_file(m.path("doomed")).expect("unlink");
    assert!(!m.path("doomed").exists());
    assert_eq!(f.metadata().expect("fstat").nlink(), 0);
    f.write_at(b"still here", 0).expect("write after unlink");
    let mut head = [0u8; 10];
    f.read_exact_at(&mut head, 0).expect("read after unlink");
    assert_eq!(&head, b"still here");
    drop(f);
    // The last close makes the kernel forget the file (FUSE FORGET, on
    // its own time after close returns), which frees it and its pages.
    wait_until("the unlinked file's space", Duration::from_secs(10), || {
        free_blocks(&m.mnt) == free_before
    });
    m.finish();
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn set_group_id_directories_pass_their_group_on() {
    require_fuse();
    let m = Mount::new("64M", &[]);
    let g = m.path("g");
    fs::create_dir(&g).expect("mkdir");
    std::os::unix::fs::chown(&g, None, Some(4321)).expect("chgrp");
    fs::set_permissions(&g, fs::Permissions::from_mode(0o2775)).expect("chmod");
    fs::write(g.join("f"), "").expect("create");
    fs::create_dir(g.join("sub")).expect("mkdir");
    std::os::unix::fs::symlink("f", g.join("l")).expect("symlink");
    assert_eq!(fs::metadata(g.join("f")).expect("stat").gid(), 4321);
    let sub = fs::metadata(g.join("sub")).expect("stat");
    assert_eq!(sub.gid(), 4321);
    assert_ne!(sub.mode() & libc::S_ISGID, 0, "subdirectories inherit set-group-ID");
    assert_eq!(fs::symlink_metadata(g.join("l")).expect("lstat").gid(), 4321);
    // Elsewhere the creator's group applies.
    fs::write(m.path("plain"), "").expect("create");
    assert_eq!(fs::metadata(m.path("plain")).expect("stat").gid(), 0);
    m.finish();
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn a_large_directory_lists_every_entry_once_even_while_it_shrinks() {
    require_fuse();
    let m = Mount::new("128M", &[]);
    let d = m.path("big");
    fs::create_dir(&d).expect("mkdir");
    const N: usize = 5000;
    for i in 0..N {
        File::create(d.join(format!("entry-{i:05}-{}", "x".repeat(i % 40)))).expect("create");
    }
    let mut seen: Vec<String> = fs::read_dir(&d)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(seen.len(), N);
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), N, "duplicates in the listing");
    // `ls -l` style: readdirplus attributes agree with stat.
    for e in fs::read_dir(&d).expect("read_dir").take(100) {
        let e = e.expect("entry");
        assert_eq!(
            e.metadata().expect("meta").ino(),
            fs::metadata(e.path()).expect("stat").ino()
        );
    }
    // Deleting each entry as it is listed: the listing neither skips a
    // survivor nor repeats anything (offsets stay valid as it changes).
    let mut deleted = 0;
    for e in fs::read_dir(&d).expect("read_dir") {
        fs::remove_file(e.expect("entry").path()).expect("unlink");
        deleted += 1;
    }
    assert_eq!(deleted, N);
    assert_eq!(fs::read_dir(&d).expect("read_dir").count(), 0);
    fs::remove_dir(&d).expect("rmdir");
    m.finish();
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn attributes_links_and_symlinks_round_trip() {
    require_fuse();
    let mut m = Mount::new("64M", &[]);
    let f = m.path("f");
    fs::write(&f, "data").expect("write");
    // chown clears set-user-ID (Linux does so even for root): chmod after.
    std::os::unix::fs::chown(&f, Some(1000), Some(1001)).expect("chown");
    fs::set_permissions(&f, fs::Permissions::from_mode(0o4751)).expect("chmod");
    let when = std::time::UNIX_EPOCH + std::time::Duration::new(1_000_000_000, 123_456_789);
    File::options()
        .write(true)
        .open(&f)
        .expect("open")
        .set_modified(when)
        .expect("utimens");
    fs::hard_link(&f, m.path("g")).expect("link");
    let target = "t".repeat(4095);
    std::os::unix::fs::symlink(&target, m.path("s")).expect("long symlink");
    m.umount();
    m.mount(&[]);
    let st = fs::metadata(&f).expect("stat");
    assert_eq!(st.mode() & 0o7777, 0o4751);
    assert_eq!((st.uid(), st.gid()), (1000, 1001));
    assert_eq!((st.mtime(), st.mtime_nsec()), (1_000_000_000, 123_456_789));
    assert_eq!(st.nlink(), 2);
    assert_eq!(fs::metadata(m.path("g")).expect("stat").ino(), st.ino());
    assert_eq!(fs::read_link(m.path("s")).expect("readlink").as_os_str().len(), 4095);
    let mut s = String::new();
    File::open(m.path("g"))
        .expect("open")
        .read_to_string(&mut s)
        .expect("read");
    assert_eq!(s, "data");
    m.finish();
}

/// A time before 1970 keeps its nanoseconds (stored and returned exactly,
/// as on tmpfs), across a remount; a rename sets the moved file's ctime.
#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn times_before_1970_are_exact_and_rename_sets_ctime() {
    require_fuse();
    let mut m = Mount::new("32M", &[]);
    let f = m.path("f");
    fs::write(&f, "x").expect("write");
    // 1960-05-01 12:00:00.123456789 UTC.
    let when = std::time::UNIX_EPOCH - std::time::Duration::new(305_812_799, 876_543_211);
    File::options()
        .write(true)
        .open(&f)
        .expect("open")
        .set_modified(when)
        .expect("utimens");
    let st = fs::metadata(&f).expect("stat");
    assert_eq!((st.mtime(), st.mtime_nsec()), (-305_812_800, 123_456_789));
    let before = (st.ctime(), st.ctime_nsec());
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs::rename(&f, m.path("g")).expect("rename");
    let st = fs::metadata(m.path("g")).expect("stat");
    assert!(
        (st.ctime(), st.ctime_nsec()) > before,
        "rename left ctime at {before:?}"
    );
    m.umount();
    m.mount(&[]);
    let st = fs::metadata(m.path("g")).expect("stat");
    assert_eq!((st.mtime(), st.mtime_nsec()), (-305_812_800, 123_456_789));
    m.finish();
}

/// /proc/mounts and `df -T` name the type `fuse.novafs`; a directory's
/// st_size and st_blocks are not 0.
#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn the_mount_is_typed_fuse_novafs_and_directories_have_a_size() {
    require_fuse();
    let m = Mount::new("32M", &[]);
    let line = mounts_line(&m);
    assert_eq!(line.split(' ').nth(2), Some("fuse.novafs"), "{line}");
    fs::create_dir(m.path("d")).expect("mkdir");
    let st = fs::metadata(m.path("d")).expect("stat");
    assert_eq!((st.size(), st.blocks()), (4096, 8));
    m.finish();
}

/// A removed directory that is still some process's working directory
/// lists as empty and takes no names; one still open answers fstat with
/// nlink 0 (xfstests generic/035). Once nothing holds them, their space
/// comes back.
#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn a_removed_directory_still_in_use_answers_like_tmpfs() {
    require_fuse();
    let m = Mount::new("32M", &[]);
    let free_before = free_blocks(&m.mnt);
    fs::create_dir(m.path("cwd")).expect("mkdir");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("cd cwd && rmdir ../cwd && ls -a . && stat -c %h . && ! touch new 2>/dev/null && echo refused")
        .current_dir(&m.mnt)
        .output()
        .expect("sh");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(text, "0\nrefused\n", "ls lists nothing, the link count is 0");
    fs::create_dir(m.path("open")).expect("mkdir");
    let dir = File::open(m.path("open")).expect("open the directory");
    fs::remove_dir(m.path("open")).expect("rmdir");
    assert_eq!(dir.metadata().expect("fstat").nlink(), 0);
    drop(dir);
    // The kernel's forget comes shortly after the last reference goes.
    let back = (0..50).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(20));
        free_blocks(&m.mnt) == free_before
    });
    assert!(back, "{} free, {free_before} before", free_blocks(&m.mnt));
    m.finish();
}

/// Root may mount with dev and suid (device nodes then work) and noexec
/// (programs then do not run); the defaults stay nodev,nosuid.
#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn root_may_mount_with_dev_suid_and_noexec() {
    require_fuse_root();
    let flags = |m: &Mount| mounts_line(m).split(' ').nth(3).expect("options").to_string();
    let mut m = Mount::new("32M", &[]);
    let defaults = flags(&m);
    assert!(defaults.contains("nosuid") && defaults.contains("nodev"), "{defaults}");
    m.umount();
    m.mount(&["dev,suid,noexec"]);
    let f = flags(&m);
    assert!(
        !f.contains("nosuid") && !f.contains("nodev") && f.contains("noexec"),
        "{f}"
    );
    // A device node opens the device: a copy of /dev/null.
    let null = cstr(&m.path("null"));
    // SAFETY: a valid path; makedev(1, 3) is /dev/null's number.
    check(unsafe { libc::mknod(null.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) }).expect("mknod");
    fs::write(m.path("null"), b"into the void").expect("write to the device");
    assert_eq!(fs::read(m.path("null")).expect("read the device"), b"");
    // noexec: a script with its execute bits does not run.
    fs::write(m.path("run.sh"), "#!/bin/sh\nexit 0\n").expect("write");
    fs::set_permissions(m.path("run.sh"), fs::Permissions::from_mode(0o755)).expect("chmod");
    let e = std::process::Command::new(m.path("run.sh"))
        .status()
        .expect_err("noexec");
    assert_eq!(e.raw_os_error(), Some(libc::EACCES));
    m.finish();
}

/// readdir(3) through the mount while every entry it returns is renamed
/// within the directory: the listing ends, each original name exactly
/// once, none of the new names (xfstests generic/736).
#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn a_listing_ends_while_its_entries_are_renamed() {
    require_fuse();
    let m = Mount::new("64M", &[]);
    fs::create_dir(m.path("d")).expect("mkdir");
    for i in 0..2000 {
        File::create(m.path(&format!("d/f{i}"))).expect("create");
    }
    let mut seen = Vec::new();
    for entry in fs::read_dir(m.path("d")).expect("opendir") {
        let name = entry.expect("readdir").file_name().into_string().expect("utf-8");
        assert!(name.starts_with('f'), "a renamed entry came back: {name}");
        fs::rename(m.path(&format!("d/{name}")), m.path(&format!("d/r{name}"))).expect("rename");
        seen.push(name);
        assert!(seen.len() <= 2000, "the listing goes on");
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 2000);
    m.finish();
}

/// fallocate FALLOC_FL_ZERO_RANGE through the mount: the range reads as
/// zeros, the bytes around it stay, and without KEEP_SIZE the file grows.
#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn zero_range_through_the_mount() {
    require_fuse();
    let m = Mount::new("32M", &[]);
    let data: Vec<u8> = (0..3 * 4096).map(|i| (i % 250) as u8 + 1).collect();
    fs::write(m.path("f"), &data).expect("write");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path("f"))
        .expect("open");
    fallocate(&f, libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE, 100, 5000).expect("zero range");
    fallocate(&f, libc::FALLOC_FL_ZERO_RANGE, 10_000, 10_000).expect("zero range past the end");
    drop(f);
    let mut want = data;
    want[100..5100].fill(0);
    want[10_000..].fill(0);
    want.resize(20_000, 0);
    assert_eq!(fs::read(m.path("f")).expect("read"), want);
    m.finish();
}

/// fallocate or a write by a user without CAP_FSETID clears set-ID bits
/// as on ext4 (xfstests generic/683 and 684, whose table this follows):
/// set-group-ID goes too unless the group may not execute and the mode
/// does not change otherwise; root's keeps them.
#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn fallocate_by_another_user_clears_set_id_bits() {
    require_fuse_root();
    let m = Mount::new("32M", &["allow_other"]);
    fs::set_permissions(m.dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    let f = m.path("f");
    let path = f.to_str().expect("utf-8");
    let mode = || fs::metadata(&f).expect("stat").mode() & 0o7777;
    // (mode before, who, fallocate's arguments, mode after)
    let cases: [(u32, bool, &[&str], u32); 8] = [
        (0o6666, true, &["-l", "128k"], 0o666),
        (0o6676, true, &["-p", "-o", "4096", "-l", "4096"], 0o676),
        (0o6766, true, &["-l", "128k"], 0o766),
        (0o2666, true, &["-p", "-o", "4096", "-l", "4096"], 0o2666),
        (0o2676, true, &["-l", "128k"], 0o676),
        (0o2766, true, &["-z", "-o", "0", "-l", "4096"], 0o2766),
        (0o6777, false, &["-l", "128k"], 0o6777),
        (0o6666, false, &["-p", "-o", "4096", "-l", "4096"], 0o6666),
    ];
    for (before, by_nobody, args, after) in cases {
        fs::write(&f, vec![b'X'; 64 << 10]).expect("write");
        fs::set_permissions(&f, fs::Permissions::from_mode(before)).expect("chmod");
        let mut argv = vec!["fallocate"];
        argv.extend_from_slice(args);
        argv.push(path);
        let out = if by_nobody {
            as_nobody(&argv)
        } else {
            run(Command::new(argv[0]).args(&argv[1..]))
        };
        assert!(
            out.status.success(),
            "{argv:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            mode(),
            after,
            "{before:o} by {}",
            if by_nobody { "nobody" } else { "root" }
        );
    }
    m.finish();
}

/// A file handle (name_to_handle_at) stays valid after the kernel drops
/// its caches and across a remount, and goes stale once the file is gone
/// (xfstests generic/426, 467, 477: export support).
#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn file_handles_survive_dropped_caches_and_remounts() {
    require_fuse_root();
    /// struct file_handle with room for the handle.
    #[repr(C)]
    struct Handle {
        bytes: libc::c_uint,
        kind: libc::c_int,
        data: [u8; 120],
    }
    let drop_caches = || fs::write("/proc/sys/vm/drop_caches", "2").expect("drop caches");
    let open_by = |m: &Mount, h: &mut Handle| -> io::Result<File> {
        let mnt = File::open(&m.mnt).expect("open the mount point");
        // O_CLOEXEC: a daemon that a parallel test spawns must not inherit
        // the descriptor, or this mount stays busy at umount.
        // SAFETY: `h` is a file_handle with its advertised room behind it.
        let fd = unsafe {
            libc::open_by_handle_at(
                mnt.as_raw_fd(),
                (h as *mut Handle).cast(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor just opened, owned by nobody else.
        Ok(unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) })
    };
    let mut m = Mount::new("32M", &[]);
    fs::create_dir(m.path("d")).expect("mkdir");
    fs::write(m.path("d/f"), b"by handle").expect("write");
    let mut handles = Vec::new();
    for path in ["d", "d/f"] {
        let mut h = Handle {
            bytes: 120,
            kind: 0,
            data: [0; 120],
        };
        let mut mount_id = 0;
        let name = cstr(&m.path(path));
        // SAFETY: a valid path and a handle buffer of the stated room.
        check(unsafe {
            libc::name_to_handle_at(
                libc::AT_FDCWD,
                name.as_ptr(),
                (&mut h as *mut Handle).cast(),
                &mut mount_id,
                0,
            )
        })
        .expect("name_to_handle_at");
        handles.push(h);
    }
    drop_caches();
    let read_f = |m: &Mount, h: &mut Handle| {
        let mut s = String::new();
        open_by(m, h)
            .expect("open by handle")
            .read_to_string(&mut s)
            .expect("read");
        s
    };
    assert_eq!(read_f(&m, &mut handles[1]), "by handle");
    assert!(open_by(&m, &mut handles[0])
        .expect("the directory")
        .metadata()
        .expect("fstat")
        .is_dir());
    m.umount();
    m.mount(&[]);
    assert_eq!(read_f(&m, &mut handles[1]), "by handle", "after a remount");
    fs::remove_file(m.path("d/f")).expect("rm");
    // The kernel's references keep the unlinked file until its FORGET,
    // which it sends after dropping the inode and which reaches novafs
    // asynchronously (README, "Opens cost no request"); a handle opened
    // before then takes a new reference, so drop caches again and retry.
    wait_until("the removed file's handle to go stale", Duration::from_secs(10), || {
        drop_caches();
        match open_by(&m, &mut handles[1]) {
            Ok(_) => false,
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "{e}");
                true
            }
        }
    });
    m.finish();
}

/// chattr through the mount (FS_IOC_SETFLAGS, as chattr(1) sends it):
/// +i stops writes, unlink and rename; +a lets only appends through;
/// lsattr (FS_IOC_GETFLAGS) reads them back after a remount.
#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn chattr_immutable_and_append_only_through_the_mount() {
    require_fuse_root();
    fn set_flags(p: &Path, flags: libc::c_int) -> io::Result<()> {
        let f = File::open(p)?;
        // SAFETY: an open descriptor and a pointer to an int, as the
        // ioctl takes.
        check(unsafe { libc::ioctl(f.as_raw_fd(), libc::FS_IOC_SETFLAGS, &flags) })
    }
    fn get_flags(p: &Path) -> libc::c_int {
        let f = File::open(p).expect("open");
        let mut flags: libc::c_int = 0;
        // SAFETY: as above, the int written to.
        check(unsafe { libc::ioctl(f.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) }).expect("FS_IOC_GETFLAGS");
        flags
    }
    let (immutable, append) = (0x10, 0x20);
    // With open_checks the open itself is refused, as on ext4; by default
    // opens reach novafs no more, and the first write is refused instead.
    let checked = Mount::new("32M", &["open_checks"]);
    let f = checked.path("f");
    fs::write(&f, "abc").expect("write");
    set_flags(&f, immutable).expect("chattr +i");
    assert_eq!(errno(OpenOptions::new().append(true).open(&f)), libc::EPERM);
    checked.finish();
    let mut m = Mount::new("32M", &[]);
    let f = m.path("f");
    fs::write(&f, "abc").expect("write");
    set_flags(&f, immutable).expect("chattr +i");
    let mut opened = OpenOptions::new()
        .append(true)
        .open(&f)
        .expect("open without a request");
    assert_eq!(errno(opened.write_all(b"x")), libc::EPERM);
    drop(opened);
    assert_eq!(fs::read(&f).expect("read"), b"abc");
    assert_eq!(errno(fs::remove_file(&f)), libc::EPERM);
    assert_eq!(errno(fs::rename(&f, m.path("g"))), libc::EPERM);
    set_flags(&f, append).expect("chattr -i +a");
    OpenOptions::new()
        .append(true)
        .open(&f)
        .expect("open to append")
        .write_all(b"def")
        .expect("append");
    assert_eq!(errno(fs::write(&f, "x")), libc::EPERM, "truncating");
    // Times may be set to now (touch), not to another value (xfstests
    // generic/079); on an immutable file neither.
    let utimens = |times: Option<[libc::timespec; 2]>| {
        let c = cstr(&f);
        let ptr = times.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
        // SAFETY: a NUL-terminated path and null or two timespecs.
        check(unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), ptr, 0) })
    };
    utimens(None).expect("touch an append-only file");
    let past = libc::timespec { tv_sec: 1, tv_nsec: 0 };
    assert_eq!(errno(utimens(Some([past, past]))), libc::EPERM);
    assert_eq!(errno(set_flags(&f, 0x4000)), libc::EOPNOTSUPP);
    m.umount();
    m.mount(&[]);
    assert_eq!(get_flags(&f), append);
    assert_eq!(fs::read(&f).expect("read"), b"abcdef");
    set_flags(&f, 0).expect("chattr -a");
    fs::remove_file(&f).expect("rm");
    m.finish();
}
