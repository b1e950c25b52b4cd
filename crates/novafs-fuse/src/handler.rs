//! [`FuseFs`]: each FUSE request becomes one [`Fs`] call, its result one
//! reply. Owns nothing but the shared `Fs`; may touch only its public API,
//! the wire protocol (`wire`) and the transport interface it implements
//! ([`Handler`]).
//!
//! # What the kernel may cache, and why it is never stale
//!
//! The image is locked exclusively by this daemon (`pm` takes an `flock`),
//! so every change to the file system arrives as a request from this one
//! kernel mount, and for each request it sends the kernel updates or
//! invalidates what it caches: create/mkdir/link/rename/unlink update the
//! dentry cache and invalidate the parents' (and a victim's) attributes;
//! write, truncate and fallocate update the size and invalidate times and
//! block counts; the core changes no attribute on its own but the access
//! time a read updates (the mount's relatime rule), which the next getattr
//! reports once the TTL lets it. Hence:
//!
//! - entries, negative entries and attributes are cached for [`ATTR_TTL`]:
//!   the TTL only bounds how long a bug elsewhere could stay visible;
//! - file pages stay cached across opens (`FOPEN_KEEP_CACHE`, or no OPEN
//!   at all): every write passes through this kernel's page cache, and
//!   truncate and hole punching drop the affected pages. Where opens are
//!   sent, an open when a read must update the access time drops them, so
//!   that read reaches the core; without OPEN requests only reads that miss
//!   the page cache reach it (the README's "Access times" says why novafs
//!   sends no invalidation after a write);
//! - symlink targets are cached (`FUSE_CACHE_SYMLINKS`): they never change;
//! - there is no writeback cache unless the mount asks for one
//!   ([`FuseFs::with_writeback_cache`]): `write(2)` returns only after
//!   [`Fs::write`] has made the data durable (strict mode, NOVA §4.4).
//!   With it, the kernel keeps written pages and the file's size and
//!   times, and sends them as WRITE and SETATTR requests when it writes
//!   back: at the latest at `fsync`, at each `close` (the kernel's FLUSH
//!   writes back first, whatever the answer to FLUSH) and at unmount.
//!   Each such request is durable when answered, as any other.
//!
//! # fsync, fsyncdir and flush
//!
//! They are answered with ENOSYS, which FUSE defines as "success, and never
//! send this again" (libfuse `fuse_lowlevel.h`). Nothing is lost: before
//! the kernel looks at that, it writes back dirty mmap pages as ordinary
//! WRITE requests, each durable when answered, and [`Fs::fsync`] is a no-op
//! because every reply is sent only after the operation is durable. This
//! is NOVA's "fsync is free" without a round trip. But for a relaxed mount
//! that batches its in-place metadata (`novafs::Batching`): there fsync
//! and fsyncdir commit the running transaction, a request each.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use novafs::{Atime, Attr, Caps, Error, FileType, Fs, Make, SetAttr};

use crate::caller::caller;
use crate::transport::dev::Notifier;
use crate::transport::{Answer, Handler, Incoming};
use crate::wire::abi::{self, *};
use crate::wire::reply::{self, Built, DirBuf};
use crate::wire::request::{self, Forgets, Negotiated, Op, Request, SetTime, Setattr};

/// How long the kernel may keep entries and attributes (see the module
/// docs: nothing can change them behind its back).
pub const ATTR_TTL: Duration = Duration::from_secs(3600);

/// Largest write we accept in one request. The kernel caps a request at
/// `fs.fuse.max_pages_limit` pages (256, i.e. 1 MiB, by default); a larger
/// write(2) arrives as several requests, each atomic. A transport's buffer
/// holds one such request and its header.
pub(crate) const MAX_WRITE: u32 = 1 << 20;
const MAX_PAGES: u16 = (MAX_WRITE / novafs::PAGE_SIZE as u32) as u16;

/// Block size reported by stat and statfs: the core's page.
pub(crate) const BLOCK_SIZE: u32 = novafs::PAGE_SIZE as u32;

/// The INIT flags we always ask for, each granted only if the kernel
/// offers it: an older kernel just goes without.
const WANTED: u64 = FUSE_ASYNC_READ
    | FUSE_BIG_WRITES
    | FUSE_MAX_PAGES
    | FUSE_INIT_EXT
    // Every listing with attributes: `ls -l` then needs no lookups.
    | FUSE_DO_READDIRPLUS
    | FUSE_PARALLEL_DIROPS
    // The kernel leaves clearing set-ID bits to us (`kill_set_id`), and
    // in exchange stops asking for security.capability before each write.
    | FUSE_HANDLE_KILLPRIV_V2
    | FUSE_CACHE_SYMLINKS
    // File handles (open_by_handle_at, NFS export) that stay valid after
    // the kernel drops an inode and across remounts: inode numbers and
    // generations are persistent.
    | FUSE_EXPORT_SUPPORT;

/// What INIT settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Settled {
    /// How requests are laid out from now on.
    pub wire: Negotiated,
    /// The INIT flags both sides agreed on (flags2 in the high half).
    pub flags: u64,
    pub max_write: u32,
}

/// novafs behind the FUSE protocol.
pub struct FuseFs {
    pub(crate) fs: Arc<Fs>,
    /// Per open directory handle: where its listing ends
    /// ([`Fs::listing_end`]), taken when it lists from the start.
    pub(crate) listings: Mutex<HashMap<u64, u64>>,
    pub(crate) next_handle: AtomicU64,
    /// Set once by INIT.
    settled: OnceLock<Settled>,
    /// Opens cost no request: OPEN and CREATE are answered ENOSYS, after
    /// which the kernel sends neither (nor RELEASE), keeping file pages
    /// cached from one open to the next; the kernel's references keep
    /// unlinked files instead of handles ([`Fs::lookups_hold_files`]).
    no_open: bool,
    /// Reaches the kernel's caches (`connected`): where novafs itself
    /// changes what the kernel cached, here set-ID bits a WRITE or a
    /// FALLOCATE clears, whose replies carry no attributes.
    notifier: OnceLock<Notifier>,
    /// `.novafs-ino.<N>` in the root names inode N (`inode_names`).
    inode_names: bool,
    /// Ask the kernel for its writeback cache (FUSE_WRITEBACK_CACHE):
    /// writes durable at fsync or close instead of at return.
    writeback_cache: bool,
}

/// Who sent a request, as the request header says.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Who {
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
}

impl FuseFs {
    pub fn new(fs: Arc<Fs>) -> FuseFs {
        FuseFs {
            listings: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            no_open: fs.lookups_hold_files() && fs.atime().0 != Atime::Strict,
            settled: OnceLock::new(),
            notifier: OnceLock::new(),
            inode_names: false,
            writeback_cache: false,
            fs,
        }
    }

    /// [`kill_set_id`](Self::kill_set_id) for a request whose reply
    /// carries no attributes (WRITE, FALLOCATE): the kernel would go on
    /// showing the old mode for as long as it caches the attributes, so
    /// when the mode changed they are invalidated (attributes only: no page
    /// is touched, so this cannot wait on the pages a WRITE holds locked).
    fn kill_set_id_behind_reply(&self, who: Who, ino: u64, a: Attr) -> Result<(), Error> {
        let after = self.kill_set_id(who, a, false)?;
        if after.perm != a.perm {
            if let Some(n) = self.notifier.get() {
                let mut payload = [0u8; 24];
                let len = reply::notify_inval_inode(&mut payload, ino, -1, 0).unwrap_or(0);
                if let Err(e) = n.notify(FUSE_NOTIFY_INVAL_INODE, &payload[..len]) {
                    tracing::warn!(
                        ino,
                        "cannot invalidate cached attributes after clearing set-ID bits: {e}"
                    );
                }
            }
        }
        Ok(())
    }

    /// Clears set-ID bits as FUSE_HANDLE_KILLPRIV_V2 leaves to us on a
    /// write, a truncation, a chown and a fallocate by `who`: the core's
    /// rule ([`novafs::Cred::kill_set_id`]), for the request's caller.
    /// `a` is the file's attributes now; returns them afterwards.
    fn kill_set_id(&self, who: Who, a: Attr, chown: bool) -> Result<Attr, Error> {
        // /proc is read only for a node with set-ID bits; chown clears them
        // on every kind but directories (the core's rule says which).
        if a.kind == FileType::Directory || a.perm & (libc::S_ISUID | libc::S_ISGID) == 0 {
            return Ok(a);
        }
        let mode = caller(who.pid, who.uid, who.gid).kill_set_id(&a, chown);
        if mode == a.perm {
            return Ok(a);
        }
        self.fs.setattr(a.ino, &SetAttr::default().mode(mode))
    }

    /// What INIT settled, once it has.
    pub(crate) fn settled(&self) -> Option<Settled> {
        self.settled.get().copied()
    }

    /// The umask the core must apply: the request's when the kernel
    /// leaves it to us (it took FUSE_DONT_MASK: it passes the umask along
    /// instead of applying it, for the core to apply unless a default ACL
    /// says otherwise, [`Make`]), else none (the kernel applied it).
    pub(crate) fn umask(&self, umask: u32) -> u32 {
        match self.settled.get() {
            Some(s) if s.flags & FUSE_DONT_MASK != 0 => umask,
            _ => 0,
        }
    }

    /// Makes a node as the request asks ([`Fs::make`]).
    pub(crate) fn make(&self, who: Who, parent: u64, name: &[u8], m: Make) -> Result<Attr, Error> {
        let m = m.uid(who.uid).gid(who.gid).umask(self.umask(m.umask));
        self.fs.make(parent, name, &m)
    }

    /// Open flags for a file: its pages stay cached across opens, unless
    /// a read now must update its access time (the mount's atime rule),
    /// which only a read that reaches us can do.
    pub(crate) fn open_flags(&self, ino: u64) -> u32 {
        if self.fs.atime_due(ino).unwrap_or(false) {
            0
        } else {
            FOPEN_KEEP_CACHE
        }
    }

    /// Drops set-group-ID from `ino`'s mode after the request set its
    /// access ACL, unless the caller may keep it ([`novafs::Cred::keeps_set_group_id`]).
    pub(crate) fn acl_set_group_id(&self, who: Who, ino: u64) -> Result<(), Error> {
        let a = self.fs.getattr(ino)?;
        if a.perm & libc::S_ISGID == 0 || self.group_id_kept(who, ino, None)? {
            return Ok(());
        }
        let set = SetAttr::default().mode(a.perm & !libc::S_ISGID);
        self.fs.setattr(ino, &set).map(drop)
    }

    /// Whether a mode the request sets on `ino` keeps set-group-ID: see
    /// [`novafs::Cred::keeps_set_group_id`]. `new_gid` is the group the same
    /// request gives it.
    pub(crate) fn group_id_kept(&self, who: Who, ino: u64, new_gid: Option<u32>) -> Result<bool, Error> {
        let gid = match new_gid {
            Some(g) => g,
            None => self.fs.getattr(ino)?.gid,
        };
        Ok(caller(who.pid, who.uid, who.gid).keeps_set_group_id(gid))
    }

    /// Where the listing through handle `fh` of directory `ino` ends:
    /// fixed when it starts (offset 0: opendir, or a rewind), so renames
    /// beside it cannot make it endless.
    pub(crate) fn listing_end(&self, ino: u64, fh: u64, offset: u64) -> Result<u64, Error> {
        let mut listings = self.listings.lock().unwrap_or_else(|p| p.into_inner());
        if offset == 0 || !listings.contains_key(&fh) {
            listings.insert(fh, self.fs.listing_end(ino)?);
        }
        Ok(listings.get(&fh).copied().unwrap_or(u64::MAX))
    }
}

/// The errno for a core error; unexpected ones (EIO: corruption, media
/// errors) are logged, the rest are ordinary answers.
pub(crate) fn errno(op: &str, e: &Error) -> i32 {
    let code = e.errno();
    if code == libc::EIO {
        tracing::error!("{op}: {e}");
    } else {
        tracing::debug!("{op}: {e}");
    }
    code
}

/// What readdirplus says of an entry whose inode is lost: its number and
/// type (from the directory entry), nothing else known.
pub(crate) fn lost_placeholder(ino: u64, kind: FileType) -> Attr {
    Attr {
        ino,
        kind,
        perm: 0,
        nlink: 1,
        uid: 0,
        gid: 0,
        size: 0,
        blocks: 0,
        atime: 0,
        mtime: 0,
        ctime: 0,
        rdev: 0,
        generation: 0,
        flags: 0,
    }
}

/// A time as the kernel reads it: whole seconds rounded down (as i64
/// bits) and nanoseconds in 0..1e9, also before 1970.
fn wire_time(ns: i64) -> (u64, u32) {
    let secs = ns.div_euclid(1_000_000_000);
    let nsec = ns.rem_euclid(1_000_000_000);
    (secs as u64, nsec as u32)
}

/// The current time in nanoseconds since the epoch, for UTIME_NOW.
fn now_nanos() -> i64 {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

fn wire_attr(a: &Attr) -> abi::Attr {
    let (atime, atimensec) = wire_time(a.atime);
    let (mtime, mtimensec) = wire_time(a.mtime);
    let (ctime, ctimensec) = wire_time(a.ctime);
    abi::Attr {
        ino: a.ino,
        size: a.size,
        blocks: a.blocks,
        atime,
        mtime,
        ctime,
        atimensec,
        mtimensec,
        ctimensec,
        mode: a.kind.mode_bits() | (a.perm & 0o7777),
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        // Stored from mknod's 32-bit device number, so it fits.
        rdev: u32::try_from(a.rdev).unwrap_or(u32::MAX),
        blksize: BLOCK_SIZE,
        flags: 0,
    }
}

fn entry_of(a: &Attr, ttl: Duration) -> EntryOut {
    reply::entry_out(wire_attr(a), a.generation, ttl)
}

/// A built reply as an answer; a transport buffer too small is logged.
fn sent(op: &str, b: Built) -> Answer {
    match b {
        Ok(n) => Answer::Reply(n),
        Err(e) => {
            tracing::error!("{op}: reply of {} bytes in a buffer of {}", e.need, e.have);
            Answer::Error(e.errno())
        }
    }
}

fn failed(op: &str, e: &Error) -> Answer {
    Answer::Error(errno(op, e))
}

fn done(op: &str, r: Result<(), Error>) -> Answer {
    match r {
        Ok(()) => Answer::Reply(0),
        Err(e) => failed(op, &e),
    }
}

/// The xattr size protocol: asked with size 0, the length; else the bytes
/// if they fit, ERANGE if not.
fn xattr(op: &str, out: &mut [u8], size: u32, r: Result<Vec<u8>, Error>) -> Answer {
    match r {
        Ok(v) if size == 0 => sent(op, reply::xattr_size(out, u32::try_from(v.len()).unwrap_or(u32::MAX))),
        Ok(v) if v.len() <= size as usize => sent(op, reply::data(out, &v)),
        Ok(_) => Answer::Error(libc::ERANGE),
        Err(e) => failed(op, &e),
    }
}

impl Handler for FuseFs {
    fn connected(&self, notifier: Notifier) {
        let _ = self.notifier.set(notifier);
    }

    fn handle(&self, inc: &Incoming<'_>, out: &mut [u8]) -> Answer {
        // Which requests an operation costs, in order (RUST_LOG=novafs_fuse=trace).
        tracing::trace!(
            op = crate::stats::opcode_name(inc.header.opcode),
            nodeid = inc.header.nodeid,
            pid = inc.header.pid,
            "request"
        );
        let wire = self.settled().map(|s| s.wire).unwrap_or_default();
        let req = match request::parse(inc, &wire) {
            Ok(req) => req,
            Err(e) => {
                tracing::error!("{e}");
                return match inc.header.opcode {
                    FUSE_FORGET | FUSE_BATCH_FORGET => Answer::Nothing,
                    _ => Answer::Error(e.errno()),
                };
            }
        };
        if self.settled.get().is_none() && !matches!(req.op, Op::Init { .. }) {
            tracing::error!("FUSE opcode {} before INIT", inc.header.opcode);
            return Answer::Error(libc::EIO);
        }
        if let Some(answer) = self.inode_name_answer(&req, out) {
            return answer;
        }
        // What may need the space of a file removed a moment ago.
        let retry = matches!(
            req.op,
            Op::Write { .. } | Op::Fallocate { .. } | Op::Setattr(_) | Op::Setxattr { .. }
        )
        .then(|| (req.clone(), self.fs.inodes_freed()));
        let answer = self.dispatch(req, out);
        match retry {
            Some((req, freed)) if matches!(answer, Answer::Error(libc::ENOSPC)) && self.space_freed_since(freed) => {
                self.dispatch(req, out)
            }
            _ => answer,
        }
    }
}

/// How long a request that found the file system full waits for files
/// removed just before to be freed (see `space_freed_since`).
const FREE_WAIT: Duration = Duration::from_millis(200);

impl FuseFs {
    /// A removed file's space comes back when the kernel forgets it (its
    /// references hold it: `Fs::lookups_hold_files`); the kernel sends that
    /// FORGET through /dev/fuse a moment after the unlink returned, and
    /// freeing a large file takes a while more. `rm big; fallocate -l SIZE
    /// new` on a full file system would fail (xfstests generic/213). So a
    /// request that failed with ENOSPC is tried once more if an inode was
    /// freed since it started (`freed` counted then), waiting at most
    /// [`FREE_WAIT`] for that while a free is due. A failed write,
    /// fallocate, setattr or setxattr changed nothing (each commits whole
    /// or not at all), so trying again is safe.
    fn space_freed_since(&self, freed: u64) -> bool {
        let start = std::time::Instant::now();
        loop {
            let (now, coming) = self.fs.space_coming_back();
            if now != freed {
                return true;
            }
            if !coming || start.elapsed() >= FREE_WAIT {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn dispatch(&self, req: Request<'_>, out: &mut [u8]) -> Answer {
        let who = Who {
            pid: req.pid,
            uid: req.uid,
            gid: req.gid,
        };
        let ino = req.nodeid;
        match req.op {
            Op::Init {
                major,
                minor,
                max_readahead,
                flags,
            } => self.init(major, minor, max_readahead, flags, out),
            // Nothing to tear down: every answered request is durable, and
            // the owner of the `Fs` unmounts it after the session ends.
            Op::Destroy => Answer::Reply(0),
            Op::Lookup { name } => self.lookup(ino, name, out),
            Op::Forget { nlookup } => self.forget(ino, nlookup),
            Op::BatchForget { nodes } => self.batch_forget(nodes),
            Op::Getattr { .. } => self.getattr(ino, out),
            Op::Setattr(set) => self.setattr(who, ino, &set, out),
            Op::Readlink => self.readlink(ino, out),
            Op::Symlink { name, target } => self.symlink(who, ino, name, target, out),
            Op::Mknod {
                name,
                mode,
                rdev,
                umask,
            } => self.mknod(who, ino, name, mode, rdev, umask, out),
            Op::Mkdir { name, mode, umask } => self.mkdir(who, ino, name, mode, umask, out),
            Op::Unlink { name } => done("unlink", self.fs.unlink(ino, name)),
            Op::Rmdir { name } => done("rmdir", self.fs.rmdir(ino, name)),
            Op::Rename {
                name,
                newdir,
                newname,
                flags,
            } => self.rename(who, ino, name, newdir, newname, flags),
            Op::Link { oldnodeid, newname } => self.link(oldnodeid, ino, newname, out),
            Op::Open { flags, .. } => self.open(ino, flags, out),
            Op::Read { offset, size, .. } => self.read(ino, offset, size, out),
            Op::Write {
                offset,
                data,
                write_flags,
                ..
            } => self.write(who, ino, offset, data, write_flags, out),
            Op::Statfs => self.statfs(out),
            Op::Release { .. } => self.release(ino),
            // A batching relaxed mount's fsync commits its running
            // transaction; otherwise see the module docs.
            Op::Fsync { .. } | Op::Fsyncdir { .. } if self.fs.batches() => done("fsync", self.fs.fsync(ino)),
            Op::Flush { .. } | Op::Fsync { .. } | Op::Fsyncdir { .. } => Answer::Error(libc::ENOSYS),
            Op::Setxattr { name, value, flags, .. } => self.setxattr(who, ino, name, value, flags),
            Op::Getxattr { name, size } => {
                tracing::trace!(name = %String::from_utf8_lossy(name), "getxattr");
                xattr("getxattr", out, size, self.fs.getxattr(ino, name))
            }
            Op::Listxattr { size } => {
                let caller = || caller(who.pid, who.uid, who.gid);
                let names = self.fs.listxattr(ino).map(|n| self.fs.visible_xattrs(ino, n, caller));
                xattr("listxattr", out, size, names)
            }
            Op::Removexattr { name } => done("removexattr", self.fs.removexattr(ino, name)),
            Op::Opendir { .. } => self.opendir(out),
            Op::Readdir { fh, offset, size } => self.readdir(ino, fh, offset, size, out),
            Op::Readdirplus { fh, offset, size } => self.readdirplus(ino, fh, offset, size, out),
            Op::Releasedir { fh, .. } => self.releasedir(fh),
            Op::Create { name, mode, umask, .. } => self.create(who, ino, name, mode, umask, out),
            Op::Ioctl { cmd, data, .. } => self.ioctl(ino, cmd, data, out),
            Op::Fallocate {
                offset, length, mode, ..
            } => done("fallocate", self.fallocate(who, ino, mode, offset, length)),
            Op::Lseek { offset, whence, .. } => self.lseek(ino, offset, whence, out),
            // With default_permissions the kernel checks access itself;
            // ENOSYS stops it asking. Requests are short and durable when
            // answered, so none is worth interrupting: ENOSYS stops those
            // too. Locks stay local to the kernel; the rest novafs lacks.
            Op::Access { .. } | Op::Interrupt { .. } | Op::Unknown(_) => Answer::Error(libc::ENOSYS),
        }
    }

    /// Agrees on the protocol: the smaller minor version, and of the
    /// flags in [`WANTED`] those the kernel offers.
    fn init(&self, major: u32, minor: u32, max_readahead: u32, offered: u64, out: &mut [u8]) -> Answer {
        if major > FUSE_KERNEL_VERSION {
            // Our version alone: the kernel then sends an INIT we speak.
            let ours = InitOut {
                major: FUSE_KERNEL_VERSION,
                minor: FUSE_KERNEL_MINOR_VERSION,
                ..InitOut::default()
            };
            return sent("init", reply::init(out, &ours, FUSE_KERNEL_MINOR_VERSION));
        }
        if major < FUSE_KERNEL_VERSION || minor < 6 {
            tracing::error!("unsupported FUSE protocol {major}.{minor}");
            return Answer::Error(libc::EPROTO);
        }
        // FUSE_OVER_IO_URING is the session's to add: only it knows
        // whether its queues exist.
        let mut wanted = WANTED;
        for cap in [
            FUSE_DO_READDIRPLUS,
            FUSE_READDIRPLUS_AUTO,
            FUSE_PARALLEL_DIROPS,
            FUSE_CACHE_SYMLINKS,
            FUSE_EXPORT_SUPPORT,
        ] {
            if offered & cap == 0 {
                tracing::info!("kernel lacks FUSE capability {cap:#x}");
            }
        }
        // POSIX ACLs: the kernel checks them (with default_permissions) and
        // caches them; keeping the mode in step, inheriting default ACLs
        // and so the umask are the core's (`xattr`).
        if self.writeback_cache {
            if offered & FUSE_WRITEBACK_CACHE == 0 {
                tracing::warn!("kernel lacks the FUSE writeback cache: every write is durable when it returns");
            } else {
                wanted |= FUSE_WRITEBACK_CACHE;
            }
        }
        if offered & FUSE_POSIX_ACL == 0 {
            tracing::warn!("kernel lacks FUSE POSIX ACL support: ACLs are stored but not enforced");
        } else {
            wanted |= FUSE_POSIX_ACL | FUSE_DONT_MASK;
        }
        let flags = wanted & offered;
        let settled = Settled {
            wire: Negotiated {
                minor: minor.min(FUSE_KERNEL_MINOR_VERSION),
                setxattr_ext: flags & FUSE_SETXATTR_EXT != 0,
            },
            flags,
            max_write: MAX_WRITE,
        };
        if self.settled.set(settled).is_err() {
            tracing::error!("a second FUSE INIT");
            return Answer::Error(libc::EIO);
        }
        let init = InitOut {
            major: FUSE_KERNEL_VERSION,
            minor: FUSE_KERNEL_MINOR_VERSION,
            max_readahead,
            flags: flags as u32,
            // The kernel's defaults for background requests (readahead,
            // async reads): 3/4 of them before it counts as congested.
            max_background: 16,
            congestion_threshold: 12,
            max_write: MAX_WRITE,
            // Times are kept to the nanosecond.
            time_gran: 1,
            max_pages: MAX_PAGES,
            flags2: (flags >> 32) as u32,
            ..InitOut::default()
        };
        sent("init", reply::init(out, &init, minor))
    }

    /// Answers with an entry, which the kernel counts as one lookup of it,
    /// kept ([`Fs::remember`]) until it forgets.
    fn entry(&self, op: &str, r: Result<Attr, Error>, out: &mut [u8]) -> Answer {
        match r.and_then(|a| self.fs.remember(a.ino).map(|()| a)) {
            Ok(a) => sent(op, reply::entry(out, &entry_of(&a, ATTR_TTL))),
            Err(e) => failed(op, &e),
        }
    }

    fn lookup(&self, parent: u64, name: &[u8], out: &mut [u8]) -> Answer {
        // "." of any inode is how the kernel finds one by a file handle
        // once it has dropped it (export support).
        let found = match name {
            b"." => self.fs.getattr(parent),
            name => self.fs.lookup(parent, name),
        };
        match found {
            Ok(a) => self.entry("lookup", Ok(a), out),
            // A cacheable "no such name": node id 0 with a timeout.
            Err(Error::NotFound) => {
                let none = reply::entry_out(abi::Attr::default(), 0, ATTR_TTL);
                sent("lookup", reply::entry(out, &none))
            }
            // A lost inode: its name gets a node with placeholder
            // attributes that expire at once, so stat (GETATTR) and open
            // answer EIO while unlink and rename over it reach the name.
            Err(e) if e.errno() == libc::EIO && name != b"." => match self.fs.dentry(parent, name) {
                Ok(d) if self.fs.remember(d.ino).is_ok() => {
                    let _ = errno("lookup", &e); // logged
                    let lost = entry_of(&lost_placeholder(d.ino, d.kind), Duration::ZERO);
                    sent("lookup", reply::entry(out, &lost))
                }
                _ => failed("lookup", &e),
            },
            Err(e) => failed("lookup", &e),
        }
    }

    fn forget(&self, ino: u64, nlookup: u64) -> Answer {
        if let Err(e) = self.fs.forget(ino, nlookup) {
            tracing::debug!(ino, error = %e, "forget");
        }
        Answer::Nothing
    }

    fn batch_forget(&self, nodes: Forgets<'_>) -> Answer {
        for n in nodes {
            self.forget(n.nodeid, n.nlookup);
        }
        Answer::Nothing
    }

    fn getattr(&self, ino: u64, out: &mut [u8]) -> Answer {
        match self.fs.getattr(ino) {
            Ok(a) => sent("getattr", reply::attr(out, wire_attr(&a), ATTR_TTL)),
            Err(e) => failed("getattr", &e),
        }
    }

    fn setattr(&self, who: Who, ino: u64, set: &Setattr, out: &mut [u8]) -> Answer {
        let mode = match set.mode {
            Some(m) if m & libc::S_ISGID != 0 => match self.group_id_kept(who, ino, set.gid) {
                Ok(true) => Some(m),
                Ok(false) => Some(m & !libc::S_ISGID),
                Err(e) => return failed("setattr", &e),
            },
            m => m,
        };
        let time = |t: SetTime| match t {
            SetTime::At(ns) => ns,
            SetTime::Now => now_nanos(),
        };
        let now = |t: Option<SetTime>| t.is_none_or(|t| t == SetTime::Now);
        // With the writeback cache the kernel keeps the times and sends a
        // modification time after writes and for touch alike, never as
        // "now": taken as now unless an access time is given, so that an
        // append-only file takes it (README, "Writeback cache"); the
        // kernel checked the caller's right.
        let kernel_times = self.writeback_cache_granted() && set.times_only() && now(set.atime);
        // No flags: chattr comes as an ioctl.
        let change = SetAttr::default()
            .mode(mode)
            .uid(set.uid)
            .gid(set.gid)
            .size(set.size)
            .atime(set.atime.map(time))
            .mtime(set.mtime.map(time))
            .ctime(set.ctime)
            .times_now(
                kernel_times || (set.atime.is_some() || set.mtime.is_some()) && now(set.atime) && now(set.mtime),
            );
        match self
            .fs
            .setattr(ino, &change)
            .and_then(|a| self.after_setattr(who, a, set))
        {
            Ok(a) => sent("setattr", reply::attr(out, wire_attr(&a), ATTR_TTL)),
            Err(e) => failed("setattr", &e),
        }
    }

    fn readlink(&self, ino: u64, out: &mut [u8]) -> Answer {
        match self.fs.readlink(ino) {
            Ok(t) => sent("readlink", reply::data(out, &t)),
            Err(e) => failed("readlink", &e),
        }
    }

    fn symlink(&self, who: Who, parent: u64, name: &[u8], target: &[u8], out: &mut [u8]) -> Answer {
        let r = self.fs.symlink(parent, name, target, who.uid, who.gid);
        self.entry("symlink", r, out)
    }

    #[allow(clippy::too_many_arguments)] // one per field of the request
    fn mknod(&self, who: Who, parent: u64, name: &[u8], mode: u32, rdev: u32, umask: u32, out: &mut [u8]) -> Answer {
        let r = if mode & libc::S_IFMT == libc::S_IFDIR {
            Err(Error::Invalid("mknod cannot make directories"))
        } else {
            let m = Make::new(mode, 0, 0).rdev(u64::from(rdev)).umask(umask);
            self.make(who, parent, name, m)
        };
        self.entry("mknod", r, out)
    }

    fn mkdir(&self, who: Who, parent: u64, name: &[u8], mode: u32, umask: u32, out: &mut [u8]) -> Answer {
        let m = Make::new(libc::S_IFDIR | (mode & 0o7777), 0, 0).umask(umask);
        let r = self.make(who, parent, name, m);
        self.entry("mkdir", r, out)
    }

    fn rename(&self, who: Who, parent: u64, name: &[u8], newdir: u64, newname: &[u8], flags: u32) -> Answer {
        // A whiteout (RENAME_WHITEOUT) is the caller's, as on ext4.
        let r = self
            .fs
            .rename_as(parent, name, newdir, newname, flags, who.uid, who.gid);
        done("rename", r)
    }

    fn link(&self, ino: u64, newparent: u64, newname: &[u8], out: &mut [u8]) -> Answer {
        let r = self.fs.link(ino, newparent, newname);
        self.entry("link", r, out)
    }

    /// Registers the handle with the core, which keeps an unlinked file
    /// alive until its last release.
    /// Without opens (`no_open`) only the first OPEN ever comes: ENOSYS
    /// to it, unless it is refused. From then on chattr's immutable and
    /// append-only flags are enforced by the write (EPERM there), not the
    /// open; O_TRUNC still arrives as a SETATTR, which checks them.
    fn open(&self, ino: u64, flags: u32, out: &mut [u8]) -> Answer {
        let flags = flags as i32;
        let writing = flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
        let appending = flags & libc::O_APPEND != 0 && flags & libc::O_TRUNC == 0;
        let checked = self.fs.check_open(ino, writing, appending);
        if self.no_open {
            return match checked {
                Ok(()) => Answer::Error(libc::ENOSYS),
                Err(e) => failed("open", &e),
            };
        }
        match checked.and_then(|()| self.fs.open_handle(ino)) {
            Ok(_) => sent("open", reply::open(out, 0, self.open_flags(ino))),
            Err(e) => failed("open", &e),
        }
    }

    /// Without opens there are no handles to release (the kernel sends
    /// none once OPEN answered ENOSYS).
    fn release(&self, ino: u64) -> Answer {
        if self.no_open {
            return Answer::Reply(0);
        }
        done("release", self.fs.release_handle(ino))
    }

    /// Reads straight into the reply: no copy.
    fn read(&self, ino: u64, offset: u64, size: u32, out: &mut [u8]) -> Answer {
        let buf = match reply::data_buf(out, size) {
            Ok(buf) => buf,
            Err(e) => return sent("read", Err(e)),
        };
        match self.fs.read(ino, offset, buf) {
            Ok(n) => Answer::Reply(n),
            Err(e) => failed("read", &e),
        }
    }

    fn write(&self, who: Who, ino: u64, offset: u64, data: &[u8], write_flags: u32, out: &mut [u8]) -> Answer {
        let written = self
            .cached_append(ino, offset, data, write_flags)
            .and_then(|(kept, offset, data)| {
                let n = if data.is_empty() {
                    0
                } else {
                    self.fs.write(ino, offset, data)?
                };
                if write_flags & FUSE_WRITE_KILL_SUIDGID != 0 {
                    self.kill_set_id_behind_reply(who, ino, self.fs.getattr(ino)?)?;
                }
                Ok(kept + n)
            });
        match written {
            // At most MAX_WRITE bytes arrive in one request.
            Ok(n) => sent("write", reply::write(out, u32::try_from(n).unwrap_or(u32::MAX))),
            Err(e) => failed("write", &e),
        }
    }

    fn statfs(&self, out: &mut [u8]) -> Answer {
        let s = self.fs.statfs();
        let bsize = u32::try_from(s.block_size).unwrap_or(BLOCK_SIZE);
        // Available: what ordinary writes may use (the reserve that keeps
        // deletes working on a full device is not).
        let st = Kstatfs {
            blocks: s.blocks,
            bfree: s.blocks_free,
            bavail: s.blocks_avail,
            files: s.files,
            ffree: s.files_free,
            bsize,
            namelen: u32::try_from(s.name_max).unwrap_or(255),
            frsize: bsize,
            padding: 0,
            spare: [0; 6],
        };
        sent("statfs", reply::statfs(out, &st))
    }

    /// Setting an access ACL sets the mode it implies; like chmod, it
    /// keeps set-group-ID only for a caller in the group (Linux's
    /// `posix_acl_update_mode`; xfstests generic/375).
    fn setxattr(&self, who: Who, ino: u64, name: &[u8], value: &[u8], flags: u32) -> Answer {
        let r = self.fs.setxattr(ino, name, value, flags).and_then(|()| match name {
            b"system.posix_acl_access" => self.acl_set_group_id(who, ino),
            _ => Ok(()),
        });
        done("setxattr", r)
    }

    /// What FUSE_HANDLE_KILLPRIV_V2 leaves to us after a setattr: a
    /// truncation by a caller without CAP_FSETID (the kernel says so) and
    /// any chown of a file clear its set-ID bits, as Linux's `notify_change`
    /// would (chown keeps a set-group-ID without group execution for a
    /// caller in the group or with CAP_FSETID).
    fn after_setattr(&self, who: Who, a: Attr, set: &Setattr) -> Result<Attr, Error> {
        let chown = set.uid.is_some() || set.gid.is_some();
        if chown || (set.size.is_some() && set.kill_suidgid) {
            return self.kill_set_id(who, a, chown);
        }
        Ok(a)
    }

    /// Space changes like a write: set-ID bits go as a write by the same
    /// caller would clear them (the kernel leaves that to us with
    /// FUSE_HANDLE_KILLPRIV_V2 and gives no flag for fallocate, so the
    /// caller's CAP_FSETID is read from /proc: xfstests generic/683, 684).
    fn fallocate(&self, who: Who, ino: u64, mode: u32, offset: u64, length: u64) -> Result<(), Error> {
        self.fs.fallocate(ino, mode, offset, length)?;
        let a = self.fs.getattr(ino)?;
        // /proc is read only for a file with set-ID bits.
        if a.perm & (libc::S_ISUID | libc::S_ISGID) != 0
            && !caller(who.pid, who.uid, who.gid).caps.contains(Caps::FSETID)
        {
            self.kill_set_id_behind_reply(who, ino, a)?;
        }
        Ok(())
    }

    /// Listings are cached by the kernel (`FOPEN_CACHE_DIR`, kept from one
    /// open to the next with `FOPEN_KEEP_CACHE`): a directory listed again
    /// unchanged costs no READDIR. Every change to a directory comes
    /// through this mount, and the kernel drops its cached listing when it
    /// makes one (the directory's i_version moves).
    fn opendir(&self, out: &mut [u8]) -> Answer {
        let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
        sent("opendir", reply::open(out, fh, FOPEN_CACHE_DIR | FOPEN_KEEP_CACHE))
    }

    fn releasedir(&self, fh: u64) -> Answer {
        self.listings.lock().unwrap_or_else(|p| p.into_inner()).remove(&fh);
        Answer::Reply(0)
    }

    fn readdir(&self, ino: u64, fh: u64, offset: u64, size: u32, out: &mut [u8]) -> Answer {
        let mut buf = DirBuf::new(out, size);
        let r = self.listing_end(ino, fh, offset).and_then(|end| {
            self.fs.readdir_to(ino, offset, end, |e| {
                // `add` returns true when the entry did not fit: stop
                // there, the kernel asks again from the last entry's offset.
                let typ = reply::dirent_type(e.kind.mode_bits());
                !self.reserved(ino, &e.name) && buf.add(e.ino, e.next_offset, typ, &e.name)
            })
        });
        match r {
            Ok(()) => Answer::Reply(buf.len()),
            Err(e) => failed("readdir", &e),
        }
    }

    fn readdirplus(&self, ino: u64, fh: u64, offset: u64, size: u32, out: &mut [u8]) -> Answer {
        let end = match self.listing_end(ino, fh, offset) {
            Ok(end) => end,
            Err(e) => return failed("readdirplus", &e),
        };
        let mut buf = DirBuf::new(out, size);
        let r = self.fs.readdir_plus(ino, offset, end, |e, a| {
            // Each entry but "." and ".." counts as a lookup (as `entry`).
            let counted = e.name != b"." && e.name != b"..";
            if self.reserved(ino, &e.name) || (counted && self.fs.remember(e.ino).is_err()) {
                return false; // gone meanwhile, or reserved: left out
            }
            // A lost inode's name is listed with placeholder attributes
            // that expire at once (as `lookup` answers it): stat and open
            // answer EIO. (A zero node id would keep the kernel from
            // caching it, but the entry keeps the inode's number, as
            // lookup gives it, and glibc's readdir skips d_ino 0.)
            let (attr, ttl) = match a {
                Some(a) => (*a, ATTR_TTL),
                None => (lost_placeholder(e.ino, e.kind), Duration::ZERO),
            };
            let typ = reply::dirent_type(e.kind.mode_bits());
            let full = buf.add_plus(&entry_of(&attr, ttl), e.next_offset, typ, &e.name);
            if full && counted {
                let _ = self.fs.forget(e.ino, 1); // not sent after all
            }
            full
        });
        match r {
            Ok(()) => Answer::Reply(buf.len()),
            Err(e) => failed("readdirplus", &e),
        }
    }

    /// Without opens, ENOSYS: the kernel then makes files with MKNOD (one
    /// request too) and opens them without one, so that no file ever has
    /// a handle whose RELEASE may or may not come.
    fn create(&self, who: Who, parent: u64, name: &[u8], mode: u32, umask: u32, out: &mut [u8]) -> Answer {
        if self.no_open {
            return Answer::Error(libc::ENOSYS);
        }
        let m = Make::new(libc::S_IFREG | (mode & 0o7777), 0, 0)
            .umask(umask)
            .opened(true);
        // The reply counts as a lookup too (see `entry`).
        let r = self
            .make(who, parent, name, m)
            .and_then(|a| self.fs.remember(a.ino).map(|()| a));
        match r {
            Ok(a) => sent(
                "create",
                reply::create(out, &entry_of(&a, ATTR_TTL), 0, FOPEN_KEEP_CACHE),
            ),
            Err(e) => failed("create", &e),
        }
    }

    /// Only SEEK_DATA and SEEK_HOLE reach the file system; the kernel
    /// handles the other whence values itself.
    /// With the writeback cache the kernel may hold data we have not seen
    /// (it writes nothing back first): ENOSYS, and it answers SEEK_DATA
    /// and SEEK_HOLE itself, the whole file as data.
    fn lseek(&self, ino: u64, offset: i64, whence: u32, out: &mut [u8]) -> Answer {
        if self.writeback_cache_granted() {
            return Answer::Error(libc::ENOSYS);
        }
        let r = match u64::try_from(offset) {
            Ok(off) => self.fs.lseek(ino, off, whence),
            Err(_) => Err(Error::NoSuchOffset),
        };
        match r {
            // The kernel reads the offset back as a loff_t.
            Ok(off) if i64::try_from(off).is_ok() => sent("lseek", reply::lseek(out, off)),
            Ok(_) => Answer::Error(libc::EOVERFLOW),
            Err(e) => failed("lseek", &e),
        }
    }
}

mod inode_names;
mod ioctl;
#[cfg(test)]
mod tests;
mod writeback;
#[cfg(test)]
use ioctl::{flags_of_xflags, xflags_of};
