//! Extended attributes, POSIX ACLs, the umask, access times and whiteouts
//! through a FUSE mount, with the programs people use on them: setfattr,
//! getfattr, setfacl, getfacl, cp -a, rsync -X, tar --xattrs, overlayfs.

mod fuse_common;

use std::fs;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::thread::sleep;
use std::time::Duration;

use fuse_common::{as_nobody, ok, require_fuse, require_fuse_root, run, shm_dir, Mount};

/// setfattr's base64 form of a value ("0s..."): short enough that 64 KiB
/// fits one argument (a single one may not pass 128 KiB).
fn encoded(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::from("0s");
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                s.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

fn value(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
        .collect()
}

fn setfattr(path: &Path, name: &str, v: &[u8]) -> std::process::Output {
    run(Command::new("setfattr")
        .args(["-h", "-n", name, "-v", &encoded(v)])
        .arg(path))
}

/// getfattr's value of `name`, raw.
fn getfattr(path: &Path, name: &str) -> Vec<u8> {
    let out = run(Command::new("getfattr")
        .args(["-h", "--only-values", "-n", name])
        .arg(path));
    assert!(
        out.status.success(),
        "getfattr {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Asserts the command failed with `message` (strerror's text).
fn fails_with(out: std::process::Output, message: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains(message),
        "want {message:?}, got {err:?}"
    );
}

/// Every name and value under `root` as getfattr dumps them, paths
/// relative to `root`.
fn dump(root: &Path) -> String {
    let out = ok(Command::new("getfattr")
        .args(["-R", "-d", "-m", "-", "-e", "hex", "."])
        .current_dir(root));
    let mut blocks: Vec<&str> = out.split("\n\n").map(str::trim).filter(|b| !b.is_empty()).collect();
    blocks.sort();
    blocks.join("\n\n")
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn xattrs_of_every_namespace_round_trip_and_fail_as_on_linux() {
    require_fuse();
    let mut m = Mount::new("256M", &[]);
    let f = m.path("f");
    fs::write(&f, b"data").unwrap();
    fs::create_dir(m.path("d")).unwrap();
    std::os::unix::fs::symlink("f", m.path("l")).unwrap();
    let cases: Vec<(&Path, &str, Vec<u8>)> = vec![
        (&f, "user.small", value(1, 100)),
        (&f, "user.pages", value(2, 60_000)),
        (&f, "trusted.t", value(3, 900)),
        (&f, "security.s", value(4, 30)),
    ];
    let d = m.path("d");
    let l = m.path("l");
    let more: Vec<(&Path, &str, Vec<u8>)> = vec![(&d, "user.dir", value(5, 5000)), (&l, "trusted.link", value(6, 7))];
    for (p, name, v) in cases.iter().chain(&more) {
        let out = setfattr(p, name, v);
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
    }
    ok(Command::new("setfattr").args(["-n", "user.empty"]).arg(&f));
    let check = |m: &Mount| {
        for (p, name, v) in cases.iter().chain(&more) {
            assert!(getfattr(p, name) == *v, "{name} reads back whole");
        }
        assert_eq!(getfattr(&m.path("f"), "user.empty"), b"");
        let names = ok(Command::new("getfattr")
            .args(["-d", "-m", "-", "--absolute-names"])
            .arg(m.path("f")));
        let names: Vec<&str> = names
            .lines()
            .filter_map(|l| l.split('=').next().filter(|n| n.contains('.')))
            .collect();
        assert_eq!(
            names,
            ["security.s", "trusted.t", "user.empty", "user.pages", "user.small"]
        );
    };
    check(&m);
    // What Linux answers, through strerror.
    fails_with(
        run(Command::new("getfattr").args(["-n", "user.none"]).arg(&f)),
        "No such attribute",
    );
    fails_with(
        run(Command::new("setfattr").args(["-x", "user.none"]).arg(&f)),
        "No such attribute",
    );
    fails_with(setfattr(&f, "user.huge", &value(7, 65_537)), "Argument list too long");
    fails_with(
        setfattr(&f, &format!("user.{}", "n".repeat(251)), b"x"),
        "Numerical result out of range",
    );
    fails_with(setfattr(&f, "foo.bar", b"x"), "Operation not supported");
    fails_with(setfattr(&l, "user.a", b"x"), "Operation not permitted");
    ok(Command::new("setfattr").args(["-x", "user.small"]).arg(&f));
    fails_with(
        run(Command::new("getfattr").args(["-n", "user.small"]).arg(&f)),
        "No such attribute",
    );
    ok(Command::new("setfattr")
        .args(["-n", "user.small", "-v", &encoded(&value(1, 100))])
        .arg(&f));
    m.umount();
    m.mount(&[]);
    check(&m);
    m.finish();
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn cp_rsync_and_tar_keep_xattrs_both_ways() {
    require_fuse();
    let src = shm_dir();
    let tree = src.path().join("tree");
    fs::create_dir_all(tree.join("sub")).unwrap();
    fs::write(tree.join("a"), b"aaa").unwrap();
    fs::write(tree.join("sub/b"), value(9, 10_000)).unwrap();
    for (p, name, v) in [
        ("a", "user.one", value(1, 10)),
        ("a", "user.two", value(2, 3000)),
        ("sub", "user.dir", value(3, 5)),
        ("sub/b", "user.x", value(4, 1)),
    ] {
        let out = setfattr(&tree.join(p), name, &v);
        if !out.status.success() {
            eprintln!("skipped: /dev/shm takes no user xattrs here");
            return;
        }
    }
    let want = dump(&tree);
    assert!(want.contains("user.two=0x"), "{want}");
    let m = Mount::new("256M", &[]);
    ok(Command::new("cp").arg("-a").arg(&tree).arg(m.path("cp")));
    assert_eq!(dump(&m.path("cp")), want, "cp -a into the mount");
    ok(Command::new("rsync")
        .arg("-aX")
        .arg(format!("{}/", tree.display()))
        .arg(m.path("rsync")));
    assert_eq!(dump(&m.path("rsync")), want, "rsync -aX into the mount");
    let archive = m.path("tree.tar");
    ok(Command::new("tar")
        .args(["--xattrs", "--xattrs-include=*", "-cf"])
        .arg(&archive)
        .arg("-C")
        .arg(m.path("rsync"))
        .arg("."));
    let back = shm_dir();
    ok(Command::new("tar")
        .args(["--xattrs", "--xattrs-include=*", "-xf"])
        .arg(&archive)
        .arg("-C")
        .arg(back.path()));
    assert_eq!(dump(back.path()), want, "tar --xattrs out of the mount");
    let out = shm_dir();
    ok(Command::new("rsync")
        .arg("-aX")
        .arg(format!("{}/", m.path("cp").display()))
        .arg(out.path()));
    assert_eq!(dump(out.path()), want, "rsync -aX out of the mount");
    m.finish();
}

fn getfacl(path: &Path) -> String {
    ok(Command::new("getfacl").args(["-c", "-E"]).arg(path))
        .trim_end()
        .to_string()
        + "\n"
}

#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn acls_grant_deny_inherit_and_follow_chmod() {
    require_fuse_root();
    let m = Mount::new("256M", &["allow_other"]);
    // Let another user reach the mount point.
    fs::set_permissions(m.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let secret = m.path("secret");
    fs::write(&secret, b"hidden\n").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    let path = secret.to_str().unwrap();
    fails_with(as_nobody(&["cat", path]), "Permission denied");
    ok(Command::new("setfacl").args(["-m", "u:nobody:r"]).arg(&secret));
    assert_eq!(
        getfacl(&secret),
        "user::rw-\nuser:nobody:r--\ngroup::---\nmask::r--\nother::---\n"
    );
    assert_eq!(
        fs::metadata(&secret).unwrap().mode() & 0o777,
        0o640,
        "the mask is the group bits"
    );
    assert_eq!(as_nobody(&["cat", path]).stdout, b"hidden\n");
    // chmod moves the mask, and with it what nobody may do.
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        getfacl(&secret),
        "user::rw-\nuser:nobody:r--\ngroup::---\nmask::---\nother::---\n"
    );
    fails_with(as_nobody(&["cat", path]), "Permission denied");
    ok(Command::new("setfacl").args(["-x", "u:nobody"]).arg(&secret));
    // A default ACL: new files and directories inherit it, the umask
    // gives way, and a new directory passes it on.
    let d = m.path("d");
    fs::create_dir(&d).unwrap();
    ok(Command::new("setfacl").args(["-d", "-m", "u:nobody:rwx"]).arg(&d));
    ok(Command::new("sh")
        .arg("-c")
        .arg("umask 022 && touch f && mkdir sub && touch sub/g")
        .current_dir(&d));
    assert_eq!(
        getfacl(&d.join("f")),
        "user::rw-\nuser:nobody:rwx\ngroup::r-x\nmask::rw-\nother::r--\n"
    );
    assert_eq!(fs::metadata(d.join("f")).unwrap().mode() & 0o777, 0o664);
    let sub = getfacl(&d.join("sub"));
    assert!(sub.contains("default:user:nobody:rwx"), "{sub}");
    assert_eq!(fs::metadata(d.join("sub")).unwrap().mode() & 0o777, 0o775);
    assert!(getfacl(&d.join("sub/g")).contains("user:nobody:rwx"));
    let wrote = as_nobody(&["sh", "-c", &format!("echo by-nobody >> {}/f", d.display())]);
    assert!(wrote.status.success(), "the inherited ACL lets nobody write: {wrote:?}");
    m.finish();
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn the_umask_applies_where_no_default_acl_is() {
    require_fuse();
    let m = Mount::new("256M", &[]);
    ok(Command::new("sh")
        .arg("-c")
        .arg("umask 022 && touch a && mkdir b && umask 077 && touch c && mkdir e")
        .current_dir(&m.mnt));
    let mode = |n: &str| fs::metadata(m.path(n)).unwrap().mode() & 0o777;
    assert_eq!(
        (mode("a"), mode("b"), mode("c"), mode("e")),
        (0o644, 0o755, 0o600, 0o700)
    );
    m.finish();
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn access_times_follow_relatime_noatime_and_strictatime() {
    require_fuse();
    let mut m = Mount::new("256M", &[]);
    let f = m.path("f");
    let atime = |f: &Path| {
        let md = fs::metadata(f).unwrap();
        (md.atime(), md.atime_nsec(), md.mtime(), md.mtime_nsec())
    };
    // Reads served from the kernel's page cache never reach novafs (README,
    // "Access times"): the file's pages are dropped so that this one does.
    let read_through = |f: &Path| {
        let file = fs::File::open(f).unwrap();
        // SAFETY: a descriptor owned by `file`, no pointers.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0, "fadvise");
        io::Read::read_to_end(&mut &file, &mut Vec::new()).unwrap();
    };
    fs::write(&f, b"data").unwrap();
    let (a0, a0n, m0, m0n) = atime(&f);
    sleep(Duration::from_millis(20));
    read_through(&f);
    let (a1, a1n, _, _) = atime(&f);
    assert!(
        (a1, a1n) > (m0, m0n) && (a1, a1n) > (a0, a0n),
        "relatime: the first read after a write"
    );
    sleep(Duration::from_millis(20));
    read_through(&f);
    let again = atime(&f);
    assert_eq!((again.0, again.1), (a1, a1n), "relatime: not again until a change");
    let mounts = fs::read_to_string("/proc/mounts").unwrap();
    if nix::unistd::geteuid().is_root() {
        let line = mounts.lines().find(|l| l.contains(m.mnt.to_str().unwrap())).unwrap();
        assert!(line.contains("relatime"), "{line}");
    }
    m.umount();
    m.mount(&["noatime"]);
    fs::write(&f, b"more").unwrap();
    let before = atime(&f);
    fs::read(&f).unwrap();
    assert_eq!(atime(&f), before, "noatime");
    m.umount();
    // With every open sent to novafs, an open drops the pages when a read
    // must update the access time: no help needed.
    m.mount(&["open_checks"]);
    fs::write(&f, b"again").unwrap();
    let (_, _, m2, m2n) = atime(&f);
    sleep(Duration::from_millis(20));
    fs::read(&f).unwrap();
    let (a3, a3n, _, _) = atime(&f);
    assert!(
        (a3, a3n) > (m2, m2n),
        "relatime with open_checks: the first read after a write"
    );
    m.umount();
    m.mount(&["strictatime"]);
    let mut last = atime(&f);
    for _ in 0..2 {
        sleep(Duration::from_millis(20));
        // A new open: the read reaches novafs.
        fs::read(&f).unwrap();
        let now = atime(&f);
        assert!((now.0, now.1) > (last.0, last.1), "strictatime: every read");
        last = now;
    }
    m.finish();
}

#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn overlayfs_with_its_upper_layer_on_novafs_whites_out_deleted_files() {
    require_fuse_root();
    let m = Mount::new("256M", &[]);
    let lower = shm_dir();
    fs::write(lower.path().join("keep"), b"lower\n").unwrap();
    fs::write(lower.path().join("gone"), b"lower\n").unwrap();
    for d in ["up", "work"] {
        fs::create_dir(m.path(d)).unwrap();
    }
    let merged = shm_dir();
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.path().display(),
        m.path("up").display(),
        m.path("work").display()
    );
    let mounted = run(Command::new("mount")
        .args(["-t", "overlay", "overlay", "-o", &opts])
        .arg(merged.path()));
    if !mounted.status.success() {
        eprintln!(
            "skipped: overlayfs unavailable: {}",
            String::from_utf8_lossy(&mounted.stderr)
        );
        m.finish();
        return;
    }
    fs::remove_file(merged.path().join("gone")).unwrap();
    fs::write(merged.path().join("new"), b"upper\n").unwrap();
    let mut names: Vec<String> = fs::read_dir(merged.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    ok(Command::new("umount").arg(merged.path()));
    assert_eq!(names, ["keep", "new"]);
    // The whiteout overlayfs left in the upper layer: a 0:0 device.
    let w = fs::symlink_metadata(m.path("up/gone")).unwrap();
    assert_eq!((w.mode() & libc::S_IFMT, w.rdev()), (libc::S_IFCHR, 0));
    let xattrs = ok(Command::new("getfattr")
        .args(["-d", "-m", "trusted.overlay"])
        .arg(m.path("up")));
    assert!(xattrs.contains("trusted.overlay."), "{xattrs}");
    m.finish();
}

/// Setting an access ACL as the owner, outside the file's group, drops
/// set-group-ID as chmod would (xfstests generic/375); root keeps it.
#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn setfacl_outside_the_group_drops_set_group_id() {
    require_fuse_root();
    let m = Mount::new("32M", &["allow_other"]);
    fs::set_permissions(m.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    for (name, by_nobody, want) in [("mine", true, 0o775), ("roots", false, 0o2775)] {
        let f = m.path(name);
        fs::write(&f, "x").unwrap();
        std::os::unix::fs::chown(&f, Some(65534), Some(0)).unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(0o2775)).unwrap();
        let path = f.to_str().unwrap();
        let args = ["setfacl", "-m", "u:0:r--", path];
        let out = if by_nobody {
            as_nobody(&args)
        } else {
            run(Command::new(args[0]).args(&args[1..]))
        };
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(fs::metadata(&f).unwrap().mode() & 0o7777, want, "{name}");
    }
    m.finish();
}

/// A write or a fallocate by a user without CAP_FSETID clears set-user-ID
/// (novafs does it: FUSE_HANDLE_KILLPRIV_V2), and the very next stat shows
/// it, though neither reply carries attributes (xfstests generic/355, 683,
/// 685). Root's own write keeps the bit.
#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn writes_by_others_clear_set_user_id_and_stat_shows_it_at_once() {
    require_fuse_root();
    let m = Mount::new("64M", &["allow_other"]);
    fs::set_permissions(m.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    // As stat(1) asks (statx for the mode alone: what the kernel has
    // cached answers it).
    let mode = |p: &Path| {
        let out = run(Command::new("stat").args(["-c", "%a"]).arg(p));
        u32::from_str_radix(String::from_utf8_lossy(&out.stdout).trim(), 8).expect("an octal mode")
    };
    let f = m.path("f");
    fs::write(&f, b"data").unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o4666)).unwrap();
    fs::OpenOptions::new()
        .append(true)
        .open(&f)
        .unwrap()
        .write_all(b"root")
        .unwrap();
    assert_eq!(mode(&f), 0o4666, "root keeps set-user-ID");
    let path = f.to_str().unwrap();
    let out = as_nobody(&["sh", "-c", &format!("printf more >> {path}")]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(mode(&f), 0o666, "a write by nobody");
    fs::set_permissions(&f, fs::Permissions::from_mode(0o4666)).unwrap();
    assert_eq!(mode(&f), 0o4666);
    // Inside the file: the size does not change, so the kernel keeps its
    // cached attributes unless novafs drops them.
    fs::write(&f, vec![7u8; 192 << 10]).unwrap();
    assert_eq!(mode(&f), 0o4666);
    let out = as_nobody(&["fallocate", "-o", "65536", "-l", "65536", path]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(mode(&f), 0o666, "a fallocate by nobody");
    assert_eq!(fs::read(&f).unwrap(), vec![7u8; 192 << 10]);
    m.finish();
}
