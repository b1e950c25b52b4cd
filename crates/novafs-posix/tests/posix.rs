//! The POSIX layer's own rules, on a file system in memory: path
//! resolution, descriptors and their shared offsets, and the checks made
//! for a caller who is not root. (tests/c/abi.c in novafs-capi drives the
//! same calls from C.)

use std::sync::Arc;

use novafs::{Caps, Cred, FileType, Fs};
use novafs_posix::{At, Errno, Posix, Target};
use pm::{MemRegion, Region};

fn fs() -> Arc<Fs> {
    let region: Arc<dyn Region> = Arc::new(MemRegion::new(32 << 20));
    Fs::format(region.clone(), &novafs::FormatOptions::default().shards(2)).expect("format");
    Arc::new(Fs::open(region, novafs::MountOptions::default()).expect("mount"))
}

fn root(fs: &Arc<Fs>) -> Posix {
    Posix::new(fs.clone(), Cred::root(), 0o022)
}

const RW_CREATE: i32 = libc::O_CREAT | libc::O_RDWR;

#[track_caller]
fn errno<T: std::fmt::Debug>(r: Result<T, Errno>) -> i32 {
    r.expect_err("an error").0
}

fn path(p: &[u8]) -> Target<'_> {
    Target::Path {
        at: At::Cwd,
        path: p,
        follow: true,
    }
}

#[test]
fn paths_resolve_as_namei_does() {
    let fs = fs();
    let p = root(&fs);
    p.mkdir(At::Cwd, b"/a", 0o755).expect("mkdir");
    p.mkdir(At::Cwd, b"/a/b", 0o755).expect("mkdir");
    let fd = p.open(At::Cwd, b"/a/b/f", RW_CREATE, 0o644).expect("create");
    p.write(fd, b"data").expect("write");
    // `.`, `..`, repeated slashes, and the root's `..` is the root.
    for name in [&b"/a/./b/f"[..], b"//a//b/../b/f", b"/../../a/b/f", b"a/b/f"] {
        assert_eq!(
            p.stat(path(name)).expect("stat").size,
            4,
            "{}",
            String::from_utf8_lossy(name)
        );
    }
    // A trailing slash asks for a directory.
    assert_eq!(errno(p.stat(path(b"/a/b/f/"))), libc::ENOTDIR);
    assert_eq!(p.stat(path(b"/a/b/")).expect("dir").kind, FileType::Directory);
    // Symbolic links: relative to their directory, absolute, chained; the
    // last one followed or not as asked.
    p.symlink(b"b/f", At::Cwd, b"/a/rel").expect("symlink");
    p.symlink(b"/a/rel", At::Cwd, b"/abs").expect("symlink");
    p.symlink(b"a/b", At::Cwd, b"/dirlink").expect("symlink");
    assert_eq!(p.stat(path(b"/abs")).expect("through two links").size, 4);
    assert_eq!(p.stat(path(b"/dirlink/f")).expect("through a directory link").size, 4);
    let nofollow = Target::Path {
        at: At::Cwd,
        path: b"/abs",
        follow: false,
    };
    assert_eq!(p.stat(nofollow).expect("the link").kind, FileType::Symlink);
    assert_eq!(
        errno(p.open(At::Cwd, b"/abs", libc::O_RDONLY | libc::O_NOFOLLOW, 0)),
        libc::ELOOP
    );
    // A loop, and a chain longer than 40.
    p.symlink(b"/loop", At::Cwd, b"/loop").expect("symlink");
    assert_eq!(errno(p.stat(path(b"/loop"))), libc::ELOOP);
    p.symlink(b"/a/b/f", At::Cwd, b"/l0").expect("symlink");
    for i in 1..=41 {
        let (from, to) = (format!("/l{}", i - 1), format!("/l{i}"));
        p.symlink(from.as_bytes(), At::Cwd, to.as_bytes()).expect("symlink");
    }
    assert_eq!(p.stat(path(b"/l39")).expect("40 links").size, 4);
    assert_eq!(errno(p.stat(path(b"/l40"))), libc::ELOOP);
    // O_CREAT through a dangling link makes its target.
    p.symlink(b"/a/made", At::Cwd, b"/dangling").expect("symlink");
    let fd2 = p
        .open(At::Cwd, b"/dangling", RW_CREATE, 0o600)
        .expect("create through link");
    p.close(fd2).expect("close");
    assert_eq!(p.stat(path(b"/a/made")).expect("made").kind, FileType::RegularFile);
    // O_CREAT|O_EXCL never follows.
    assert_eq!(
        errno(p.open(At::Cwd, b"/abs", RW_CREATE | libc::O_EXCL, 0o600)),
        libc::EEXIST
    );
    // Relative to an open directory and to the working directory.
    let dir = p
        .open(At::Cwd, b"/a", libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .expect("opendir");
    assert_eq!(
        p.stat(Target::Path {
            at: At::Fd(dir),
            path: b"b/f",
            follow: true
        })
        .expect("at")
        .size,
        4
    );
    assert_eq!(errno(p.open(At::Fd(fd), b"x", libc::O_RDONLY, 0)), libc::ENOTDIR);
    p.chdir(path(b"/a/b")).expect("chdir");
    assert_eq!(p.stat(path(b"f")).expect("relative").size, 4);
    assert_eq!(p.stat(path(b"../../abs")).expect("up and through").size, 4);
    assert_eq!(errno(p.stat(path(b""))), libc::ENOENT);
    let long = vec![b'x'; 256];
    assert_eq!(errno(p.stat(path(&long))), libc::ENAMETOOLONG);
}

#[test]
fn descriptors_share_what_posix_says() {
    let fs = fs();
    let p = root(&fs);
    let fd = p.open(At::Cwd, b"/f", RW_CREATE, 0o644).expect("create");
    p.write(fd, b"0123456789").expect("write");
    // dup shares the offset; a second open does not.
    let dup = p.dup(fd, None, false).expect("dup");
    let other = p.open(At::Cwd, b"/f", libc::O_RDONLY, 0).expect("open");
    assert_eq!(p.lseek(dup, 0, libc::SEEK_CUR).expect("tell"), 10);
    assert_eq!(p.lseek(fd, 2, libc::SEEK_SET).expect("seek"), 2);
    let mut buf = [0u8; 3];
    p.read(dup, &mut buf).expect("read");
    assert_eq!(&buf, b"234");
    p.read(other, &mut buf).expect("read");
    assert_eq!(&buf, b"012");
    // Status flags are the description's; close-on-exec the descriptor's.
    p.fcntl(fd, libc::F_SETFL, libc::O_APPEND).expect("setfl");
    assert_ne!(p.fcntl(dup, libc::F_GETFL, 0).expect("getfl") & libc::O_APPEND, 0);
    p.fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC).expect("setfd");
    assert_eq!(p.fcntl(dup, libc::F_GETFD, 0).expect("getfd"), 0);
    // O_APPEND writes go to the end whatever the offset says.
    p.lseek(fd, 0, libc::SEEK_SET).expect("seek");
    p.write(dup, b"AB").expect("append");
    assert_eq!(p.stat(Target::Fd(fd)).expect("fstat").size, 12);
    assert_eq!(p.lseek(fd, 0, libc::SEEK_CUR).expect("tell"), 12);
    // dup3 onto a number closes what was there; the lowest free number
    // is reused.
    assert_eq!(p.dup(fd, Some(other), true).expect("dup3"), other);
    p.close(dup).expect("close");
    assert_eq!(p.dup(fd, None, false).expect("dup"), dup);
    assert_eq!(errno(p.close(99)), libc::EBADF);
    // An unlinked file stays readable until its last descriptor closes.
    p.unlink(At::Cwd, b"/f", 0).expect("unlink");
    let mut all = [0u8; 12];
    assert_eq!(p.pread(other, &mut all, 0).expect("pread"), 12);
    assert_eq!(&all, b"0123456789AB");
    // A listing of a directory from a descriptor, then again after a
    // rewind.
    p.mkdir(At::Cwd, b"/d", 0o755).expect("mkdir");
    for i in 0..150 {
        let fd = p
            .open(At::Cwd, format!("/d/{i}").as_bytes(), RW_CREATE, 0o644)
            .expect("create");
        p.close(fd).expect("close");
    }
    let d = p
        .open(At::Cwd, b"/d", libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .expect("opendir");
    let list = |p: &Posix| {
        let mut names = Vec::new();
        while let Some(e) = p.readdir(d).expect("readdir") {
            names.push(String::from_utf8(e.name).expect("utf-8"));
        }
        names.sort();
        names
    };
    let first = list(&p);
    assert_eq!(first.len(), 152);
    assert!(first.contains(&"..".to_string()) && first.contains(&"149".to_string()));
    assert!(list(&p).is_empty(), "a finished listing stays finished");
    p.lseek(d, 0, libc::SEEK_SET).expect("rewind");
    assert_eq!(list(&p), first);
}

#[test]
fn a_caller_who_is_not_root_gets_the_kernels_answers() {
    let fs = fs();
    let admin = root(&fs);
    admin.mkdir(At::Cwd, b"/home", 0o755).expect("mkdir");
    admin.mkdir(At::Cwd, b"/tmp", 0o1777).expect("mkdir");
    assert_eq!(admin.stat(path(b"/tmp")).expect("stat").perm, 0o1755, "less the umask");
    admin.chmod(path(b"/tmp"), 0o1777).expect("chmod");
    admin.chown(path(b"/home"), Some(1000), Some(1000)).expect("chown");
    let fd = admin.open(At::Cwd, b"/secret", RW_CREATE, 0o600).expect("create");
    admin.close(fd).expect("close");
    let alice = Posix::new(fs.clone(), Cred::new(1000, 1000, &[]), 0o077);
    let bob = Posix::new(fs.clone(), Cred::new(1001, 1001, &[]), 0o022);
    // Reading another's private file, writing in another's directory.
    assert_eq!(errno(alice.open(At::Cwd, b"/secret", libc::O_RDONLY, 0)), libc::EACCES);
    assert_eq!(errno(bob.open(At::Cwd, b"/home/x", RW_CREATE, 0o644)), libc::EACCES);
    // Her umask applies; her file is hers.
    let fd = alice.open(At::Cwd, b"/home/mine", RW_CREATE, 0o666).expect("create");
    alice.close(fd).expect("close");
    let a = alice.stat(path(b"/home/mine")).expect("stat");
    assert_eq!((a.perm, a.uid, a.gid), (0o600, 1000, 1000));
    // chmod and explicit times only by the owner (EPERM), chown to
    // another user only with CAP_CHOWN.
    assert_eq!(errno(bob.chmod(path(b"/home/mine"), 0o666)), libc::EPERM);
    assert_eq!(errno(alice.chown(path(b"/home/mine"), Some(1001), None)), libc::EPERM);
    assert_eq!(
        errno(bob.utimens(path(b"/home/mine"), novafs_posix::Time::At(1), novafs_posix::Time::Omit)),
        libc::EPERM
    );
    // The sticky directory: bob cannot remove or rename alice's file.
    let fd = alice.open(At::Cwd, b"/tmp/a", RW_CREATE, 0o666).expect("create");
    alice.close(fd).expect("close");
    assert_eq!(errno(bob.unlink(At::Cwd, b"/tmp/a", 0)), libc::EPERM);
    assert_eq!(
        errno(bob.rename(At::Cwd, b"/tmp/a", At::Cwd, b"/tmp/b", 0)),
        libc::EPERM
    );
    alice.unlink(At::Cwd, b"/tmp/a", 0).expect("her own");
    // Search permission on every directory of a path.
    admin.chmod(path(b"/home"), 0o700).expect("chmod");
    assert_eq!(errno(bob.stat(path(b"/home/mine"))), libc::EACCES);
    assert_eq!(errno(bob.access(At::Cwd, b"/home", libc::R_OK, 0)), libc::EACCES);
    // trusted.* needs CAP_SYS_ADMIN; root without it is refused too.
    let fd = admin.open(At::Cwd, b"/x", RW_CREATE, 0o666).expect("create");
    admin.close(fd).expect("close");
    assert_eq!(errno(bob.setxattr(path(b"/x"), b"trusted.k", b"v", 0)), libc::EPERM);
    let weak_root = Posix::new(fs.clone(), Cred::new(0, 0, &[]).caps(Caps::NONE), 0o022);
    // Root without CAP_DAC_OVERRIDE is an ordinary user.
    assert_eq!(
        errno(weak_root.open(At::Cwd, b"/home/mine", libc::O_RDONLY, 0)),
        libc::EACCES
    );
    admin.setxattr(path(b"/x"), b"trusted.k", b"v", 0).expect("root may");
    // A write by someone without CAP_FSETID drops set-user-ID.
    admin.chmod(path(b"/x"), 0o4666).expect("chmod");
    let fd = bob.open(At::Cwd, b"/x", libc::O_WRONLY, 0).expect("open");
    bob.write(fd, b"w").expect("write");
    assert_eq!(bob.stat(Target::Fd(fd)).expect("fstat").perm, 0o666);
    bob.close(fd).expect("close");
    assert!(
        bob.listxattr(path(b"/x")).expect("list").is_empty(),
        "trusted names are hidden"
    );
}
