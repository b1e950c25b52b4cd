//! The handler driven as the kernel drives it: request bytes in, reply
//! bytes out, over a real file system on a memory region.

use pm::{MemRegion, Region};
use zerocopy::{FromBytes, IntoBytes};

use super::*;
use crate::transport::Args;

const ROOT: u64 = FUSE_ROOT_ID;

/// A kernel talking to one `FuseFs`.
struct Kernel {
    fuse: FuseFs,
    unique: u64,
    /// The process every request names (/proc tells its capabilities).
    pid: u32,
}

/// What came back: the answer, and the reply bytes for a `Reply`.
#[derive(Debug, PartialEq)]
enum Got {
    Reply(Vec<u8>),
    Error(i32),
    Nothing,
}

impl Got {
    fn bytes(&self) -> &[u8] {
        match self {
            Got::Reply(b) => b,
            other => panic!("no reply: {other:?}"),
        }
    }

    fn read<T: FromBytes>(&self) -> T {
        match T::read_from_prefix(self.bytes()) {
            Ok((t, _)) => t,
            Err(_) => panic!("reply too short"),
        }
    }
}

fn fs() -> Arc<Fs> {
    fs_with(novafs::MountOptions::default())
}

fn fs_with(opts: novafs::MountOptions) -> Arc<Fs> {
    let region: Arc<dyn Region> = Arc::new(MemRegion::new(32 << 20));
    Fs::format(region.clone(), &novafs::FormatOptions::default().shards(2)).unwrap();
    Arc::new(Fs::open(region, opts).unwrap())
}

impl Kernel {
    fn new(fuse: FuseFs) -> Kernel {
        Kernel {
            fuse,
            unique: 1,
            pid: std::process::id(),
        }
    }

    /// A kernel that has sent INIT offering everything but io_uring.
    fn mounted() -> Kernel {
        Kernel::mounted_on(fs())
    }

    fn mounted_on(fs: Arc<Fs>) -> Kernel {
        let mut k = Kernel::new(FuseFs::new(fs));
        let r = k.init(!FUSE_OVER_IO_URING);
        assert!(matches!(r, Got::Reply(_)), "{r:?}");
        k
    }

    fn call(&mut self, opcode: u32, nodeid: u64, parts: &[&[u8]]) -> Got {
        let body = parts.concat();
        self.unique += 1;
        let header = InHeader {
            len: (size_of::<InHeader>() + body.len()) as u32,
            opcode,
            unique: self.unique,
            nodeid,
            uid: 1000,
            gid: 100,
            pid: self.pid,
            total_extlen: 0,
            padding: 0,
        };
        let inc = Incoming {
            header: &header,
            args: Args::Whole(&body),
        };
        let mut out = vec![0u8; MAX_WRITE as usize + 4096];
        match self.fuse.handle(&inc, &mut out) {
            Answer::Reply(n) => Got::Reply(out[..n].to_vec()),
            Answer::Error(e) => Got::Error(e),
            Answer::Nothing => Got::Nothing,
        }
    }

    fn init(&mut self, offered: u64) -> Got {
        let i = InitIn {
            major: 7,
            minor: 45,
            max_readahead: 128 << 10,
            flags: offered as u32,
            flags2: (offered >> 32) as u32,
            unused: [0; 11],
        };
        self.call(FUSE_INIT, 0, &[i.as_bytes()])
    }

    fn create(&mut self, parent: u64, name: &str, mode: u32, umask: u32) -> EntryOut {
        let c = CreateIn {
            flags: (libc::O_CREAT | libc::O_RDWR) as u32,
            mode: libc::S_IFREG | mode,
            umask,
            open_flags: 0,
        };
        let r = self.call(FUSE_CREATE, parent, &[c.as_bytes(), name.as_bytes(), b"\0"]);
        let (o, _) = OpenOut::read_from_prefix(&r.bytes()[size_of::<EntryOut>()..]).unwrap();
        assert_eq!((o.fh, o.open_flags), (0, FOPEN_KEEP_CACHE));
        r.read()
    }

    fn mkdir(&mut self, parent: u64, name: &str, mode: u32, umask: u32) -> EntryOut {
        let m = MkdirIn { mode, umask };
        self.call(FUSE_MKDIR, parent, &[m.as_bytes(), name.as_bytes(), b"\0"])
            .read()
    }

    fn write(&mut self, ino: u64, offset: u64, data: &[u8]) -> Got {
        let w = WriteIn {
            offset,
            size: data.len() as u32,
            ..WriteIn::default()
        };
        self.call(FUSE_WRITE, ino, &[w.as_bytes(), data])
    }

    fn read(&mut self, ino: u64, offset: u64, size: u32) -> Got {
        let r = ReadIn {
            offset,
            size,
            ..ReadIn::default()
        };
        self.call(FUSE_READ, ino, &[r.as_bytes()])
    }

    fn list(&mut self, opcode: u32, dir: u64, fh: u64, offset: u64, size: u32) -> Got {
        let r = ReadIn {
            fh,
            offset,
            size,
            ..ReadIn::default()
        };
        self.call(opcode, dir, &[r.as_bytes()])
    }
}

/// The (name, ino, next offset) of each record of a READDIR or READDIRPLUS
/// reply.
fn names(b: &[u8], plus: bool) -> Vec<(String, u64, u64)> {
    let mut at = 0;
    let mut v = Vec::new();
    while at < b.len() {
        let skip = if plus { size_of::<EntryOut>() } else { 0 };
        let (d, _) = Dirent::read_from_prefix(&b[at + skip..]).unwrap();
        let name = &b[at + skip + FUSE_NAME_OFFSET..][..d.namelen as usize];
        v.push((String::from_utf8_lossy(name).into_owned(), d.ino, d.off));
        at += rec_align(skip + FUSE_NAME_OFFSET + d.namelen as usize);
    }
    v
}

#[test]
fn init_grants_what_fuser_asked_for_and_settles_the_protocol() {
    let mut k = Kernel::new(FuseFs::new(fs()));
    // Nothing but INIT before INIT.
    assert_eq!(
        k.call(FUSE_GETATTR, ROOT, &[GetattrIn::default().as_bytes()]),
        Got::Error(libc::EIO)
    );
    let r = k.init(u64::MAX);
    let o: InitOut = r.read();
    assert_eq!(r.bytes().len(), 64);
    let flags = u64::from(o.flags) | u64::from(o.flags2) << 32;
    assert_eq!(flags, WANTED | FUSE_POSIX_ACL | FUSE_DONT_MASK);
    assert_eq!(flags & (FUSE_WRITEBACK_CACHE | FUSE_OVER_IO_URING), 0);
    assert_eq!((o.major, o.minor), (7, FUSE_KERNEL_MINOR_VERSION));
    assert_eq!((o.max_write, o.max_pages, o.max_readahead), (1 << 20, 256, 128 << 10));
    assert_eq!(k.fuse.settled().map(|s| s.flags), Some(flags));
    // INIT comes once.
    assert_eq!(k.init(u64::MAX), Got::Error(libc::EIO));
}

#[test]
fn init_takes_only_what_the_kernel_offers() {
    let mut k = Kernel::new(FuseFs::new(fs()));
    let offered = FUSE_ASYNC_READ | FUSE_DO_READDIRPLUS | FUSE_INIT_EXT | FUSE_OVER_IO_URING;
    let o: InitOut = k.init(offered).read();
    let flags = u64::from(o.flags) | u64::from(o.flags2) << 32;
    // io_uring is the session's to take, once its queues exist.
    assert_eq!(flags, offered & !FUSE_OVER_IO_URING);
    // Without POSIX ACLs the kernel applies the umask itself.
    assert_eq!(k.fuse.umask(0o022), 0);
    // An older kernel gets the reply it knows.
    let mut k = Kernel::new(FuseFs::new(fs()));
    let i = InitIn {
        major: 7,
        minor: 22,
        flags: FUSE_ASYNC_READ as u32,
        ..InitIn::default()
    };
    assert_eq!(k.call(FUSE_INIT, 0, &[&i.as_bytes()[..16]]).bytes().len(), 24);
    assert_eq!(k.fuse.settled().map(|s| s.wire.minor), Some(22));
}

#[test]
fn create_write_read_and_getattr_through_the_wire() {
    let mut k = Kernel::mounted();
    let e = k.create(ROOT, "f", 0o644, 0o022);
    assert_ne!(e.nodeid, 0);
    assert_eq!((e.entry_valid, e.attr_valid), (3600, 3600));
    assert_eq!(e.attr.mode, libc::S_IFREG | 0o644);
    assert_eq!((e.attr.uid, e.attr.gid), (1000, 100));
    let w: WriteOut = k.write(e.nodeid, 0, b"hello, world").read();
    assert_eq!(w.size, 12);
    assert_eq!(k.read(e.nodeid, 7, 100), Got::Reply(b"world".to_vec()));
    let a: AttrOut = k
        .call(FUSE_GETATTR, e.nodeid, &[GetattrIn::default().as_bytes()])
        .read();
    assert_eq!((a.attr.size, a.attr.ino, a.attr_valid), (12, e.nodeid, 3600));
    // The page cache stays across opens.
    let open = OpenIn {
        flags: libc::O_RDONLY as u32,
        open_flags: 0,
    };
    let o: OpenOut = k.call(FUSE_OPEN, e.nodeid, &[open.as_bytes()]).read();
    assert_eq!(o.open_flags, FOPEN_KEEP_CACHE);
    assert_eq!(
        k.call(FUSE_RELEASE, e.nodeid, &[ReleaseIn::default().as_bytes()]),
        Got::Reply(vec![])
    );
}

#[test]
fn a_missing_name_is_a_cacheable_negative_entry() {
    let mut k = Kernel::mounted();
    let e: EntryOut = k.call(FUSE_LOOKUP, ROOT, &[b"nope\0"]).read();
    assert_eq!((e.nodeid, e.entry_valid), (0, 3600));
    let made = k.mkdir(ROOT, "d", 0o755, 0);
    let found: EntryOut = k.call(FUSE_LOOKUP, ROOT, &[b"d\0"]).read();
    assert_eq!((found.nodeid, found.attr.mode), (made.nodeid, libc::S_IFDIR | 0o755));
    // "." of a node finds the node itself (export support).
    let dot: EntryOut = k.call(FUSE_LOOKUP, made.nodeid, &[b".\0"]).read();
    assert_eq!(dot.nodeid, made.nodeid);
}

#[test]
fn the_umask_is_applied_here_only_when_the_kernel_leaves_it_to_us() {
    let mut k = Kernel::mounted();
    assert_eq!(k.mkdir(ROOT, "d", 0o777, 0o027).attr.mode, libc::S_IFDIR | 0o750);
    assert_eq!(k.create(ROOT, "f", 0o666, 0o022).attr.mode, libc::S_IFREG | 0o644);
    let mut k = Kernel::new(FuseFs::new(fs()));
    assert!(matches!(k.init(FUSE_ASYNC_READ), Got::Reply(_)));
    assert_eq!(k.mkdir(ROOT, "d", 0o777, 0o027).attr.mode, libc::S_IFDIR | 0o777);
}

#[test]
fn listings_stop_where_the_kernel_asked_and_continue_from_the_last_offset() {
    let mut k = Kernel::mounted();
    for name in ["a", "bb", "ccc", "dddd"] {
        k.create(ROOT, name, 0o600, 0);
    }
    let o: OpenOut = k.call(FUSE_OPENDIR, ROOT, &[OpenIn::default().as_bytes()]).read();
    let full = names(k.list(FUSE_READDIR, ROOT, o.fh, 0, 4096).bytes(), false);
    let all: Vec<&str> = full.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(all, [".", "..", "a", "bb", "ccc", "dddd"]);
    assert_eq!(full[0].1, ROOT);
    // Room for three records: the next call picks up after the third.
    let first = names(k.list(FUSE_READDIR, ROOT, o.fh, 0, 100).bytes(), false);
    assert_eq!(first.len(), 3);
    let rest = names(k.list(FUSE_READDIR, ROOT, o.fh, first[2].2, 4096).bytes(), false);
    assert_eq!([first, rest].concat(), full);
    assert_eq!(
        k.call(
            FUSE_RELEASEDIR,
            ROOT,
            &[ReleaseIn {
                fh: o.fh,
                ..ReleaseIn::default()
            }
            .as_bytes()]
        ),
        Got::Reply(vec![])
    );
}

#[test]
fn readdirplus_gives_each_name_its_attributes_and_counts_it_as_a_lookup() {
    let mut k = Kernel::mounted();
    // A directory is kept by the kernel's lookups of it (`Fs::remember`):
    // its mkdir's is forgotten, so only readdirplus's keeps it now.
    let d = k.mkdir(ROOT, "d", 0o750, 0);
    let forget = ForgetIn { nlookup: 1 };
    assert_eq!(k.call(FUSE_FORGET, d.nodeid, &[forget.as_bytes()]), Got::Nothing);
    let f = k.create(ROOT, "f", 0o640, 0);
    let o: OpenOut = k.call(FUSE_OPENDIR, ROOT, &[OpenIn::default().as_bytes()]).read();
    // Room for "." and ".." only: "d" was not sent, so not counted.
    let r = k.list(FUSE_READDIRPLUS, ROOT, o.fh, 0, 400);
    assert_eq!(names(r.bytes(), true).len(), 2);
    let r = k.list(FUSE_READDIRPLUS, ROOT, o.fh, 0, 4096);
    let listed = names(r.bytes(), true);
    let listed: Vec<&str> = listed.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(listed, [".", "..", "d", "f"]);
    // Every record here is 160 bytes (a name of one or two bytes).
    let record = rec_align(size_of::<EntryOut>() + FUSE_NAME_OFFSET + 2);
    let entry = |i: usize| EntryOut::read_from_prefix(&r.bytes()[i * record..]).map(|(e, _)| e);
    let (de, fe) = (entry(2).unwrap(), entry(3).unwrap());
    assert_eq!((de.nodeid, de.attr.mode), (d.nodeid, libc::S_IFDIR | 0o750));
    assert_eq!(
        (fe.nodeid, fe.attr.mode, fe.entry_valid),
        (f.nodeid, libc::S_IFREG | 0o640, 3600)
    );
    // Removed, the directory stays while the listing's lookup does, and
    // goes with it.
    assert_eq!(k.call(FUSE_RMDIR, ROOT, &[b"d\0"]), Got::Reply(vec![]));
    let getattr = GetattrIn::default();
    let kept: AttrOut = k.call(FUSE_GETATTR, d.nodeid, &[getattr.as_bytes()]).read();
    assert_eq!((kept.attr.ino, kept.attr.nlink), (d.nodeid, 0));
    assert_eq!(k.call(FUSE_FORGET, d.nodeid, &[forget.as_bytes()]), Got::Nothing);
    // Had the listing that did not fit counted it, it would stay.
    let gone = k.call(FUSE_GETATTR, d.nodeid, &[getattr.as_bytes()]);
    assert!(matches!(gone, Got::Error(_)), "{gone:?}");
}

#[test]
fn xattrs_follow_the_size_protocol() {
    let mut k = Kernel::mounted();
    let f = k.create(ROOT, "f", 0o644, 0);
    let set = SetxattrInCompat { size: 5, flags: 0 };
    assert_eq!(
        k.call(FUSE_SETXATTR, f.nodeid, &[set.as_bytes(), b"user.k\0", b"value"]),
        Got::Reply(vec![])
    );
    let ask = |size| GetxattrIn { size, padding: 0 };
    let s: GetxattrOut = k
        .call(FUSE_GETXATTR, f.nodeid, &[ask(0).as_bytes(), b"user.k\0"])
        .read();
    assert_eq!(s.size, 5);
    assert_eq!(
        k.call(FUSE_GETXATTR, f.nodeid, &[ask(5).as_bytes(), b"user.k\0"]),
        Got::Reply(b"value".to_vec())
    );
    assert_eq!(
        k.call(FUSE_GETXATTR, f.nodeid, &[ask(4).as_bytes(), b"user.k\0"]),
        Got::Error(libc::ERANGE)
    );
    assert_eq!(
        k.call(FUSE_LISTXATTR, f.nodeid, &[ask(64).as_bytes()]),
        Got::Reply(b"user.k\0".to_vec())
    );
    assert_eq!(k.call(FUSE_REMOVEXATTR, f.nodeid, &[b"user.k\0"]), Got::Reply(vec![]));
    let gone = k.call(FUSE_GETXATTR, f.nodeid, &[ask(0).as_bytes(), b"user.k\0"]);
    assert_eq!(gone, Got::Error(libc::ENODATA));
}

#[test]
fn flush_fsync_and_what_novafs_lacks_are_enosys() {
    let mut k = Kernel::mounted();
    let f = k.create(ROOT, "f", 0o644, 0);
    assert_eq!(
        k.call(FUSE_FLUSH, f.nodeid, &[FlushIn::default().as_bytes()]),
        Got::Error(libc::ENOSYS)
    );
    assert_eq!(
        k.call(FUSE_FSYNC, f.nodeid, &[FsyncIn::default().as_bytes()]),
        Got::Error(libc::ENOSYS)
    );
    assert_eq!(
        k.call(FUSE_FSYNCDIR, ROOT, &[FsyncIn::default().as_bytes()]),
        Got::Error(libc::ENOSYS)
    );
    assert_eq!(k.call(FUSE_GETLK, f.nodeid, &[&[0; 48]]), Got::Error(libc::ENOSYS));
    assert_eq!(
        k.call(FUSE_ACCESS, f.nodeid, &[AccessIn::default().as_bytes()]),
        Got::Error(libc::ENOSYS)
    );
    assert_eq!(k.call(999, f.nodeid, &[]), Got::Error(libc::ENOSYS));
}

/// A relaxed mount that batches: fsync and fsyncdir are answered, each
/// committing the running transaction (a crash after the reply keeps
/// the chmod made in place before it).
#[test]
fn a_batching_mounts_fsync_commits_its_running_transaction() {
    let region: Arc<dyn Region> = Arc::new(MemRegion::new(32 << 20));
    let format = novafs::FormatOptions::default()
        .shards(2)
        .consistency(novafs::Consistency::Relaxed);
    Fs::format(region.clone(), &format).unwrap();
    let batch = novafs::MountOptions::default().batch(Some(novafs::Batching::default()));
    let fs = Arc::new(Fs::open(region.clone(), batch).unwrap());
    let mut k = Kernel::mounted_on(fs.clone());
    let f = k.create(ROOT, "f", 0o644, 0);
    let chmod = |fs: &Fs, mode| {
        fs.setattr(f.nodeid, &novafs::SetAttr::default().mode(Some(mode)))
            .unwrap()
    };
    chmod(&fs, 0o600); // appended: the newest entry is a setattr now
    chmod(&fs, 0o640); // in place, batched
    let j0 = fs.journal_stats();
    assert_eq!(
        k.call(FUSE_FSYNC, f.nodeid, &[FsyncIn::default().as_bytes()]),
        Got::Reply(vec![])
    );
    assert_eq!(fs.journal_stats().since(&j0).txns, 1);
    assert_eq!(
        k.call(FUSE_FSYNCDIR, ROOT, &[FsyncIn::default().as_bytes()]),
        Got::Reply(vec![])
    );
    drop(k);
    drop(fs); // crash
    let fs = Fs::open(region, novafs::MountOptions::default()).unwrap();
    assert_eq!(fs.getattr(f.nodeid).unwrap().perm, 0o640);
}

#[test]
fn malformed_requests_are_eio_and_forgets_get_no_answer() {
    let mut k = Kernel::mounted();
    assert_eq!(k.call(FUSE_LOOKUP, ROOT, &[b"no-nul"]), Got::Error(libc::EIO));
    assert_eq!(k.call(FUSE_WRITE, ROOT, &[&[0; 10]]), Got::Error(libc::EIO));
    assert_eq!(k.call(FUSE_FORGET, ROOT, &[&[0; 3]]), Got::Nothing);
}

#[test]
fn setattr_sets_what_is_valid_including_times_before_1970() {
    let mut k = Kernel::mounted();
    let f = k.create(ROOT, "f", 0o644, 0);
    let s = SetattrIn {
        valid: FATTR_MODE | FATTR_SIZE | FATTR_MTIME,
        mode: 0o600,
        size: 10,
        // 1960-05-01 12:00:00.123456789.
        mtime: (-305_812_800i64) as u64,
        mtimensec: 123_456_789,
        ..SetattrIn::default()
    };
    let a: AttrOut = k.call(FUSE_SETATTR, f.nodeid, &[s.as_bytes()]).read();
    assert_eq!((a.attr.mode, a.attr.size), (libc::S_IFREG | 0o600, 10));
    assert_eq!((a.attr.mtime as i64, a.attr.mtimensec), (-305_812_800, 123_456_789));
    let got = k.fuse.fs.getattr(f.nodeid).map(|a| a.mtime);
    assert_eq!(got.ok(), Some(-305_812_800_000_000_000 + 123_456_789));
}

#[test]
fn chattr_ioctls_and_seek_data() {
    let mut k = Kernel::mounted();
    let f = k.create(ROOT, "f", 0o644, 0);
    let get = IoctlIn {
        cmd: 0x8008_6601,
        out_size: 4,
        ..IoctlIn::default()
    };
    let r = k.call(FUSE_IOCTL, f.nodeid, &[get.as_bytes()]);
    assert_eq!(r.bytes(), &[&[0u8; 16][..], &0u32.to_ne_bytes()].concat()[..]);
    let set = IoctlIn {
        cmd: 0x4008_6602,
        in_size: 4,
        ..IoctlIn::default()
    };
    let r = k.call(
        FUSE_IOCTL,
        f.nodeid,
        &[set.as_bytes(), &novafs::FLAG_NODUMP.to_ne_bytes()],
    );
    assert_eq!(r.bytes(), &[0u8; 16]);
    assert_eq!(
        k.fuse.fs.getattr(f.nodeid).map(|a| a.flags).ok(),
        Some(novafs::FLAG_NODUMP)
    );
    let other = IoctlIn {
        cmd: 0x1234,
        ..IoctlIn::default()
    };
    assert_eq!(
        k.call(FUSE_IOCTL, f.nodeid, &[other.as_bytes()]),
        Got::Error(libc::ENOTTY)
    );
    k.write(f.nodeid, 1 << 20, b"x");
    let seek = |offset: i64| LseekIn {
        offset: offset as u64,
        whence: libc::SEEK_DATA as u32,
        ..LseekIn::default()
    };
    let o: LseekOut = k.call(FUSE_LSEEK, f.nodeid, &[seek(0).as_bytes()]).read();
    assert_eq!(o.offset, 1 << 20);
    assert_eq!(
        k.call(FUSE_LSEEK, f.nodeid, &[seek(-1).as_bytes()]),
        Got::Error(libc::ENXIO)
    );
}

#[test]
fn statfs_reports_the_core_counts() {
    let mut k = Kernel::mounted();
    let st: Kstatfs = k.call(FUSE_STATFS, ROOT, &[]).read();
    let s = k.fuse.fs.statfs();
    assert_eq!(
        (st.blocks, st.bfree, st.bavail),
        (s.blocks, s.blocks_free, s.blocks_avail)
    );
    assert_eq!(
        (st.bsize, st.frsize, u64::from(st.namelen)),
        (BLOCK_SIZE, BLOCK_SIZE, s.name_max)
    );
}

#[test]
fn times_round_trip_including_before_the_epoch() {
    for ns in [0i64, 1, 1_700_000_000_123_456_789, -1, -86_400_000_000_007] {
        let (secs, nsec) = wire_time(ns);
        assert!(nsec < 1_000_000_000);
        assert_eq!(request::nanos(secs, nsec), ns);
    }
}

#[test]
fn chattr_flags_map_to_fsxattr_flags_and_back() {
    use novafs::{FLAG_APPEND, FLAG_IMMUTABLE, FLAG_NODUMP};
    let all = FLAG_IMMUTABLE | FLAG_APPEND | FLAG_NODUMP;
    assert_eq!(xflags_of(all), 0x08 | 0x10 | 0x80);
    assert_eq!(flags_of_xflags(xflags_of(all)), all);
    assert_eq!(flags_of_xflags(0x10), FLAG_APPEND);
    // One novafs does not keep (FS_XFLAG_SYNC) is kept visible, so the
    // core refuses it.
    assert_ne!(flags_of_xflags(0x20) & !all, 0);
}

#[test]
fn attributes_keep_type_permissions_and_special_bits() {
    let a = Attr {
        ino: 42,
        kind: FileType::Directory,
        perm: 0o2755,
        nlink: 3,
        uid: 1000,
        gid: 100,
        size: 4096,
        blocks: 8,
        atime: 1,
        mtime: 2,
        ctime: -3,
        rdev: 0,
        generation: 7,
        flags: 0,
    };
    let w = wire_attr(&a);
    assert_eq!(w.ino, 42);
    assert_eq!(w.mode, libc::S_IFDIR | 0o2755);
    assert_eq!((w.uid, w.gid, w.nlink, w.blksize), (1000, 100, 3, BLOCK_SIZE));
    assert_eq!((w.ctime as i64, w.ctimensec), (-1, 999_999_997));
    assert_eq!(entry_of(&a, ATTR_TTL).generation, 7);
}

/// The daemon's mount: the kernel's references keep files, reads update
/// access times relatively.
fn no_open_kernel() -> Kernel {
    let opts = novafs::MountOptions::default()
        .lookups_hold_files(true)
        .atime(Atime::Relative);
    Kernel::mounted_on(fs_with(opts))
}

impl Kernel {
    fn mknod(&mut self, parent: u64, name: &str, mode: u32) -> EntryOut {
        let m = MknodIn {
            mode: libc::S_IFREG | mode,
            rdev: 0,
            umask: 0,
            padding: 0,
        };
        self.call(FUSE_MKNOD, parent, &[m.as_bytes(), name.as_bytes(), b"\0"])
            .read()
    }

    fn mode(&mut self, ino: u64) -> u32 {
        let a: AttrOut = self.call(FUSE_GETATTR, ino, &[GetattrIn::default().as_bytes()]).read();
        a.attr.mode & 0o7777
    }

    fn write_flagged(&mut self, ino: u64, data: &[u8], write_flags: u32) -> Got {
        let w = WriteIn {
            size: data.len() as u32,
            write_flags,
            ..WriteIn::default()
        };
        self.call(FUSE_WRITE, ino, &[w.as_bytes(), data])
    }
}

#[test]
fn without_opens_open_and_create_are_enosys_and_release_is_ignored() {
    let mut k = no_open_kernel();
    let c = CreateIn {
        flags: (libc::O_CREAT | libc::O_RDWR) as u32,
        mode: libc::S_IFREG | 0o644,
        ..CreateIn::default()
    };
    assert_eq!(
        k.call(FUSE_CREATE, ROOT, &[c.as_bytes(), b"f\0"]),
        Got::Error(libc::ENOSYS)
    );
    let f = k.mknod(ROOT, "f", 0o644).nodeid;
    let open = |flags: i32| OpenIn {
        flags: flags as u32,
        open_flags: 0,
    };
    assert_eq!(
        k.call(FUSE_OPEN, f, &[open(libc::O_RDWR).as_bytes()]),
        Got::Error(libc::ENOSYS)
    );
    // An open the chattr flags forbid is still refused.
    k.fuse.fs.set_flags(f, novafs::FLAG_IMMUTABLE).unwrap();
    assert_eq!(
        k.call(FUSE_OPEN, f, &[open(libc::O_WRONLY).as_bytes()]),
        Got::Error(libc::EPERM)
    );
    k.fuse.fs.set_flags(f, 0).unwrap();
    // A RELEASE takes no handle away: the file stays after its unlink.
    assert_eq!(k.write(f, 0, b"kept").read::<WriteOut>().size, 4);
    assert_eq!(k.call(FUSE_UNLINK, ROOT, &[b"f\0"]), Got::Reply(vec![]));
    assert_eq!(
        k.call(FUSE_RELEASE, f, &[ReleaseIn::default().as_bytes()]),
        Got::Reply(vec![])
    );
    assert_eq!(k.read(f, 0, 10), Got::Reply(b"kept".to_vec()));
}

#[test]
fn without_opens_an_unlinked_file_lives_until_the_kernel_forgets_it() {
    let mut k = no_open_kernel();
    let free = |k: &Kernel| k.fuse.fs.statfs().blocks_free;
    let before = free(&k);
    let f = k.mknod(ROOT, "f", 0o644).nodeid;
    assert_eq!(k.write(f, 0, &[7u8; 8192]).read::<WriteOut>().size, 8192);
    assert_eq!(k.call(FUSE_UNLINK, ROOT, &[b"f\0"]), Got::Reply(vec![]));
    assert_eq!(k.read(f, 8190, 10), Got::Reply(vec![7, 7]));
    assert!(free(&k) < before, "the data is still held");
    let forget = ForgetIn { nlookup: 1 };
    assert_eq!(k.call(FUSE_FORGET, f, &[forget.as_bytes()]), Got::Nothing);
    assert_eq!(free(&k), before);
    assert!(matches!(k.read(f, 0, 10), Got::Error(_)));
}

#[test]
fn set_id_bits_go_as_killpriv_v2_asks() {
    let mut k = no_open_kernel();
    let f = k.mknod(ROOT, "f", 0o6755).nodeid;
    // A writer with CAP_FSETID: the kernel sets no flag, the bits stay.
    k.write_flagged(f, b"a", 0).read::<WriteOut>();
    assert_eq!(k.mode(f), 0o6755);
    k.write_flagged(f, b"a", FUSE_WRITE_KILL_SUIDGID).read::<WriteOut>();
    assert_eq!(k.mode(f), 0o755);
    // Set-group-ID without group execution is a locking mark: it stays.
    let g = k.mknod(ROOT, "g", 0o6744).nodeid;
    k.write_flagged(g, b"a", FUSE_WRITE_KILL_SUIDGID).read::<WriteOut>();
    assert_eq!(k.mode(g), 0o2744);
    // A truncation by a caller without CAP_FSETID.
    let t = k.mknod(ROOT, "t", 0o6755).nodeid;
    let set = SetattrIn {
        valid: FATTR_SIZE | FATTR_KILL_SUIDGID,
        size: 0,
        ..SetattrIn::default()
    };
    let a: AttrOut = k.call(FUSE_SETATTR, t, &[set.as_bytes()]).read();
    assert_eq!(a.attr.mode & 0o7777, 0o755);
    // A chown, whoever asks.
    let c = k.mknod(ROOT, "c", 0o4755).nodeid;
    let set = SetattrIn {
        valid: FATTR_UID,
        uid: 1001,
        ..SetattrIn::default()
    };
    let a: AttrOut = k.call(FUSE_SETATTR, c, &[set.as_bytes()]).read();
    assert_eq!((a.attr.mode & 0o7777, a.attr.uid), (0o755, 1001));
    // fallocate by a process without CAP_FSETID (the fallback when /proc
    // has no such process: uid 1000 is unprivileged).
    let fa = k.mknod(ROOT, "fa", 0o6755).nodeid;
    k.pid = u32::MAX - 1;
    let fal = FallocateIn {
        length: 4096,
        ..FallocateIn::default()
    };
    assert_eq!(k.call(FUSE_FALLOCATE, fa, &[fal.as_bytes()]), Got::Reply(vec![]));
    assert_eq!(k.mode(fa), 0o755);
}

/// A kernel on `fs` whose mount has `inode_names` on.
fn with_inode_names(fs: Arc<Fs>) -> Kernel {
    let mut k = Kernel::new(FuseFs::new(fs).with_inode_names(true));
    assert!(matches!(k.init(!FUSE_OVER_IO_URING), Got::Reply(_)));
    k
}

fn inode_name(ino: u64) -> Vec<u8> {
    format!(".novafs-ino.{ino}\0").into_bytes()
}

#[test]
fn inode_names_find_every_live_inode_by_number_in_the_root() {
    let fs = fs();
    let mut k = with_inode_names(fs.clone());
    let f = k.create(ROOT, "f", 0o640, 0);
    assert_eq!(k.write(f.nodeid, 0, b"by number").read::<WriteOut>().size, 9);
    let d = k.mkdir(ROOT, "d", 0o750, 0);
    let g = k.create(d.nodeid, "g", 0o600, 0);
    let s: EntryOut = k.call(FUSE_SYMLINK, d.nodeid, &[b"s\0", b"../f\0"]).read();
    for (made, mode) in [
        (&f, libc::S_IFREG | 0o640),
        (&d, libc::S_IFDIR | 0o750),
        (&g, libc::S_IFREG | 0o600),
        (&s, libc::S_IFLNK | 0o777),
    ] {
        let e: EntryOut = k.call(FUSE_LOOKUP, ROOT, &[&inode_name(made.nodeid)]).read();
        let now = fs.getattr(made.nodeid).unwrap();
        assert_eq!(
            (e.nodeid, e.generation, e.attr.ino),
            (made.nodeid, now.generation, made.nodeid)
        );
        assert_eq!((e.attr.mode, e.attr.size, e.attr.nlink), (mode, now.size, now.nlink));
        assert_eq!(
            (e.attr.uid, e.attr.gid, e.attr.mtime),
            (1000, 100, wire_time(now.mtime).0)
        );
        // The name expires at once; the inode's attributes do not.
        assert_eq!((e.entry_valid, e.entry_valid_nsec, e.attr_valid), (0, 0, 3600));
    }
    assert_eq!(k.read(f.nodeid, 3, 100), Got::Reply(b"number".to_vec()));
    // Held as a lookup holds it: the directory's own entry forgotten, the
    // lookup by number alone keeps it past rmdir, until forgotten.
    let forget = ForgetIn { nlookup: 1 };
    for _ in 0..2 {
        assert_eq!(k.call(FUSE_FORGET, d.nodeid, &[forget.as_bytes()]), Got::Nothing);
    }
    let _: EntryOut = k.call(FUSE_LOOKUP, ROOT, &[&inode_name(d.nodeid)]).read();
    assert_eq!(k.call(FUSE_UNLINK, d.nodeid, &[b"g\0"]), Got::Reply(vec![]));
    assert_eq!(k.call(FUSE_UNLINK, d.nodeid, &[b"s\0"]), Got::Reply(vec![]));
    assert_eq!(k.call(FUSE_RMDIR, ROOT, &[b"d\0"]), Got::Reply(vec![]));
    assert_eq!(fs.getattr(d.nodeid).map(|a| a.nlink).ok(), Some(0));
    assert_eq!(k.call(FUSE_FORGET, d.nodeid, &[forget.as_bytes()]), Got::Nothing);
    assert!(fs.getattr(d.nodeid).is_err());
    // Only in the root: elsewhere the name is an ordinary missing one.
    let d2 = k.mkdir(ROOT, "d2", 0o755, 0);
    let e: EntryOut = k.call(FUSE_LOOKUP, d2.nodeid, &[&inode_name(f.nodeid)]).read();
    assert_eq!((e.nodeid, e.entry_valid), (0, 3600));
}

#[test]
fn inode_names_of_free_unlinked_impossible_or_malformed_numbers_are_enoent() {
    let fs = fs();
    let mut k = with_inode_names(fs.clone());
    let f = k.create(ROOT, "f", 0o644, 0);
    let gone = k.create(ROOT, "gone", 0o644, 0);
    assert_eq!(k.call(FUSE_UNLINK, ROOT, &[b"gone\0"]), Got::Reply(vec![]));
    // Unlinked but still open, it is not found (and then freed).
    let open_unlinked = k.call(FUSE_LOOKUP, ROOT, &[&inode_name(gone.nodeid)]);
    assert_eq!(open_unlinked, Got::Error(libc::ENOENT));
    assert_eq!(fs.getattr(gone.nodeid).map(|a| a.nlink).ok(), Some(0));
    let release = ReleaseIn::default();
    assert_eq!(
        k.call(FUSE_RELEASE, gone.nodeid, &[release.as_bytes()]),
        Got::Reply(vec![])
    );
    assert_eq!(
        k.call(FUSE_FORGET, gone.nodeid, &[ForgetIn { nlookup: 1 }.as_bytes()]),
        Got::Nothing
    );
    let leading_zero = format!(".novafs-ino.0{}\0", f.nodeid).into_bytes();
    let plus = format!(".novafs-ino.+{}\0", f.nodeid).into_bytes();
    for name in [
        inode_name(gone.nodeid),
        inode_name(0),
        inode_name(f.nodeid + 1000),
        inode_name(1 << 40),
        inode_name(u64::MAX),
        b".novafs-ino.18446744073709551616\0".to_vec(),
        b".novafs-ino.\0".to_vec(),
        b".novafs-ino.abc\0".to_vec(),
        leading_zero,
        plus,
    ] {
        // A plain error, not a negative entry the kernel would keep: the
        // number may come alive later.
        let got = k.call(FUSE_LOOKUP, ROOT, &[&name]);
        assert_eq!(got, Got::Error(libc::ENOENT), "{}", String::from_utf8_lossy(&name));
    }
}

#[test]
fn inode_names_are_reserved_in_the_root_unlisted_and_uncreatable() {
    let fs = fs();
    // Made while the option was off: hidden while it is on.
    let mut off = Kernel::mounted_on(fs.clone());
    let old = off.create(ROOT, ".novafs-ino.999999", 0o644, 0);
    let mut k = with_inode_names(fs.clone());
    let a = k.create(ROOT, "a", 0o644, 0);
    let d = k.mkdir(ROOT, "d", 0o755, 0);
    let o: OpenOut = k.call(FUSE_OPENDIR, ROOT, &[OpenIn::default().as_bytes()]).read();
    for op in [FUSE_READDIR, FUSE_READDIRPLUS] {
        let listed = names(k.list(op, ROOT, o.fh, 0, 4096).bytes(), op == FUSE_READDIRPLUS);
        let listed: Vec<&str> = listed.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(listed, [".", "..", "a", "d"], "opcode {op}");
    }
    assert_eq!(
        k.call(FUSE_LOOKUP, ROOT, &[b".novafs-ino.999999\0"]),
        Got::Error(libc::ENOENT)
    );
    let mknod = MknodIn {
        mode: libc::S_IFREG | 0o644,
        ..MknodIn::default()
    };
    let mkdir = MkdirIn { mode: 0o755, umask: 0 };
    let create = CreateIn {
        flags: (libc::O_CREAT | libc::O_RDWR) as u32,
        mode: libc::S_IFREG | 0o644,
        ..CreateIn::default()
    };
    let link = LinkIn { oldnodeid: a.nodeid };
    let into_root = RenameIn { newdir: ROOT };
    let into_d = RenameIn { newdir: d.nodeid };
    for name in [&b".novafs-ino.5\0"[..], b".novafs-ino.999999\0", b".novafs-ino.x\0"] {
        for (op, parts) in [
            (FUSE_MKNOD, vec![mknod.as_bytes(), name]),
            (FUSE_MKDIR, vec![mkdir.as_bytes(), name]),
            (FUSE_CREATE, vec![create.as_bytes(), name]),
            (FUSE_SYMLINK, vec![name, b"a\0"]),
            (FUSE_LINK, vec![link.as_bytes(), name]),
            (FUSE_RENAME, vec![into_root.as_bytes(), b"a\0", name]),
            (FUSE_RENAME, vec![into_d.as_bytes(), name, b"x\0"]),
            (FUSE_UNLINK, vec![name]),
            (FUSE_RMDIR, vec![name]),
        ] {
            let got = k.call(op, ROOT, &parts);
            assert_eq!(
                got,
                Got::Error(libc::EPERM),
                "opcode {op}, {}",
                String::from_utf8_lossy(name)
            );
        }
    }
    // Nothing changed; the real file under such a name is still there.
    assert_eq!(
        fs.lookup(ROOT, b".novafs-ino.999999").map(|x| x.ino).ok(),
        Some(old.nodeid)
    );
    assert_eq!(fs.lookup(ROOT, b"a").map(|x| x.ino).ok(), Some(a.nodeid));
    // Outside the root they are ordinary names.
    let sub = k.mkdir(d.nodeid, ".novafs-ino.5", 0o700, 0);
    assert_ne!(sub.nodeid, 0);
    let r = RenameIn { newdir: d.nodeid };
    let moved = k.call(
        FUSE_RENAME,
        d.nodeid,
        &[r.as_bytes(), b".novafs-ino.5\0", b".novafs-ino.6\0"],
    );
    assert_eq!(moved, Got::Reply(vec![]));
}

#[test]
fn without_inode_names_the_names_are_ordinary() {
    let mut k = Kernel::mounted();
    let f = k.create(ROOT, "f", 0o644, 0);
    let name = format!(".novafs-ino.{}", f.nodeid);
    let e: EntryOut = k.call(FUSE_LOOKUP, ROOT, &[name.as_bytes(), b"\0"]).read();
    assert_eq!((e.nodeid, e.entry_valid), (0, 3600), "a cacheable missing name");
    let made = k.create(ROOT, &name, 0o600, 0);
    assert_ne!(made.nodeid, f.nodeid);
    let e: EntryOut = k.call(FUSE_LOOKUP, ROOT, &[name.as_bytes(), b"\0"]).read();
    assert_eq!((e.nodeid, e.attr.mode), (made.nodeid, libc::S_IFREG | 0o600));
    let o: OpenOut = k.call(FUSE_OPENDIR, ROOT, &[OpenIn::default().as_bytes()]).read();
    let listed = names(k.list(FUSE_READDIR, ROOT, o.fh, 0, 4096).bytes(), false);
    assert!(listed.iter().any(|(n, _, _)| *n == name), "{listed:?}");
}

#[test]
fn the_writeback_cache_is_taken_only_when_asked_and_offered() {
    let flags = |o: InitOut| u64::from(o.flags) | u64::from(o.flags2) << 32;
    let mut k = Kernel::new(FuseFs::new(fs()).with_writeback_cache(true));
    assert_ne!(flags(k.init(!FUSE_OVER_IO_URING).read()) & FUSE_WRITEBACK_CACHE, 0);
    assert!(k.fuse.writeback_cache_granted());
    let mut k = Kernel::new(FuseFs::new(fs()).with_writeback_cache(true));
    let offered = !FUSE_OVER_IO_URING & !FUSE_WRITEBACK_CACHE;
    assert_eq!(flags(k.init(offered).read()) & FUSE_WRITEBACK_CACHE, 0);
    assert!(!k.fuse.writeback_cache_granted());
}

/// The kernel writes back whole pages: an append to an append-only file
/// comes as a write of the page from its start, which is taken when the
/// bytes below the end are unchanged; its times come as explicit ones.
#[test]
fn with_the_writeback_cache_an_append_only_file_takes_appends_only() {
    let mut k = Kernel::new(FuseFs::new(fs()).with_writeback_cache(true));
    k.init(!FUSE_OVER_IO_URING);
    let f = k.mknod(ROOT, "f", 0o644).nodeid;
    k.write(f, 0, b"data").read::<WriteOut>();
    let append_only = SetAttr::default().flags(Some(novafs::FLAG_APPEND));
    k.fuse.fs.setattr(f, &append_only).expect("chattr +a");
    let cached = |k: &mut Kernel, data: &[u8]| {
        let w = WriteIn {
            size: data.len() as u32,
            write_flags: FUSE_WRITE_CACHE,
            ..WriteIn::default()
        };
        k.call(FUSE_WRITE, f, &[w.as_bytes(), data])
    };
    assert_eq!(cached(&mut k, b"datamore").read::<WriteOut>().size, 8);
    assert_eq!(k.read(f, 0, 64), Got::Reply(b"datamore".to_vec()));
    // A page that changes what is there is refused, as is a write from
    // outside the cache below the end; neither changes anything.
    assert_eq!(cached(&mut k, b"DATAmore!"), Got::Error(libc::EPERM));
    assert_eq!(k.write(f, 0, b"datamore!"), Got::Error(libc::EPERM));
    assert_eq!(k.read(f, 0, 64), Got::Reply(b"datamore".to_vec()));
    // The times the kernel keeps after a write are taken; explicit
    // access and modification times stay refused.
    let times = |valid| SetattrIn {
        valid,
        atime: 5,
        mtime: 6,
        ctime: 7,
        ..SetattrIn::default()
    };
    let a: AttrOut = k
        .call(FUSE_SETATTR, f, &[times(FATTR_MTIME | FATTR_CTIME).as_bytes()])
        .read();
    assert_eq!((a.attr.mtime, a.attr.ctime), (6, 7));
    let both = times(FATTR_ATIME | FATTR_MTIME | FATTR_CTIME);
    assert_eq!(k.call(FUSE_SETATTR, f, &[both.as_bytes()]), Got::Error(libc::EPERM));
}
