//! Damaged metadata seen through the FUSE mount (Fortis §4.2): a damaged
//! primary reads from its replica and is repaired, both copies damaged is
//! EIO for that file only, and what happened reaches the daemon log,
//! `novafs info` (counters since mkfs) and `novafs fsck`, while statfs goes
//! on as before.
#![allow(clippy::unwrap_used)]

mod fuse_common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use fuse_common::{novafs, ok, require_fuse, run, Mount};

/// Everything the daemons of this test's mounts logged.
fn daemon_logs(m: &Mount) -> String {
    let run_dir = m.dir.path().join("run");
    let mut all = String::new();
    for e in fs::read_dir(run_dir).expect("run dir").flatten() {
        if e.path().extension().is_some_and(|x| x == "log") {
            all.push_str(&fs::read_to_string(e.path()).unwrap_or_default());
        }
    }
    all
}

fn info(image: &Path) -> String {
    ok(novafs(["info"]).arg(image))
}

/// Total blocks and inodes as statfs reports them.
fn statfs_blocks(p: &Path) -> (u64, u64) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a statvfs buffer we own.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut s) }, 0, "statvfs");
    (s.f_blocks, s.f_files)
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn damaged_metadata_through_fuse_is_repaired_or_eio_for_that_file_only() {
    require_fuse();
    let mut m = Mount::new("64M", &[]);
    let a_data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
    fs::write(m.path("a"), &a_data).unwrap();
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("d/b"), b"still here").unwrap();
    let a = fs::metadata(m.path("a")).unwrap().ino().to_string();
    let statfs_before = statfs_blocks(&m.mnt);
    m.umount();

    // The primary of a's log damaged: read from the replica and repaired.
    let image = m.image.clone();
    let inject = |which: &str| {
        ok(novafs([
            "inject", "--target", "log-page", "--which", which, "--ino", &a, "--bytes", "4096",
        ])
        .arg(&image))
    };
    inject("primary");
    m.mount(&[]);
    assert_eq!(fs::read(m.path("a")).unwrap(), a_data);
    assert_eq!(statfs_blocks(&m.mnt), statfs_before);
    m.umount();
    assert!(
        daemon_logs(&m).contains("metadata repaired from its replica"),
        "{}",
        daemon_logs(&m)
    );
    let shown = info(&m.image);
    assert!(
        shown.contains("repaired from a replica, 0 data strip(s) repaired, 0 object(s) lost since mkfs"),
        "{shown}"
    );
    assert!(m.fsck().contains("clean"));

    // Both copies damaged: a is EIO, everything else reads, statfs works.
    inject("both");
    m.mount(&[]);
    let err = fs::read(m.path("a")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert_eq!(fs::read(m.path("d/b")).unwrap(), b"still here");
    let names: Vec<_> = fs::read_dir(&m.mnt).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "the root still names a: {names:?}");
    assert_eq!(statfs_blocks(&m.mnt), statfs_before);
    m.umount();
    assert!(daemon_logs(&m).contains("metadata lost"), "{}", daemon_logs(&m));
    let shown = info(&m.image);
    assert!(
        shown.contains(&format!("1 object(s) lost since mkfs (last: inode {a},")),
        "{shown}"
    );
    let check = run(novafs(["fsck"]).arg(&m.image));
    assert_eq!(check.status.code(), Some(1));
    let out = String::from_utf8_lossy(&check.stdout);
    assert!(out.contains(&format!("inode {a}: ")), "{out}");
    assert!(out.contains("1 object(s) lost since mkfs"), "{out}");

    // fsck --repair removes what cannot be read; the rest stays.
    let repair = run(novafs(["fsck", "--repair"]).arg(&m.image));
    assert_eq!(
        repair.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&repair.stdout)
    );
    m.mount(&[]);
    assert!(!m.path("a").exists());
    assert_eq!(fs::read(m.path("d/b")).unwrap(), b"still here");
    m.finish();
}

/// Bytes of a mounted image damaged behind the file system's back (as a
/// stray store or a media fault would): `novafs scrub MOUNTPOINT` finds
/// and repairs them while the mount stays in use, and a page beyond
/// repair makes it exit 1 naming the file.
#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn scrub_of_a_mount_point_repairs_damage_made_while_mounted() {
    require_fuse();
    use std::io::{Seek, SeekFrom, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let mut m = Mount::new("64M", &[]);
    let marker = b"SCRUB-ME-MARKER-0123456789";
    let mut data = marker.to_vec();
    data.resize(3 * 4096, b'x');
    fs::write(m.path("f"), &data).unwrap();
    let ino = fs::metadata(m.path("f")).unwrap().ino();
    // Where the marker lies in the image (data pages are written whole).
    let image = fs::read(&m.image).unwrap();
    let at = image.windows(marker.len()).position(|w| w == marker).unwrap() as u64;
    let img = fs::OpenOptions::new().write(true).open(&m.image).unwrap();
    img.write_all_at(b"scribble", at + 40).unwrap();
    let out = run(&mut m.novafs(&["scrub", m.mnt.to_str().unwrap()]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("repaired 0 metadata range(s) and 1 data strip(s)"),
        "{text}"
    );
    assert!(text.contains("nothing left damaged"), "{text}");
    assert_eq!(fs::read(m.path("f")).unwrap(), data, "repaired on the media");
    // Two strips of the page: beyond parity.
    let mut img = img;
    img.seek(SeekFrom::Start(at)).unwrap();
    img.write_all(&[0xEE; 1500]).unwrap();
    drop(img);
    let out = run(&mut m.novafs(&["scrub", "--rate", "1M", m.mnt.to_str().unwrap()]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "DAMAGED: /f (inode {ino}): bytes 0..4096 read EIO until rewritten ("
        )),
        "{text}"
    );
    assert!(
        text.contains("1 object(s) damaged beyond repair: restore the byte ranges listed from a snapshot or a backup"),
        "{text}"
    );
    // The kernel still caches the pages read above: drop them first.
    let f = fs::File::open(m.path("f")).unwrap();
    // SAFETY: an open descriptor; advice only.
    assert_eq!(
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) },
        0
    );
    drop(f);
    let err = fs::read(m.path("f")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    m.umount();
    // Offline the same: exit 1, the rest of the tree fine.
    let out = run(novafs(["scrub"]).arg(&m.image));
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
}

/// A fresh mount with file `a` holding `data` and file `b` holding
/// "untouched", after `novafs inject` (with `inject`, and `--poison` when
/// asked) changed something of `a` while it was unmounted.
fn damaged(data: &[u8], inject: &[&str], poison: bool) -> Mount {
    let mut m = Mount::new("32M", &[]);
    fs::write(m.path("a"), data).unwrap();
    fs::write(m.path("b"), b"untouched").unwrap();
    let a = fs::metadata(m.path("a")).unwrap().ino().to_string();
    m.umount();
    let mut cmd = novafs(["inject", "--ino", &a]);
    cmd.args(inject);
    if poison {
        cmd.arg("--poison");
    }
    ok(cmd.arg(&m.image));
    m.mount(&[]);
    m
}

/// Every metadata structure of a file (record, log entry, log page), each
/// copy and both, damaged or poisoned, seen through FUSE on a fresh
/// mount: one copy is read around, both make that file an error (EIO; a
/// record whose valid bit is hit reads as gone) and nothing else changes.
#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn each_structure_and_copy_damaged_or_poisoned_through_fuse() {
    require_fuse();
    let data: Vec<u8> = (0..6000u32).map(|i| (i % 241) as u8).collect();
    for target in ["inode", "log-entry", "log-page"] {
        for (which, poison) in [
            ("primary", false),
            ("replica", false),
            ("both", false),
            ("primary", true),
            ("both", true),
        ] {
            let why = format!("{target} {which}{}", if poison { " poisoned" } else { "" });
            // A whole log page: a few bytes of one may lie past the tail.
            let bytes = if target == "log-page" { "4096" } else { "16" };
            let mut m = damaged(&data, &["--target", target, "--which", which, "--bytes", bytes], poison);
            match fs::read(m.path("a")) {
                Ok(got) => assert!(which != "both" && got == data, "{why}"),
                Err(e) => {
                    let errno = e.raw_os_error();
                    let gone = target == "inode" && errno == Some(libc::ENOENT);
                    assert!(which == "both" && (errno == Some(libc::EIO) || gone), "{why}: {e}");
                }
            }
            assert_eq!(fs::read(m.path("b")).unwrap(), b"untouched", "{why}");
            m.umount();
        }
    }
}

/// File data damaged through each of its protections, seen through FUSE
/// on a fresh mount (Fortis §4.3): one strip (changed or poisoned), one
/// checksum copy or the parity is read around and the file reads back
/// whole; two strips of a page, or both checksum copies of a strip, make
/// that file EIO; another file is untouched either way.
#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn each_data_protection_damaged_or_poisoned_through_fuse() {
    require_fuse();
    let data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
    for (target, which, bytes, poison, readable) in [
        ("data-page", "primary", "1", false, true),
        ("data-page", "primary", "1", true, true),
        ("data-checksums", "primary", "4", false, true),
        ("data-checksums", "replica", "4", false, true),
        ("parity", "primary", "16", false, true),
        ("data-page", "primary", "600", false, false),
        ("data-checksums", "both", "4", false, false),
    ] {
        let why = format!(
            "{target} {which} {bytes} bytes{}",
            if poison { " poisoned" } else { "" }
        );
        let mut m = damaged(&data, &["--target", target, "--which", which, "--bytes", bytes], poison);
        match fs::read(m.path("a")) {
            Ok(got) => assert!(readable && got == data, "{why}: read back different bytes"),
            Err(e) => assert!(!readable && e.raw_os_error() == Some(libc::EIO), "{why}: {e}"),
        }
        assert_eq!(fs::read(m.path("b")).unwrap(), b"untouched", "{why}");
        m.umount();
    }
}

/// Both copies of a file's inode record damaged: the name stays. `ls`
/// lists it, stat and open answer EIO (not ENOENT: a program must tell a
/// lost file from one that never was), `rm` removes it, and the rest of
/// the directory is untouched.
#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn a_lost_inode_keeps_its_name_through_fuse_and_stat_answers_eio() {
    require_fuse();
    let mut m = Mount::new("64M", &[]);
    fs::write(m.path("lost"), b"gone").unwrap();
    fs::write(m.path("kept"), b"still here").unwrap();
    let ino = fs::metadata(m.path("lost")).unwrap().ino().to_string();
    m.umount();
    ok(novafs([
        "inject", "--target", "inode", "--which", "both", "--ino", &ino, "--bytes", "128",
    ])
    .arg(&m.image));
    m.mount(&[]);
    let ls = ok(std::process::Command::new("ls").arg("-1").arg(&m.mnt));
    assert_eq!(ls, "kept\nlost\n");
    for err in [
        fs::symlink_metadata(m.path("lost")).unwrap_err(),
        fs::File::open(m.path("lost")).unwrap_err(),
    ] {
        assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    }
    // Listed again (the kernel may have cached the first listing's entry).
    let ls = ok(std::process::Command::new("ls").arg("-1").arg(&m.mnt));
    assert_eq!(ls, "kept\nlost\n");
    assert_eq!(fs::read(m.path("kept")).unwrap(), b"still here");
    fs::remove_file(m.path("lost")).unwrap();
    let ls = ok(std::process::Command::new("ls").arg("-1").arg(&m.mnt));
    assert_eq!(ls, "kept\n");
    m.umount();
    // What the lost inode held is found by no one until fsck's repair
    // rebuilds free space.
    let check = run(novafs(["fsck"]).arg(&m.image));
    let out = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(1), "{out}");
    assert!(out.contains("leaked"), "{out}");
    assert!(!out.contains("points to missing inode"), "{out}");
}
