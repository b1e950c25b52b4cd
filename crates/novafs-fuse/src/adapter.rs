//! The `fuser::Filesystem` face of [`FuseFs`], which serves the fuser
//! session until it moves to the crate's own transports. What each request
//! does, and why the kernel may cache what it is told, is `handler`'s
//! (which answers the same requests through [`crate::transport::Handler`]).

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, IoctlFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};
use novafs::{Attr, Error, FileType, Make, SetAttr};

pub(crate) use crate::handler::FuseFs;
use crate::handler::{flags_of_xflags, lost_placeholder, xflags_of, Settled, Who, ATTR_TTL, BLOCK_SIZE};
use crate::wire::abi::{FOPEN_KEEP_CACHE, FUSE_DONT_MASK};
use crate::wire::request::Negotiated;

/// Largest write we accept in one request: fuser's buffer size. The
/// kernel caps it at `fs.fuse.max_pages_limit` pages (256, i.e. 1 MiB, by
/// default); a larger write(2) arrives as several requests, each atomic.
const MAX_WRITE: u32 = 16 << 20;

/// Who sent a fuser request.
fn who(req: &Request) -> Who {
    Who {
        pid: req.pid(),
        uid: req.uid(),
        gid: req.gid(),
    }
}

/// The errno for a core error, logged as `handler::errno` does.
fn errno(op: &str, e: &Error) -> Errno {
    Errno::from_i32(crate::handler::errno(op, e))
}

fn name_bytes(name: &OsStr) -> &[u8] {
    name.as_bytes()
}

fn system_time(ns: i64) -> SystemTime {
    let d = Duration::from_nanos(ns.unsigned_abs());
    if ns >= 0 {
        UNIX_EPOCH + d
    } else {
        UNIX_EPOCH - d
    }
}

fn nanos(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_nanos()).map_or(i64::MIN, |n| -n),
    }
}

/// Nanoseconds since the epoch of a time the kernel sent in a request.
/// The kernel's timespec has whole seconds rounded down and nanoseconds in
/// 0..1e9; for a time before 1970 fuser 0.18 builds the epoch minus
/// (|seconds| + nanoseconds), applying the nanoseconds the wrong way (its
/// own TODO). This reads the pair back and applies them forwards, so
/// 1960-05-01 12:00:00.123456789 is stored as itself. Replies are right:
/// fuser converts a pre-1970 `SystemTime` back to a pair correctly.
fn requested_nanos(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(_) => nanos(t),
        Err(e) => {
            let d = e.duration();
            i64::try_from(d.as_secs())
                .ok()
                .and_then(|s| s.checked_mul(-1_000_000_000))
                .map_or(i64::MIN, |s| s + i64::from(d.subsec_nanos()))
        }
    }
}

fn time_or_now(t: TimeOrNow) -> i64 {
    match t {
        TimeOrNow::SpecificTime(t) => requested_nanos(t),
        TimeOrNow::Now => nanos(SystemTime::now()),
    }
}

fn kind(k: FileType) -> fuser::FileType {
    match k {
        FileType::RegularFile => fuser::FileType::RegularFile,
        FileType::Directory => fuser::FileType::Directory,
        FileType::Symlink => fuser::FileType::Symlink,
        FileType::CharDevice => fuser::FileType::CharDevice,
        FileType::BlockDevice => fuser::FileType::BlockDevice,
        FileType::NamedPipe => fuser::FileType::NamedPipe,
        FileType::Socket => fuser::FileType::Socket,
    }
}

fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: system_time(a.atime),
        mtime: system_time(a.mtime),
        ctime: system_time(a.ctime),
        crtime: system_time(a.ctime),
        kind: kind(a.kind),
        perm: (a.perm & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        // Stored from mknod's 32-bit device number, so it fits.
        rdev: u32::try_from(a.rdev).unwrap_or(u32::MAX),
        blksize: BLOCK_SIZE,
        flags: 0,
    }
}

/// A cacheable "no such name": node id 0 with a timeout (FUSE protocol).
fn negative_entry(reply: ReplyEntry) {
    let none = FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: fuser::FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: BLOCK_SIZE,
        flags: 0,
    };
    reply.entry(&ATTR_TTL, &none, Generation(0));
}

fn reply_empty(op: &str, reply: ReplyEmpty, r: Result<(), Error>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(op, &e)),
    }
}

/// The xattr size protocol: asked with size 0, the length; else the bytes
/// if they fit, ERANGE if not.
fn reply_xattr(op: &str, reply: ReplyXattr, size: u32, r: Result<Vec<u8>, Error>) {
    match r {
        Ok(v) if size == 0 => reply.size(v.len() as u32),
        Ok(v) if v.len() <= size as usize => reply.data(&v),
        Ok(_) => reply.error(Errno::ERANGE),
        Err(e) => reply.error(errno(op, &e)),
    }
}

impl FuseFs {
    /// Answers with an entry, which the kernel counts as one lookup of it,
    /// kept ([`Fs::remember`]) until it forgets.
    fn fuser_entry(&self, op: &str, reply: ReplyEntry, a: &Attr) {
        if let Err(e) = self.fs.remember(a.ino) {
            return reply.error(errno(op, &e));
        }
        reply.entry(&ATTR_TTL, &file_attr(a), Generation(a.generation));
    }

    fn reply_entry(&self, op: &str, reply: ReplyEntry, r: Result<Attr, Error>) {
        match r {
            Ok(a) => self.fuser_entry(op, reply, &a),
            Err(e) => reply.error(errno(op, &e)),
        }
    }
}

impl Filesystem for FuseFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        if let Err(max) = config.set_max_write(MAX_WRITE) {
            let _ = config.set_max_write(max);
        }
        // Each is optional: an older kernel just goes without.
        for cap in [
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_READDIRPLUS_AUTO,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_CACHE_SYMLINKS,
            // File handles (open_by_handle_at, NFS export) that stay valid
            // after the kernel drops an inode and across remounts: inode
            // numbers and generations are persistent.
            InitFlags::FUSE_EXPORT_SUPPORT,
        ] {
            if config.add_capabilities(cap).is_err() {
                tracing::info!("kernel lacks FUSE capability {cap:?}");
            }
        }
        // POSIX ACLs: the kernel checks them (with default_permissions) and
        // caches them; keeping the mode in step, inheriting default ACLs
        // and so the umask are the core's (`xattr`).
        if config.add_capabilities(InitFlags::FUSE_POSIX_ACL).is_err() {
            tracing::warn!("kernel lacks FUSE POSIX ACL support: ACLs are stored but not enforced");
        } else {
            let dont_mask = config.add_capabilities(InitFlags::FUSE_DONT_MASK).is_ok();
            // Only the umask rule reads what fuser settled.
            let _ = self.settled.set(Settled {
                wire: Negotiated::default(),
                flags: if dont_mask { FUSE_DONT_MASK } else { 0 },
                max_write: MAX_WRITE,
            });
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        // "." of any inode is how the kernel finds one by a file handle
        // once it has dropped it (export support).
        let found = match name.as_bytes() {
            b"." => self.fs.getattr(parent.0),
            name => self.fs.lookup(parent.0, name),
        };
        match found {
            Ok(a) => self.fuser_entry("lookup", reply, &a),
            Err(Error::NotFound) => negative_entry(reply),
            // A lost inode: its name gets a node with placeholder
            // attributes that expire at once, so stat (GETATTR) and open
            // answer EIO while unlink and rename over it reach the name.
            Err(e) if e.errno() == libc::EIO && name.as_bytes() != b"." => {
                match self.fs.dentry(parent.0, name.as_bytes()) {
                    Ok(d) if self.fs.remember(d.ino).is_ok() => {
                        let _ = errno("lookup", &e); // logged
                        let attr = file_attr(&lost_placeholder(d.ino, d.kind));
                        reply.entry(&Duration::ZERO, &attr, Generation(0));
                    }
                    _ => reply.error(errno("lookup", &e)),
                }
            }
            Err(e) => reply.error(errno("lookup", &e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.fs.getattr(ino.0) {
            Ok(a) => reply.attr(&ATTR_TTL, &file_attr(&a)),
            Err(e) => reply.error(errno("getattr", &e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mode = match mode {
            Some(m) if m & libc::S_ISGID != 0 => match self.group_id_kept(who(req), ino.0, gid) {
                Ok(true) => Some(m),
                Ok(false) => Some(m & !libc::S_ISGID),
                Err(e) => return reply.error(errno("setattr", &e)),
            },
            m => m,
        };
        let now = |t: &Option<TimeOrNow>| t.is_none_or(|t| matches!(t, TimeOrNow::Now));
        // No flags: chattr comes as an ioctl.
        let set = SetAttr::default()
            .mode(mode)
            .uid(uid)
            .gid(gid)
            .size(size)
            .atime(atime.map(time_or_now))
            .mtime(mtime.map(time_or_now))
            .ctime(ctime.map(requested_nanos))
            .times_now((atime.is_some() || mtime.is_some()) && now(&atime) && now(&mtime));
        match self.fs.setattr(ino.0, &set) {
            Ok(a) => reply.attr(&ATTR_TTL, &file_attr(&a)),
            Err(e) => reply.error(errno("setattr", &e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.fs.readlink(ino.0) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno("readlink", &e)),
        }
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let r = if mode & libc::S_IFMT == libc::S_IFDIR {
            Err(Error::Invalid("mknod cannot make directories"))
        } else {
            let m = Make::new(mode, 0, 0).rdev(u64::from(rdev)).umask(umask);
            self.make(who(req), parent.0, name_bytes(name), m)
        };
        self.reply_entry("mknod", reply, r);
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let m = Make::new(libc::S_IFDIR | (mode & 0o7777), 0, 0).umask(umask);
        let r = self.make(who(req), parent.0, name_bytes(name), m);
        self.reply_entry("mkdir", reply, r);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty("unlink", reply, self.fs.unlink(parent.0, name_bytes(name)));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty("rmdir", reply, self.fs.rmdir(parent.0, name_bytes(name)));
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let target = target.as_os_str().as_bytes();
        let r = self
            .fs
            .symlink(parent.0, name_bytes(link_name), target, req.uid(), req.gid());
        self.reply_entry("symlink", reply, r);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        // A whiteout (RENAME_WHITEOUT) is the caller's, as on ext4.
        let r = self.fs.rename_as(
            parent.0,
            name_bytes(name),
            newparent.0,
            name_bytes(newname),
            flags.bits(),
            req.uid(),
            req.gid(),
        );
        reply_empty("rename", reply, r);
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let r = self.fs.link(ino.0, newparent.0, name_bytes(newname));
        self.reply_entry("link", reply, r);
    }

    /// Registers the handle with the core, which keeps an unlinked file
    /// alive until its last release.
    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let writing = flags.0 & libc::O_ACCMODE != libc::O_RDONLY || flags.0 & libc::O_TRUNC != 0;
        let appending = flags.0 & libc::O_APPEND != 0 && flags.0 & libc::O_TRUNC == 0;
        match self
            .fs
            .check_open(ino.0, writing, appending)
            .and_then(|()| self.fs.open_handle(ino.0))
        {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::from_bits_retain(self.open_flags(ino.0))),
            Err(e) => reply.error(errno("open", &e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let mut buf = vec![0u8; size as usize];
        match self.fs.read(ino.0, offset, &mut buf) {
            Ok(n) => reply.data(&buf[..n]),
            Err(e) => reply.error(errno("read", &e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.fs.write(ino.0, offset, data) {
            // At most MAX_WRITE bytes arrive in one request.
            Ok(n) => reply.written(u32::try_from(n).unwrap_or(u32::MAX)),
            Err(e) => reply.error(errno("write", &e)),
        }
    }

    /// See the module docs: nothing to flush, ever.
    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        reply_empty("release", reply, self.fs.release_handle(ino.0));
    }

    /// See the module docs: every answered request is already durable.
    fn fsync(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
        reply.opened(FileHandle(fh), FopenFlags::empty());
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.listings.lock().unwrap_or_else(|p| p.into_inner()).remove(&fh.0);
        reply.ok();
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let r = self.listing_end(ino.0, fh.0, offset).and_then(|end| {
            self.fs.readdir_to(ino.0, offset, end, |e| {
                // `add` returns true when the entry did not fit: stop
                // there, the kernel asks again from the last entry's offset.
                reply.add(INodeNo(e.ino), e.next_offset, kind(e.kind), OsStr::from_bytes(&e.name))
            })
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno("readdir", &e)),
        }
    }

    fn readdirplus(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let end = match self.listing_end(ino.0, fh.0, offset) {
            Ok(end) => end,
            Err(e) => return reply.error(errno("readdirplus", &e)),
        };
        let r = self.fs.readdir_plus(ino.0, offset, end, |e, a| {
            // Each entry but "." and ".." counts as a lookup (as `entry`).
            let counted = e.name != b"." && e.name != b"..";
            if counted && self.fs.remember(e.ino).is_err() {
                return false; // gone meanwhile: left out
            }
            // A lost inode's name is listed with placeholder attributes
            // that expire at once (as `lookup` answers it): stat and open
            // answer EIO. (A zero node id would keep
            // the kernel from caching it, but fuser gives the dirent the
            // same number, and glibc's readdir skips d_ino 0.)
            let (attr, ttl) = match a {
                Some(a) => (*a, ATTR_TTL),
                None => (lost_placeholder(e.ino, e.kind), Duration::ZERO),
            };
            let full = reply.add(
                INodeNo(e.ino),
                e.next_offset,
                OsStr::from_bytes(&e.name),
                &ttl,
                &file_attr(&attr),
                Generation(attr.generation),
            );
            if full && counted {
                let _ = self.fs.forget(e.ino, 1); // not sent after all
            }
            full
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno("readdirplus", &e)),
        }
    }

    /// Setting an access ACL sets the mode it implies; like chmod, it
    /// keeps set-group-ID only for a caller in the group (Linux's
    /// `posix_acl_update_mode`; xfstests generic/375).
    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        let r = match (u32::try_from(flags), position) {
            (Ok(flags), 0) => {
                self.fs
                    .setxattr(ino.0, name_bytes(name), value, flags)
                    .and_then(|()| match name.as_bytes() {
                        b"system.posix_acl_access" => self.acl_set_group_id(who(req), ino.0),
                        _ => Ok(()),
                    })
            }
            _ => Err(Error::Invalid("setxattr flags or position")),
        };
        reply_empty("setxattr", reply, r);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        reply_xattr("getxattr", reply, size, self.fs.getxattr(ino.0, name_bytes(name)));
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        reply_xattr("listxattr", reply, size, self.fs.listxattr(ino.0));
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty("removexattr", reply, self.fs.removexattr(ino.0, name_bytes(name)));
    }

    /// chattr and lsattr: FS_IOC_GETFLAGS and FS_IOC_SETFLAGS (a 4-byte
    /// int each way), and their XFS-style twins FS_IOC_FSGETXATTR and
    /// FS_IOC_FSSETXATTR (a `struct fsxattr`), which the kernel's fileattr
    /// code also asks for. The kernel checks who may set immutable and
    /// append-only before asking.
    /// A project ID or an extent size hint in `struct fsxattr` is
    /// EOPNOTSUPP, as on tmpfs: novafs keeps neither.
    fn ioctl(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        const FS_IOC_GETFLAGS: u32 = 0x8008_6601;
        const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
        const FS_IOC_FSGETXATTR: u32 = 0x801c_581f;
        const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;
        let word = |at: usize| {
            in_data
                .get(at..at + 4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_ne_bytes)
        };
        let set = |flags: Option<u32>, reply: ReplyIoctl| match flags.map(|f| self.fs.set_flags(ino.0, f)) {
            Some(Ok(_)) => reply.ioctl(0, &[]),
            Some(Err(e)) => reply.error(errno("ioctl", &e)),
            None => reply.error(Errno::EINVAL),
        };
        match cmd {
            FS_IOC_GETFLAGS | FS_IOC_FSGETXATTR => match self.fs.getattr(ino.0) {
                Ok(a) if cmd == FS_IOC_GETFLAGS => reply.ioctl(0, &a.flags.to_ne_bytes()),
                // struct fsxattr: fsx_xflags first, 24 bytes of zeros after.
                Ok(a) => {
                    let mut fsx = [0u8; 28];
                    fsx[..4].copy_from_slice(&xflags_of(a.flags).to_ne_bytes());
                    reply.ioctl(0, &fsx)
                }
                Err(e) => reply.error(errno("ioctl", &e)),
            },
            FS_IOC_SETFLAGS => set(word(0), reply),
            // fsx_extsize, fsx_projid and fsx_cowextsize must be 0.
            FS_IOC_FSSETXATTR if [4, 12, 16].iter().any(|&at| word(at).is_some_and(|w| w != 0)) => {
                reply.error(Errno::EOPNOTSUPP)
            }
            FS_IOC_FSSETXATTR => set(word(0).map(flags_of_xflags), reply),
            _ => reply.error(Errno::ENOTTY),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if let Err(e) = self.fs.forget(ino.0, nlookup) {
            tracing::debug!(ino = ino.0, error = %e, "forget");
        }
    }

    /// See the module docs.
    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.fs.statfs();
        let bsize = u32::try_from(s.block_size).unwrap_or(BLOCK_SIZE);
        let name_max = u32::try_from(s.name_max).unwrap_or(255);
        // Available: what ordinary writes may use (the reserve that keeps
        // deletes working on a full device is not).
        reply.statfs(
            s.blocks,
            s.blocks_free,
            s.blocks_avail,
            s.files,
            s.files_free,
            bsize,
            name_max,
            bsize,
        );
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let m = Make::new(libc::S_IFREG | (mode & 0o7777), 0, 0)
            .umask(umask)
            .opened(true);
        // The reply counts as a lookup too (see `entry`).
        let r = self
            .make(who(req), parent.0, name_bytes(name), m)
            .and_then(|a| self.fs.remember(a.ino).map(|()| a));
        match r {
            Ok(a) => reply.created(
                &ATTR_TTL,
                &file_attr(&a),
                Generation(a.generation),
                FileHandle(0),
                FopenFlags::from_bits_retain(FOPEN_KEEP_CACHE),
            ),
            Err(e) => reply.error(errno("create", &e)),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let r = match u32::try_from(mode) {
            Ok(mode) => self.fs.fallocate(ino.0, mode, offset, length),
            Err(_) => Err(Error::Invalid("fallocate mode")),
        };
        reply_empty("fallocate", reply, r);
    }

    /// Only SEEK_DATA and SEEK_HOLE reach the file system; the kernel
    /// handles the other whence values itself.
    fn lseek(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: i64, whence: i32, reply: ReplyLseek) {
        let r = match (u64::try_from(offset), u32::try_from(whence)) {
            (Ok(off), Ok(whence)) => self.fs.lseek(ino.0, off, whence),
            (Err(_), _) => Err(Error::NoSuchOffset),
            (_, Err(_)) => Err(Error::Invalid("lseek whence")),
        };
        match r.map(i64::try_from) {
            Ok(Ok(off)) => reply.offset(off),
            Ok(Err(_)) => reply.error(Errno::from_i32(libc::EOVERFLOW)),
            Err(e) => reply.error(errno("lseek", &e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_including_before_the_epoch() {
        for ns in [0i64, 1, 1_700_000_000_123_456_789, -1, -86_400_000_000_007] {
            assert_eq!(nanos(system_time(ns)), ns);
        }
    }

    #[test]
    fn a_requested_time_before_1970_keeps_its_nanoseconds_forwards() {
        // What fuser hands over for the kernel's (-305_812_800, 123_456_789).
        let sent = UNIX_EPOCH - Duration::new(305_812_800, 123_456_789);
        assert_eq!(requested_nanos(sent), -305_812_800_000_000_000 + 123_456_789);
        assert_eq!(requested_nanos(UNIX_EPOCH - Duration::new(1, 0)), -1_000_000_000);
        assert_eq!(requested_nanos(UNIX_EPOCH + Duration::new(5, 7)), 5_000_000_007);
        assert_eq!(requested_nanos(UNIX_EPOCH - Duration::new(10_000_000_000, 0)), i64::MIN);
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
            ctime: 3,
            rdev: 0,
            generation: 7,
            flags: 0,
        };
        let f = file_attr(&a);
        assert_eq!(f.ino, INodeNo(42));
        assert_eq!(f.kind, fuser::FileType::Directory);
        assert_eq!(f.perm, 0o2755);
        assert_eq!((f.uid, f.gid, f.nlink), (1000, 100, 3));
        assert_eq!(f.ctime, UNIX_EPOCH + Duration::from_nanos(3));
    }
}
