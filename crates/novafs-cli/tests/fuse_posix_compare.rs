//! The project's POSIX comparison: each case runs the same system calls in
//! a fresh directory on tmpfs (/dev/shm) and on a novafs mount, records
//! what every call returned (the value or the errno) and what it left
//! (types, modes, link counts, sizes, contents, names), and the two
//! transcripts must be equal, case by case.
//!
//! Left out on purpose, each for a reason that is not a difference in
//! behaviour: inode numbers, times (compared by order, not value),
//! directory sizes and block counts (each file system's own accounting),
//! and O_TMPFILE, which the FUSE protocol library novafs is served by
//! (fuser 0.18) cannot receive (README, "Corners programs notice").

mod fuse_common;

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use fuse_common::{require_fuse_root, shm_dir, Mount};
use nix::errno::Errno;

/// One case's transcript, built as its calls run in `dir`.
struct T {
    dir: PathBuf,
    out: Vec<String>,
}

impl T {
    fn c(&self, rel: &str) -> CString {
        CString::new(self.dir.join(rel).as_os_str().as_bytes()).expect("no NUL")
    }

    /// Records `what` as "ok", the value, or the errno of a -1 return.
    fn rc(&mut self, what: &str, rc: i64) -> i64 {
        let r = if rc < 0 {
            format!("{:?}", Errno::last())
        } else {
            format!("{rc}")
        };
        self.out.push(format!("{what}: {r}"));
        rc
    }

    fn open(&mut self, rel: &str, flags: i32, mode: u32) -> i32 {
        let p = self.c(rel);
        // SAFETY: a NUL-terminated path that lives across the call.
        let fd = unsafe { libc::open(p.as_ptr(), flags | libc::O_CLOEXEC, mode) };
        self.rc(&format!("open {rel} {flags:#o}"), i64::from(fd.min(0)));
        fd
    }

    fn close(&mut self, fd: i32) {
        if fd >= 0 {
            // SAFETY: a descriptor this case opened.
            unsafe { libc::close(fd) };
        }
    }

    fn write_at(&mut self, fd: i32, data: &[u8], off: i64) {
        // SAFETY: `data` is valid for its length; `fd` is open or -1.
        let n = unsafe { libc::pwrite(fd, data.as_ptr().cast(), data.len(), off) };
        self.rc(&format!("pwrite {} @{off}", data.len()), n as i64);
    }

    fn write(&mut self, fd: i32, data: &[u8]) {
        // SAFETY: as in `write_at`.
        let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
        self.rc(&format!("write {}", data.len()), n as i64);
    }

    fn put(&mut self, rel: &str, data: &[u8]) {
        let fd = self.open(rel, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, 0o644);
        self.write(fd, data);
        self.close(fd);
    }

    fn mkdir(&mut self, rel: &str, mode: u32) {
        let p = self.c(rel);
        // SAFETY: as in `open`.
        let rc = unsafe { libc::mkdir(p.as_ptr(), mode) };
        self.rc(&format!("mkdir {rel}"), rc.into());
    }

    fn call2(&mut self, what: &str, a: &str, b: &str, f: impl FnOnce(*const libc::c_char, *const libc::c_char) -> i32) {
        let (pa, pb) = (self.c(a), self.c(b));
        let rc = f(pa.as_ptr(), pb.as_ptr());
        self.rc(&format!("{what} {a} {b}"), rc.into());
    }

    fn call1(&mut self, what: &str, a: &str, f: impl FnOnce(*const libc::c_char) -> i32) {
        let pa = self.c(a);
        let rc = f(pa.as_ptr());
        self.rc(&format!("{what} {a}"), rc.into());
    }

    fn rename(&mut self, a: &str, b: &str) {
        self.call2("rename", a, b, |x, y| {
            // SAFETY: NUL-terminated strings.
            unsafe { libc::rename(x, y) }
        });
    }

    fn link(&mut self, a: &str, b: &str) {
        self.call2("link", a, b, |x, y| {
            // SAFETY: NUL-terminated strings.
            unsafe { libc::link(x, y) }
        });
    }

    /// A symlink at `at` to `target` (a string, not a path of the case).
    fn symlink(&mut self, target: &str, at: &str) {
        let t = CString::new(target).expect("no NUL");
        self.call1(&format!("symlink {target}"), at, |p| {
            // SAFETY: NUL-terminated strings.
            unsafe { libc::symlink(t.as_ptr(), p) }
        });
    }

    fn unlink(&mut self, rel: &str) {
        self.call1("unlink", rel, |p| {
            // SAFETY: a NUL-terminated string.
            unsafe { libc::unlink(p) }
        });
    }

    fn rmdir(&mut self, rel: &str) {
        self.call1("rmdir", rel, |p| {
            // SAFETY: a NUL-terminated string.
            unsafe { libc::rmdir(p) }
        });
    }

    /// Records what `rel` is: type and mode, link count, owner, size (not
    /// for directories), device numbers of device nodes.
    fn stat(&mut self, rel: &str) {
        let p = self.c(rel);
        // SAFETY: an all-zero stat is valid storage for the result.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as in `open`; `st` is valid for writes.
        let rc = unsafe { libc::lstat(p.as_ptr(), &mut st) };
        if rc < 0 {
            self.rc(&format!("lstat {rel}"), rc.into());
            return;
        }
        let kind = st.st_mode & libc::S_IFMT;
        let size = if kind == libc::S_IFDIR { -1 } else { st.st_size };
        let rdev = if kind == libc::S_IFCHR || kind == libc::S_IFBLK {
            st.st_rdev
        } else {
            0
        };
        self.out.push(format!(
            "lstat {rel}: mode {:o} nlink {} owner {}:{} size {size} rdev {rdev:x}",
            st.st_mode, st.st_nlink, st.st_uid, st.st_gid
        ));
    }

    /// Records the contents of `rel` (or why it cannot be read).
    fn contents(&mut self, rel: &str) {
        let line = match fs::read(self.dir.join(rel)) {
            Ok(b) => format!(
                "contents {rel}: {} bytes, {} zero, FNV-1a {:016x}, starting {:?}",
                b.len(),
                b.iter().filter(|&&x| x == 0).count(),
                b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ u64::from(x))
                    .wrapping_mul(0x100_0000_01b3)),
                String::from_utf8_lossy(&b[..b.len().min(16)])
            ),
            Err(e) => format!("contents {rel}: {:?}", e.raw_os_error().map(Errno::from_raw)),
        };
        self.out.push(line);
    }

    /// Records the sorted names in directory `rel`.
    fn names(&mut self, rel: &str) {
        let line = match fs::read_dir(self.dir.join(rel)) {
            Ok(rd) => {
                let mut v: Vec<String> = rd
                    .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                    .collect();
                v.sort();
                format!("names {rel}: {v:?}")
            }
            Err(e) => format!("names {rel}: {:?}", e.raw_os_error().map(Errno::from_raw)),
        };
        self.out.push(line);
    }

    fn note(&mut self, s: String) {
        self.out.push(s);
    }
}

type Case = (&'static str, fn(&mut T));

fn seek(t: &mut T, fd: i32, off: i64, whence: i32, what: &str) {
    // SAFETY: `fd` is open or -1.
    let r = unsafe { libc::lseek(fd, off, whence) };
    t.rc(&format!("lseek {what} {off}"), r);
}

fn xattr_list(t: &mut T, rel: &str) {
    let p = t.c(rel);
    let mut buf = [0u8; 256];
    // SAFETY: as in `open`; `buf` is valid for its length.
    let n = unsafe { libc::llistxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        t.rc("listxattr", n as i64);
        return;
    }
    let mut names: Vec<&[u8]> = buf[..n as usize].split(|&b| b == 0).filter(|s| !s.is_empty()).collect();
    names.sort();
    let names: Vec<String> = names.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect();
    t.note(format!("listxattr {rel}: {names:?}"));
}

fn setxattr(t: &mut T, rel: &str, name: &str, value: &[u8], flags: i32) {
    let (p, n) = (t.c(rel), CString::new(name).expect("no NUL"));
    // SAFETY: NUL-terminated strings and a value of the stated length.
    let rc = unsafe { libc::lsetxattr(p.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), flags) };
    t.rc(&format!("setxattr {name} {} {flags}", value.len()), rc.into());
}

fn getxattr(t: &mut T, rel: &str, name: &str, size: usize) {
    let (p, n) = (t.c(rel), CString::new(name).expect("no NUL"));
    let mut buf = vec![0u8; size];
    // SAFETY: as in `setxattr`; `buf` is valid for `size` bytes.
    let r = unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), size) };
    t.rc(&format!("getxattr {name} {size}"), r as i64);
    if r > 0 && size > 0 {
        t.note(format!("value {:?}", String::from_utf8_lossy(&buf[..r as usize])));
    }
}

fn utimes(t: &mut T, rel: &str, times: [libc::timespec; 2], flags: i32) {
    let p = t.c(rel);
    // SAFETY: as in `open`; two timespecs as utimensat expects.
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), times.as_ptr(), flags) };
    t.rc(&format!("utimensat {rel}"), rc.into());
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as in `T::stat`.
    if unsafe { libc::lstat(p.as_ptr(), &mut st) } == 0 {
        t.note(format!(
            "atime {}.{:09} mtime {}.{:09}",
            st.st_atime, st.st_atime_nsec, st.st_mtime, st.st_mtime_nsec
        ));
    }
}

fn ts(sec: i64, nsec: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    }
}

const CASES: &[Case] = &[
    ("open flags", |t| {
        t.put("f", b"hello");
        let fd = t.open("f", libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o644);
        t.close(fd);
        let fd = t.open("f", libc::O_RDONLY | libc::O_DIRECTORY, 0);
        t.close(fd);
        t.mkdir("d", 0o755);
        let fd = t.open("d", libc::O_WRONLY, 0);
        t.close(fd);
        let fd = t.open("f/", libc::O_RDONLY, 0);
        t.close(fd);
        let fd = t.open("missing/x", libc::O_CREAT | libc::O_WRONLY, 0o644);
        t.close(fd);
        let fd = t.open("f", libc::O_WRONLY | libc::O_TRUNC, 0);
        t.close(fd);
        t.contents("f");
        let fd = t.open("d/", libc::O_CREAT | libc::O_WRONLY, 0o644);
        t.close(fd);
    }),
    ("append and sparse writes", |t| {
        let fd = t.open("f", libc::O_CREAT | libc::O_WRONLY | libc::O_APPEND, 0o600);
        t.write(fd, b"abc");
        t.write_at(fd, b"XY", 0); // O_APPEND: pwrite appends too (Linux)
        t.close(fd);
        t.contents("f");
        let fd = t.open("s", libc::O_CREAT | libc::O_RDWR, 0o600);
        t.write_at(fd, b"end", 1 << 20);
        seek(t, fd, 0, libc::SEEK_DATA, "data");
        seek(t, fd, 0, libc::SEEK_HOLE, "hole");
        seek(t, fd, (1 << 20) + 3, libc::SEEK_DATA, "data");
        seek(t, fd, 0, libc::SEEK_END, "end");
        t.close(fd);
        t.stat("s");
    }),
    ("symlinks", |t| {
        t.put("f", b"x");
        t.symlink("f", "l");
        t.symlink("loop2", "loop1");
        t.symlink("loop1", "loop2");
        let fd = t.open("loop1", libc::O_RDONLY, 0);
        t.close(fd);
        let fd = t.open("l", libc::O_RDONLY | libc::O_NOFOLLOW, 0);
        t.close(fd);
        t.stat("l");
        let mut buf = [0u8; 64];
        for rel in ["l", "f"] {
            let p = t.c(rel);
            // SAFETY: as in `open`; `buf` is valid for its length.
            let n = unsafe { libc::readlink(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
            t.rc(&format!("readlink {rel}"), n as i64);
        }
        for len in [4095usize, 4096] {
            let target = CString::new("t".repeat(len)).expect("no NUL");
            t.call1(&format!("symlink of {len} bytes"), &format!("long{len}"), |p| {
                // SAFETY: NUL-terminated strings.
                unsafe { libc::symlink(target.as_ptr(), p) }
            });
        }
        t.contents("l");
    }),
    ("names", |t| {
        t.put(&"n".repeat(255), b"");
        let fd = t.open(&"n".repeat(256), libc::O_CREAT | libc::O_WRONLY, 0o644);
        t.close(fd);
        t.mkdir(&"m".repeat(256), 0o755);
        t.unlink("nothing");
        t.names(".");
    }),
    ("directories", |t| {
        t.mkdir("d", 0o755);
        t.mkdir("d", 0o755);
        t.mkdir("d/sub", 0o700);
        t.put("d/f", b"1");
        t.stat("d");
        t.rmdir("d");
        t.rmdir("d/f");
        t.rmdir("d/sub/.");
        t.unlink("d/sub");
        t.rmdir("d/sub");
        t.stat("d");
        t.names("d");
        t.mkdir("g", 0o2775);
        t.stat("g");
    }),
    ("rename", |t| {
        t.mkdir("a", 0o755);
        t.mkdir("a/in", 0o755);
        t.mkdir("b", 0o755);
        t.mkdir("full", 0o755);
        t.put("full/x", b"x");
        t.put("f", b"f");
        t.put("g", b"g");
        t.rename("a", "a/in/deeper");
        t.rename("f", "b");
        t.rename("b", "f");
        t.rename("b", "full");
        t.rename("f", "f");
        t.rename("a", "b");
        t.stat("b");
        t.stat("b/in");
        t.rename("f", "g");
        t.contents("g");
        t.link("g", "h");
        t.rename("g", "h");
        t.stat("g");
        t.stat("h");
        t.rename("missing", "x");
        t.rename("g/", "z");
        for flags in [
            libc::RENAME_NOREPLACE,
            libc::RENAME_EXCHANGE,
            libc::RENAME_EXCHANGE | libc::RENAME_NOREPLACE,
        ] {
            t.call2(&format!("renameat2 {flags}"), "g", "full/x", |x, y| {
                // SAFETY: NUL-terminated strings.
                unsafe { libc::renameat2(libc::AT_FDCWD, x, libc::AT_FDCWD, y, flags) }
            });
        }
        t.contents("g");
        t.contents("full/x");
        t.call2("renameat2 whiteout", "g", "w", |x, y| {
            // SAFETY: NUL-terminated strings.
            unsafe { libc::renameat2(libc::AT_FDCWD, x, libc::AT_FDCWD, y, libc::RENAME_WHITEOUT) }
        });
        t.stat("g");
        t.stat("w");
        t.names(".");
    }),
    ("links", |t| {
        t.mkdir("d", 0o755);
        t.put("f", b"f");
        t.put("e", b"e");
        t.link("d", "dl");
        t.link("f", "e");
        t.link("f", "f2");
        t.link("f", "d/f3");
        t.link("missing", "m");
        t.stat("f");
        t.unlink("f");
        t.stat("f2");
        t.unlink("d");
    }),
    ("truncate", |t| {
        t.put("f", b"0123456789");
        let trunc = |t: &mut T, len: i64| {
            t.call1(&format!("truncate {len}"), "f", |p| {
                // SAFETY: NUL-terminated string.
                unsafe { libc::truncate(p, len) }
            })
        };
        trunc(t, 4);
        t.contents("f");
        trunc(t, 8);
        t.contents("f");
        trunc(t, -1);
        t.mkdir("d", 0o755);
        t.call1("truncate", "d", |p| {
            // SAFETY: NUL-terminated string.
            unsafe { libc::truncate(p, 0) }
        });
        let fd = t.open("f", libc::O_RDONLY, 0);
        // SAFETY: `fd` is open or -1.
        let rc = unsafe { libc::ftruncate(fd, 0) };
        t.rc("ftruncate read-only", rc.into());
        t.close(fd);
        t.stat("f");
    }),
    ("fallocate", |t| {
        t.put("f", &[b'a'; 3 * 4096]);
        let fd = t.open("f", libc::O_RDWR, 0);
        for (mode, off, len) in [
            (libc::FALLOC_FL_KEEP_SIZE, 0, 64 << 10),
            (0, 3 * 4096, 4096),
            (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, 100, 5000),
            (libc::FALLOC_FL_PUNCH_HOLE, 0, 4096),
            (0, -1, 4096),
            (0, 0, 0),
        ] {
            // SAFETY: `fd` is open or -1.
            let rc = unsafe { libc::fallocate(fd, mode, off, len) };
            t.rc(&format!("fallocate {mode} {off} {len}"), rc.into());
        }
        t.close(fd);
        t.stat("f");
        t.contents("f");
    }),
    ("modes and owners", |t| {
        t.put("f", b"");
        let chmod = |t: &mut T, rel: &str, mode: u32| {
            t.call1(&format!("chmod {mode:o}"), rel, |p| {
                // SAFETY: NUL-terminated string.
                unsafe { libc::chmod(p, mode) }
            })
        };
        chmod(t, "f", 0o7777);
        t.stat("f");
        let chown = |t: &mut T, rel: &str, uid: u32, gid: u32| {
            t.call1(&format!("lchown {uid} {gid}"), rel, |p| {
                // SAFETY: NUL-terminated string.
                unsafe { libc::lchown(p, uid, gid) }
            })
        };
        chown(t, "f", 1000, u32::MAX);
        t.stat("f");
        chmod(t, "f", 0o6755);
        chown(t, "f", u32::MAX, 1000);
        t.stat("f");
        t.mkdir("g", 0o755);
        chown(t, "g", 0, 1234);
        chmod(t, "g", 0o2755);
        t.put("g/inherits", b"");
        t.mkdir("g/sub", 0o755);
        t.stat("g/inherits");
        t.stat("g/sub");
        chmod(t, "f", 0o644);
        t.call1("access X_OK", "f", |p| {
            // SAFETY: NUL-terminated string.
            unsafe { libc::access(p, libc::X_OK) }
        });
        t.call1("access W_OK", "f", |p| {
            // SAFETY: NUL-terminated string.
            unsafe { libc::access(p, libc::W_OK) }
        });
    }),
    ("times", |t| {
        t.put("f", b"");
        utimes(t, "f", [ts(-284_040_000, 123_456_789), ts(1_000_000_000, 5)], 0);
        utimes(t, "f", [ts(0, libc::UTIME_OMIT), ts(-1, 999_999_999)], 0);
        utimes(t, "f", [ts(0, 1_000_000_000), ts(0, 0)], 0);
        t.symlink("f", "l");
        utimes(t, "l", [ts(7, 0), ts(8, 0)], libc::AT_SYMLINK_NOFOLLOW);
    }),
    ("special files", |t| {
        let mknod = |t: &mut T, rel: &str, mode: u32, dev: u64| {
            t.call1(&format!("mknod {mode:o}"), rel, |p| {
                // SAFETY: NUL-terminated string.
                unsafe { libc::mknod(p, mode, dev) }
            })
        };
        mknod(t, "fifo", libc::S_IFIFO | 0o640, 0);
        mknod(t, "chr", libc::S_IFCHR | 0o600, libc::makedev(1, 3));
        mknod(t, "blk", libc::S_IFBLK | 0o600, libc::makedev(7, 0));
        mknod(t, "sock", libc::S_IFSOCK | 0o600, 0);
        mknod(t, "dir", libc::S_IFDIR | 0o600, 0);
        for rel in ["fifo", "chr", "blk", "sock"] {
            t.stat(rel);
        }
        let fd = t.open("fifo", libc::O_WRONLY | libc::O_NONBLOCK, 0);
        t.close(fd);
    }),
    ("extended attributes", |t| {
        t.put("f", b"");
        setxattr(t, "f", "user.a", b"one", 0);
        setxattr(t, "f", "user.a", b"two", libc::XATTR_CREATE);
        setxattr(t, "f", "user.b", b"two", libc::XATTR_REPLACE);
        setxattr(t, "f", "user.b", b"", 0);
        setxattr(t, "f", "trusted.t", b"t", 0);
        setxattr(t, "f", "nonamespace", b"x", 0);
        setxattr(t, "f", &format!("user.{}", "n".repeat(251)), b"x", 0);
        getxattr(t, "f", "user.a", 0);
        getxattr(t, "f", "user.a", 2);
        getxattr(t, "f", "user.a", 16);
        getxattr(t, "f", "user.b", 16);
        getxattr(t, "f", "user.none", 16);
        xattr_list(t, "f");
        let (p, n) = (t.c("f"), CString::new("user.a").expect("no NUL"));
        // SAFETY: NUL-terminated strings.
        let rc = unsafe { libc::lremovexattr(p.as_ptr(), n.as_ptr()) };
        t.rc("removexattr user.a", rc.into());
        // SAFETY: as above.
        let rc = unsafe { libc::lremovexattr(p.as_ptr(), n.as_ptr()) };
        t.rc("removexattr user.a again", rc.into());
        xattr_list(t, "f");
        t.symlink("f", "l");
        setxattr(t, "l", "user.on_link", b"x", 0);
        setxattr(t, "l", "trusted.on_link", b"x", 0);
        xattr_list(t, "l");
    }),
    ("paths and parents", |t| {
        t.mkdir("a", 0o755);
        t.mkdir("b", 0o755);
        t.mkdir("a/moved", 0o755);
        t.mkdir("trailing/", 0o755);
        t.rename("a/moved", "b/moved/");
        t.stat("a");
        t.stat("b");
        t.stat("b/moved/..");
        t.symlink("target", "dangling");
        let fd = t.open("dangling", libc::O_CREAT | libc::O_WRONLY, 0o600);
        t.close(fd);
        let fd = t.open("dangling", libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o600);
        t.close(fd);
        t.stat("target");
        t.link("dangling", "hard_to_symlink");
        t.stat("hard_to_symlink");
        t.stat("dangling/");
        t.stat("trailing");
        t.names(".");
    }),
    ("page-crossing data", |t| {
        let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let fd = t.open("f", libc::O_CREAT | libc::O_RDWR, 0o644);
        t.write_at(fd, &data, 0);
        t.write_at(fd, &data[..5000], 4000);
        t.write_at(fd, b"tail", 30_000);
        t.write_at(fd, &data[..1], 8191);
        // SAFETY: `fd` is open or -1.
        let rc = unsafe { libc::ftruncate(fd, 12_345) };
        t.rc("ftruncate", rc.into());
        t.write_at(fd, b"after", 20_000);
        t.close(fd);
        t.contents("f");
        let p = t.c("f");
        // SAFETY: an all-zero statvfs is valid storage; NUL-terminated path.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let rc = unsafe { libc::statvfs(p.as_ptr(), &mut s) };
        t.rc("statvfs", rc.into());
        t.note(format!("namemax {}", s.f_namemax));
    }),
    ("file attributes", |t| {
        t.put("f", b"data");
        let fd = t.open("f", libc::O_RDONLY, 0);
        let ioctl = |t: &mut T, what: &str, cmd: libc::c_ulong, arg: *mut libc::c_void| {
            // SAFETY: `fd` is open or -1; `arg` points at what `cmd` takes.
            let rc = unsafe { libc::ioctl(fd, cmd, arg) };
            t.rc(what, rc.into());
        };
        let mut flags: libc::c_int = 0x20; // FS_APPEND_FL
        ioctl(
            t,
            "FS_IOC_SETFLAGS append",
            libc::FS_IOC_SETFLAGS,
            (&raw mut flags).cast(),
        );
        let mut got: libc::c_int = 0;
        ioctl(t, "FS_IOC_GETFLAGS", libc::FS_IOC_GETFLAGS, (&raw mut got).cast());
        t.note(format!("flags {got:#x}"));
        // struct fsxattr with a project ID (bytes 12..16).
        let mut fsx = [0u8; 28];
        fsx[12..16].copy_from_slice(&75u32.to_ne_bytes());
        ioctl(t, "FS_IOC_FSSETXATTR projid", 0x401c_5820, fsx.as_mut_ptr().cast());
        // The times are now's, different on each side: only the results.
        let now = ts(0, libc::UTIME_NOW);
        utimes(t, "f", [now, now], 0);
        let _ = t.out.pop();
        utimes(t, "f", [ts(5, 0), ts(6, 0)], 0);
        let _ = t.out.pop();
        let fd2 = t.open("f", libc::O_WRONLY | libc::O_APPEND, 0);
        t.write(fd2, b"more");
        t.close(fd2);
        let fd3 = t.open("f", libc::O_WRONLY, 0);
        t.close(fd3);
        t.unlink("f");
        let mut none: libc::c_int = 0;
        ioctl(t, "FS_IOC_SETFLAGS none", libc::FS_IOC_SETFLAGS, (&raw mut none).cast());
        t.close(fd);
        t.contents("f");
    }),
    ("open and removed", |t| {
        t.put("f", b"still here");
        let fd = t.open("f", libc::O_RDONLY, 0);
        t.unlink("f");
        let mut buf = [0u8; 32];
        // SAFETY: `buf` is valid for its length; `fd` is open or -1.
        let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        t.rc("pread after unlink", n as i64);
        // SAFETY: an all-zero stat is valid storage.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is valid for writes.
        let rc = unsafe { libc::fstat(fd, &mut st) };
        t.rc("fstat", rc.into());
        t.note(format!("nlink {} size {}", st.st_nlink, st.st_size));
        t.close(fd);
        t.mkdir("d", 0o755);
        let dfd = t.open("d", libc::O_RDONLY | libc::O_DIRECTORY, 0);
        t.rmdir("d");
        // SAFETY: as above.
        let rc = unsafe { libc::fstat(dfd, &mut st) };
        t.rc("fstat removed dir", rc.into());
        t.note(format!("nlink {}", st.st_nlink));
        let name = CString::new("new").expect("no NUL");
        // SAFETY: `dfd` is open or -1; NUL-terminated name.
        let rc = unsafe {
            libc::openat(
                dfd,
                name.as_ptr(),
                libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                0o644,
            )
        };
        t.rc("create in removed dir", i64::from(rc.min(0)));
        t.close(rc);
        t.close(dfd);
        t.names(".");
    }),
];

fn transcript(root: &Path, name: &str, case: fn(&mut T)) -> Vec<String> {
    let dir = root.join(name.replace(' ', "_"));
    fs::create_dir(&dir).expect("case directory");
    let mut t = T { dir, out: Vec::new() };
    case(&mut t);
    t.out
}

#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn every_case_matches_tmpfs() {
    every_case_matches_tmpfs_mounted_with(&["open_checks"], &[]);
}

/// The same with the kernel's writeback cache, which keeps sizes and
/// times in the kernel. SEEK_DATA and SEEK_HOLE are the kernel's there
/// too (the whole file is data), so those lines may differ.
#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-cli/build.rs)"
)]
fn every_case_matches_tmpfs_with_the_writeback_cache() {
    every_case_matches_tmpfs_mounted_with(&["open_checks,writeback_cache"], &["lseek data ", "lseek hole "]);
}

/// Runs every case on tmpfs and on a mount with `opts`; lines starting
/// with one of `may_differ` are not compared.
fn every_case_matches_tmpfs_mounted_with(opts: &[&str], may_differ: &[&str]) {
    require_fuse_root();
    // SAFETY: umask only changes this process's creation mask.
    unsafe { libc::umask(0o022) };
    let tmpfs = shm_dir();
    // open_checks: chattr's flags refuse the open itself, as tmpfs's do.
    // Without it the first write is refused instead (fuse_posix's chattr
    // test); every other case is the same either way.
    let m = Mount::new("64M", opts);
    let mut differences = Vec::new();
    for &(name, case) in CASES {
        let want = transcript(tmpfs.path(), name, case);
        let got = transcript(&m.mnt, name, case);
        assert!(want.len() > 2, "case {name} records too little: {want:?}");
        for (i, (w, g)) in want.iter().zip(&got).enumerate() {
            if w != g && !may_differ.iter().any(|p| w.starts_with(p)) {
                differences.push(format!("{name} #{i}:\n  tmpfs:  {w}\n  novafs: {g}"));
            }
        }
        if want.len() != got.len() {
            differences.push(format!(
                "{name}: {} lines on tmpfs, {} on novafs",
                want.len(),
                got.len()
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "{} differences:\n{}",
        differences.len(),
        differences.join("\n")
    );
    m.finish();
}
