//! The public, thread-safe API: [`Fs`]. Calls take inode numbers (as FUSE
//! does); a few path helpers sit on top. Each inode has its own lock and
//! there is no global lock on the data path (cache.rs); namespace changes
//! live in namespace.rs, file data in file.rs.
//!
//! Strict mode (DESIGN.md §1): every call that returns Ok is atomic and
//! durable. Dropping an `Fs` without [`Fs::unmount`] is a crash: the next
//! open recovers.

mod batching;
mod maps;
mod names;
mod perms;
mod room;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::lock::{Mutex, Rank};
use crate::setters::setters;
use pm::Region;

use crate::alloc::Budget;
use crate::cache::{alive, is_loss, Cache, Cell};
use crate::commit::Ctx;
use crate::consistency::Consistency;
use crate::error::{Error, Result};
use crate::file;
use crate::health::HealthCounts;
use crate::inode::{setattr_entry, Attr, FileType, Ino, InodeState, ROOT_INO};
use crate::journal::{Journal, JournalStats};
use crate::layout::{
    Superblock, FEATURE_INCOMPAT_SNAPSHOTS, FEATURE_INCOMPAT_XATTR, FLAG_APPEND, FLAG_IMMUTABLE, INODE_SIZE, PAGE_SIZE,
};
use crate::mkfs::{self, FormatOptions};
use crate::mmap::{self, Mmaps};
use crate::namespace::{Namespace, NewNode};
use crate::reclaim::Reclaimer;
use crate::recovery::{self, MetaReplicas, MountReport};
use crate::scrub::{self, ScrubOptions, ScrubReport};
use crate::setattr;
pub use crate::setattr::SetAttr;
use crate::snapshot::{EpochGuard, Snapshot};
use crate::superblock::{copies_differ, write_superblock};
use crate::time::now_ns;
use crate::xattr;
use batching::Committer;
pub use batching::{BatchStats, Batching};

pub use crate::xattr::{XATTR_CREATE, XATTR_REPLACE};

pub use crate::namespace::{MAX_LINKS, RENAME_EXCHANGE, RENAME_NOREPLACE, RENAME_WHITEOUT};

/// Longest symlink target (PATH_MAX less the terminating NUL).
pub const MAX_SYMLINK: usize = 4095;

/// How to open an image.
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub struct MountOptions {
    pub read_only: bool,
    /// Keep the metadata replicas current (the default where the image
    /// has them), require them, or skip them on this mount.
    pub meta_replicas: MetaReplicas,
    /// When reads update access times.
    pub atime: Atime,
    /// Directories' access times stay (nodiratime).
    pub no_dir_atime: bool,
    /// The kernel's references ([`Fs::remember`]) keep an unlinked file,
    /// as they keep a removed directory, instead of its open handles: for
    /// a FUSE front end that asks the kernel not to send opens and
    /// releases, so that an open costs no request.
    pub lookups_hold_files: bool,
    /// Atomic mappings learn which pages a program stored to from a
    /// write-protect fault at each page's first store after an msync,
    /// not from the kernel's write tracking (userfaultfd's asynchronous
    /// write-protect mode, Linux 6.7; used by default where the kernel
    /// has it, and these faults where it has not).
    pub mmap_store_faults: bool,
    /// Benchmark only (`novafs bench --compare-journal`): journal every
    /// transaction as whole 4 KiB blocks with descriptor and commit
    /// blocks, as JBD2 does, to measure what fine-grained journaling saves
    /// (FGM §IV). Nothing recovers that journal: a crash can leave a
    /// transaction half applied. No mount command offers it.
    pub bench_block_journal: bool,
    /// The consistency mode (NOVA-Fortis §4.6) of this mount; None: the
    /// one the image records (`novafs mkfs --mode`, `novafs tune --mode`).
    pub consistency: Option<Consistency>,
    /// Relaxed mode only: batch in-place metadata changes in a running
    /// transaction ([`Batching`]); a crash may lose those of the last
    /// commit interval (README, "Relaxed mode").
    pub batch: Option<Batching>,
}

impl MountOptions {
    setters!(
        /// Mounts read-only, or read-write.
        read_only: bool,
        /// Sets what this mount does with the metadata replicas.
        meta_replicas: MetaReplicas,
        /// Sets when reads update access times.
        atime: Atime,
        /// Leaves directories' access times alone, or not.
        no_dir_atime: bool,
        /// Lets the kernel's references keep unlinked files, or not.
        lookups_hold_files: bool,
        /// Makes atomic mappings find stores by faults, or by the kernel's
        /// write tracking where it has it.
        mmap_store_faults: bool,
        /// Benchmark only: journals whole blocks, which nothing recovers.
        bench_block_journal: bool,
        /// Sets this mount's consistency mode (None: the image's default).
        consistency: Option<Consistency>,
        /// Batches a relaxed mount's in-place metadata changes, or not.
        batch: Option<Batching>,
    );
}

/// When a read (of file data, or a directory listing) updates the access
/// time; each update is one setattr entry, durable like any other.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Atime {
    /// Never: a read writes nothing. The library's default, for speed;
    /// `novafs mount` follows Linux and mounts with [`Atime::Relative`].
    #[default]
    Never,
    /// Linux's relatime: when the access time is not after the last change
    /// (mtime or ctime), or is a day old.
    Relative,
    /// Every read (strictatime).
    Strict,
}

/// A relatime access time is renewed at least this often.
const RELATIME_PERIOD_NS: i64 = 24 * 3600 * 1_000_000_000;

/// A new node for [`Fs::make`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Make {
    /// Type and permission bits, as asked (before the umask).
    pub mode: u32,
    /// A device node's number.
    pub rdev: u64,
    /// The creating process's user and group.
    pub uid: u32,
    pub gid: u32,
    /// Permission bits to clear unless the directory has a default ACL.
    pub umask: u32,
    /// Register an open handle at once (open with O_CREAT).
    pub opened: bool,
}

impl Make {
    /// A node of `mode` owned by `uid`:`gid`, no umask, not opened.
    pub fn new(mode: u32, uid: u32, gid: u32) -> Make {
        Make {
            mode,
            rdev: 0,
            uid,
            gid,
            umask: 0,
            opened: false,
        }
    }

    setters!(
        /// Sets a device node's number.
        rdev: u64,
        /// Sets the creating process's user.
        uid: u32,
        /// Sets the creating process's group.
        gid: u32,
        /// Sets the permission bits to clear unless the directory has a default ACL.
        umask: u32,
        /// Registers an open handle at once, or not.
        opened: bool,
    );
}

/// lseek whence values for holes (Linux values).
pub const SEEK_DATA: u32 = 3;
pub const SEEK_HOLE: u32 = 4;

/// One entry produced by [`Fs::readdir`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub ino: Ino,
    pub kind: FileType,
    pub name: Vec<u8>,
    /// Pass this back as `offset` to continue after this entry.
    pub next_offset: u64,
}

/// What `statfs` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatFs {
    pub block_size: u64,
    pub blocks: u64,
    pub blocks_free: u64,
    /// Free blocks ordinary writes may use (the rest is held back so that
    /// deletes work on a full device).
    pub blocks_avail: u64,
    /// Blocks held back from ordinary writes (free or used by operations
    /// that free space), as ext4's reserved blocks (FORMAT.md "The
    /// reserve").
    pub blocks_reserved: u64,
    pub files: u64,
    pub files_free: u64,
    pub name_max: u64,
    /// Blocks (in use, counted above) that only snapshots hold.
    pub snapshot_blocks: u64,
    /// The mount's consistency mode ([`Fs::consistency`]).
    pub consistency: Consistency,
}

/// Log GC so far on this mount (NOVA Table 3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GcStats {
    /// Log pages freed by fast GC.
    pub fast_pages: u64,
    /// Log pages freed by thorough GC, and how often it ran.
    pub thorough_pages: u64,
    pub thorough_runs: u64,
}

/// A mounted novafs, or a read-only view of one of its snapshots
/// ([`Fs::open_snapshot`]).
pub struct Fs {
    ctx: Arc<Ctx>,
    sb: Mutex<Superblock>,
    cache: Cache,
    rename_lock: Mutex<()>,
    /// One ENOSPC compaction pass at a time (`room`).
    space_pass: Mutex<()>,
    read_only: bool,
    atime: Atime,
    no_dir_atime: bool,
    lookups_hold_files: bool,
    report: MountReport,
    /// For a view: the snapshot it shows, held open.
    view: Option<View>,
    /// Frees what deleted snapshots leave (read-write mounts only).
    reclaimer: Option<Reclaimer>,
    /// Commits a batching mount's running transaction on its timer.
    _committer: Option<Committer>,
    /// DAX mappings of its files ([`Fs::mmap`]).
    mmaps: Arc<Mmaps>,
    /// Unlinked inodes freed since the mount, and being freed now
    /// ([`Fs::space_coming_back`]).
    freed: AtomicU64,
    freeing: AtomicUsize,
}

/// A snapshot held open by a view: it cannot be deleted meanwhile.
struct View {
    ctx: Arc<Ctx>,
    epoch: u64,
}

impl Drop for View {
    fn drop(&mut self) {
        self.ctx.snapshots().close_view(self.epoch);
    }
}

/// The file pages bytes `off..off + len` touch.
fn byte_pages(off: u64, len: u64) -> std::ops::Range<u64> {
    off / PAGE_SIZE..off.saturating_add(len).div_ceil(PAGE_SIZE)
}

fn kind_of_ftype(ftype: u8) -> FileType {
    FileType::from_mode(u32::from(ftype) << 12).unwrap_or(FileType::RegularFile)
}

impl Fs {
    /// Lays out an empty file system on `region`.
    pub fn format(region: Arc<dyn Region>, opts: &FormatOptions) -> Result<()> {
        mkfs::format(region, opts)
    }

    /// Mounts the file system on `region`, recovering after a crash.
    pub fn open(region: Arc<dyn Region>, opts: MountOptions) -> Result<Fs> {
        let (ctx, sb, report) = recovery::mount(region, opts.read_only, opts.meta_replicas, opts.consistency)?;
        let ctx = match opts.bench_block_journal {
            true => ctx.with_block_journal(),
            false => ctx,
        };
        let ctx = Arc::new(match opts.batch {
            Some(_) if ctx.consistency() != Consistency::Relaxed => {
                return Err(Error::Invalid("batching is an option of relaxed mode"));
            }
            Some(b) if ctx.relaxed() => ctx.with_batch(b.words),
            _ => ctx,
        });
        Ok(Fs {
            reclaimer: (!opts.read_only).then(|| Reclaimer::start(ctx.clone())),
            _committer: opts
                .batch
                .filter(|_| ctx.relaxed())
                .map(|b| Committer::start(ctx.clone(), b.interval)),
            ctx,
            sb: Mutex::new(Rank::Superblock, sb),
            cache: Cache::new(None),
            rename_lock: Mutex::new(Rank::Rename, ()),
            space_pass: Mutex::new(Rank::SpacePass, ()),
            read_only: opts.read_only,
            atime: if opts.read_only { Atime::Never } else { opts.atime },
            no_dir_atime: opts.no_dir_atime,
            lookups_hold_files: opts.lookups_hold_files,
            report,
            view: None,
            mmaps: Arc::new(Mmaps::new(opts.mmap_store_faults)),
            freed: AtomicU64::new(0),
            freeing: AtomicUsize::new(0),
        })
    }

    /// A read-only view of snapshot `name` (Fortis §3): the file system
    /// as it was when the snapshot was taken, beside the live one, through
    /// the same API. The snapshot cannot be deleted while a view is open.
    pub fn open_snapshot(&self, name: &[u8]) -> Result<Fs> {
        let epoch = self.ctx.snapshots().open_view(name)?;
        let view = View {
            ctx: self.ctx.clone(),
            epoch,
        };
        Ok(Fs {
            ctx: self.ctx.clone(),
            sb: Mutex::new(Rank::Superblock, *self.sb.lock()),
            cache: Cache::new(Some(epoch)),
            rename_lock: Mutex::new(Rank::Rename, ()),
            space_pass: Mutex::new(Rank::SpacePass, ()),
            read_only: true,
            atime: Atime::Never,
            no_dir_atime: true,
            lookups_hold_files: self.lookups_hold_files,
            report: MountReport::default(),
            view: Some(view),
            reclaimer: None,
            _committer: None,
            mmaps: Arc::default(),
            freed: AtomicU64::new(0),
            freeing: AtomicUsize::new(0),
        })
    }

    /// The snapshot epoch a view shows; `None` for the live file system.
    pub fn snapshot_epoch(&self) -> Option<u64> {
        self.view.as_ref().map(|v| v.epoch)
    }

    /// Clean unmount: reclaims unlinked inodes that were still open, saves
    /// the allocators and marks the image clean (NOVA §4.7).
    pub fn unmount(self) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        self.ctx
            .journal()
            .commit_running(self.ctx.region(), Journal::AT_UNMOUNT)?;
        // The saved state must not count as used what deletions left.
        self.wait_reclaimed();
        for cell in self.cache.cells() {
            let mut st = cell.state.write();
            if !st.dead && st.meta.attr.nlink == 0 && st.meta.attr.ino != ROOT_INO {
                st.open = 0;
                self.free_inode(&mut st)?;
            }
        }
        let mut sb = self.sb.lock();
        recovery::save_clean(&self.ctx, &mut sb)
    }

    /// How the mount went (clean or recovered, time taken).
    pub fn mount_report(&self) -> &MountReport {
        &self.report
    }

    /// The mount's consistency mode (NOVA-Fortis §4.6): the one
    /// [`MountOptions::consistency`] asked for, else the image's default.
    /// A read-only mount (or a snapshot view) reports it too, though it
    /// writes nothing.
    pub fn consistency(&self) -> Consistency {
        self.ctx.consistency()
    }

    /// Whether this mount's writes go relaxed: a relaxed, read-write
    /// mount, not a snapshot view (the probe window's: `Ctx::relaxed`,
    /// which the write path asks).
    #[cfg(feature = "probe")]
    pub fn writes_relaxed(&self) -> bool {
        !self.read_only && self.ctx.relaxed()
    }

    /// A copy of the superblock as mounted (the probe window's: the
    /// superblock's layout is the format's, not the API's).
    #[cfg(feature = "probe")]
    pub fn superblock(&self) -> Superblock {
        *self.sb.lock()
    }

    /// Fails on a read-only mount; else enters the epoch gate for one
    /// operation that writes (`snapshot`: no snapshot is taken until it
    /// has published).
    fn writable(&self) -> Result<EpochGuard<'_>> {
        if self.read_only {
            Err(Error::ReadOnly)
        } else {
            Ok(self.ctx.snapshots().epochs.enter())
        }
    }

    /// How much log GC reclaimed on this mount.
    pub fn gc_stats(&self) -> GcStats {
        let g = self.ctx.gc();
        GcStats {
            fast_pages: g.fast_pages.load(Ordering::Relaxed),
            thorough_pages: g.thorough_pages.load(Ordering::Relaxed),
            thorough_runs: g.thorough_runs.load(Ordering::Relaxed),
        }
    }

    /// What the metadata journal wrote and fenced on this mount (FGM
    /// §IV-B's journal writes; `journal::stats` says what counts).
    pub fn journal_stats(&self) -> JournalStats {
        self.ctx.journal().stats()
    }

    /// Inode `ino`'s cache cell. Repairs count themselves where they happen
    /// (`Health::repaired`, inside the cache's loads); the counters reach
    /// the superblock here, after the load, because the superblock's lock
    /// ranks before the cache shards' (`lock::Rank`) and so cannot be taken
    /// at the repair point.
    fn cell(&self, ino: Ino) -> Result<Arc<Cell>> {
        let cell = self.cache.get(&self.ctx, ino);
        if self.ctx.health().take_changed() {
            self.save_health();
        }
        cell
    }

    /// Reads everything redundancy protects — every inode's record, log
    /// and data, live or kept for snapshots, and the data runs only
    /// snapshots keep — repairing what it can, while the file system stays in
    /// use (`scrub`); `progress(done, total)` counts inodes and returns
    /// false to stop early.
    pub fn scrub(&self, opts: ScrubOptions, progress: &dyn Fn(u64, u64) -> bool) -> Result<ScrubReport> {
        let mut rep = scrub::run(&self.ctx, &self.cache, opts, progress)?;
        if !rep.stopped && !self.read_only {
            self.scrub_superblock(&mut rep)?;
        }
        if self.ctx.health().take_changed() {
            self.save_health();
        }
        Ok(rep)
    }

    /// Rewrites both superblock copies when either differs from the one
    /// this mount holds (Fortis §4.2), a primary counted as a repair.
    fn scrub_superblock(&self, rep: &mut ScrubReport) -> Result<()> {
        let mut sb = self.sb.lock();
        let (primary, replica) = copies_differ(self.ctx.region(), &sb);
        if primary || replica {
            write_superblock(self.ctx.region(), &mut sb)?;
            self.ctx.health().repaired(u64::from(primary));
            rep.metadata_repaired += u64::from(primary);
            rep.replicas_rewritten += u64::from(replica);
        }
        Ok(())
    }

    /// chattr: sets inode `ino`'s flags (`layout::INODE_FLAGS`: immutable,
    /// append-only, no-dump; any other is EOPNOTSUPP), enforced from then
    /// on by every operation. Who may is the caller's to check: the kernel
    /// does for FUSE (CAP_LINUX_IMMUTABLE for the first two).
    pub fn set_flags(&self, ino: Ino, flags: u32) -> Result<Attr> {
        let set = SetAttr {
            flags: Some(flags),
            ..SetAttr::default()
        };
        self.setattr(ino, &set)
    }

    /// What redundancy repaired and what was lost, since mkfs.
    pub fn health(&self) -> HealthCounts {
        self.ctx.health().counts()
    }

    /// Writes the health counters to the superblock at once (both rare and
    /// worth keeping across a crash). A failure is only logged: the
    /// operation that met the damage goes on or fails on its own terms.
    fn save_health(&self) {
        if self.read_only {
            return;
        }
        let mut sb = self.sb.lock();
        self.ctx.health().stamp(&mut sb);
        if let Err(e) = write_superblock(self.ctx.region(), &mut sb) {
            tracing::warn!(error = %e, "could not record the repair counters in the superblock");
        }
    }

    /// Frees an unlinked inode whose last handle went away: one 8-byte
    /// store of its state word (R5), then its pages and slot (R3).
    /// Counted while it runs and once done ([`Fs::space_coming_back`]).
    fn free_inode(&self, st: &mut InodeState) -> Result<()> {
        self.freeing.fetch_add(1, Ordering::AcqRel);
        let freed = self.ctx.ending(st).and_then(|ending| {
            let proof = self.ctx.journal().commit(self.ctx.region(), &ending.updates)?;
            self.cache.forget(&self.ctx, st, &proof, ending.fate);
            Ok(())
        });
        if freed.is_ok() {
            self.freed.fetch_add(1, Ordering::AcqRel);
        }
        self.freeing.fetch_sub(1, Ordering::AcqRel);
        freed
    }

    // ---- lookups and attributes ----

    /// Attributes of inode `ino`.
    pub fn getattr(&self, ino: Ino) -> Result<Attr> {
        let cell = self.cell(ino)?;
        let st = cell.state.read();
        alive(&st)?;
        Ok(st.attr())
    }

    /// Finds `name` in directory `parent`.
    pub fn lookup(&self, parent: Ino, name: &[u8]) -> Result<Attr> {
        if name.len() > crate::layout::NAME_MAX {
            return Err(Error::NameTooLong);
        }
        let target = {
            let cell = self.cell(parent)?;
            let st = cell.state.read();
            alive(&st)?;
            let dir = st.dir()?;
            match name {
                b"." => parent,
                b".." => dir.parent(),
                _ => dir.get(name).ok_or(Error::NotFound)?.ino,
            }
        };
        self.getattr(target)
    }

    /// The entry `name` of directory `parent`, without loading the inode
    /// it names: what a front end answers for a name whose inode is lost
    /// ([`Fs::lookup`] says EIO). FUSE must give the kernel a node for
    /// such a name, or unlink and rename could not reach it.
    pub fn dentry(&self, parent: Ino, name: &[u8]) -> Result<DirEntry> {
        let cell = self.cell(parent)?;
        let st = cell.state.read();
        alive(&st)?;
        let d = st.dir()?.get(name).ok_or(Error::NotFound)?;
        Ok(DirEntry {
            ino: d.ino,
            kind: kind_of_ftype(d.ftype),
            name: name.to_vec(),
            next_offset: d.seq,
        })
    }

    /// Resolves an absolute or root-relative path without following
    /// symlinks (lstat semantics).
    pub fn resolve(&self, path: &str) -> Result<Attr> {
        let mut attr = self.getattr(ROOT_INO)?;
        for comp in path.split('/').filter(|c| !c.is_empty()) {
            attr = self.lookup(attr.ino, comp.as_bytes())?;
        }
        Ok(attr)
    }

    /// Changes attributes; a size change truncates or extends the file.
    pub fn setattr(&self, ino: Ino, set: &SetAttr) -> Result<Attr> {
        self.writing(|| {
            let cell = self.cell(ino)?;
            let mut st = cell.state.write();
            alive(&st)?;
            setattr::setattr(&self.ctx, &self.mmaps, &mut st, ino, set)
        })
    }

    // ---- extended attributes ----

    /// getxattr(2): the value of attribute `name` of inode `ino` (ENODATA
    /// when it has none).
    pub fn getxattr(&self, ino: Ino, name: &[u8]) -> Result<Vec<u8>> {
        let cell = self.cell(ino)?;
        let st = cell.state.read();
        alive(&st)?;
        xattr::get(&self.ctx, &st, name)
    }

    /// listxattr(2): every attribute name of inode `ino`, each ending in NUL.
    pub fn listxattr(&self, ino: Ino) -> Result<Vec<u8>> {
        let cell = self.cell(ino)?;
        let st = cell.state.read();
        alive(&st)?;
        Ok(xattr::list(&st))
    }

    /// setxattr(2): sets attribute `name` (namespaces `user.`, `trusted.`,
    /// `security.` and the two POSIX ACLs) to `value`, atomically and
    /// durably; `flags` is 0, [`XATTR_CREATE`] or [`XATTR_REPLACE`]. Setting
    /// `system.posix_acl_access` also sets the permission bits it implies.
    pub fn setxattr(&self, ino: Ino, name: &[u8], value: &[u8], flags: u32) -> Result<()> {
        self.writing(|| {
            self.mark_feature(FEATURE_INCOMPAT_XATTR)?;
            let cell = self.cell(ino)?;
            let mut st = cell.state.write();
            alive(&st)?;
            xattr::set(&self.ctx, &mut st, name, value, flags, now_ns())
        })
    }

    /// Sets incompatible feature bit `bit` (XATTR, SNAPSHOTS) before the
    /// image's first entry that needs it (rule R4: the superblock is
    /// durable before anything relies on it).
    fn mark_feature(&self, bit: u64) -> Result<()> {
        let mut sb = self.sb.lock();
        if sb.features_incompat & bit == 0 {
            sb.features_incompat |= bit;
            write_superblock(self.ctx.region(), &mut sb)?;
        }
        Ok(())
    }

    // ---- snapshots (Fortis §3; `snapshot`) ----

    /// Takes snapshot `name` of everything committed so far, in constant
    /// time: it waits only for the operations in flight.
    pub fn take_snapshot(&self, name: &[u8]) -> Result<Snapshot> {
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        self.mark_feature(FEATURE_INCOMPAT_SNAPSHOTS)?;
        // §3.3: every mapped page write-protected, and faults held back,
        // until the snapshot is recorded.
        let _frozen = self.mmaps.freeze();
        self.ctx.snapshots().take(
            (self.ctx.region(), self.ctx.journal()),
            self.ctx.alloc(),
            name,
            now_ns(),
        )
    }

    /// The snapshots, oldest first.
    pub fn snapshots(&self) -> Vec<Snapshot> {
        self.ctx.snapshots().list()
    }

    /// What the snapshots' manifests list (items) and the DRAM they take
    /// (bytes): Fortis §3.2's manifest overhead.
    pub fn manifest_memory(&self) -> (u64, u64) {
        self.ctx.snapshots().manifest_memory()
    }

    /// Deletes snapshot `name`: records the deletion and merges its
    /// manifest into the older snapshots' (Fortis §3.2); what no snapshot
    /// needs any more is freed in the background ([`Fs::wait_reclaimed`]).
    /// A crash before that is done leaves it to the next mount's scan.
    pub fn delete_snapshot(&self, name: &[u8]) -> Result<Snapshot> {
        // A read-only mount or a view has no reclaimer.
        let reclaimer = self.reclaimer.as_ref().ok_or(Error::ReadOnly)?;
        let d = self
            .ctx
            .snapshots()
            .delete((self.ctx.region(), self.ctx.journal()), self.ctx.alloc(), name)?;
        reclaimer.queue(&self.ctx, d.proof, d.unneeded);
        Ok(d.snapshot)
    }

    /// Waits until what deleted snapshots left unneeded is freed.
    pub fn wait_reclaimed(&self) {
        if let Some(r) = &self.reclaimer {
            r.drain();
        }
    }

    /// removexattr(2).
    pub fn removexattr(&self, ino: Ino, name: &[u8]) -> Result<()> {
        self.writing(|| {
            let cell = self.cell(ino)?;
            let mut st = cell.state.write();
            alive(&st)?;
            xattr::remove(&self.ctx, &mut st, name, now_ns())
        })
    }

    // ---- file data ----

    /// Registers an open handle: an unlinked inode stays alive until its
    /// last handle is released.
    pub fn open_handle(&self, ino: Ino) -> Result<Attr> {
        let cell = self.cell(ino)?;
        let mut st = cell.state.write();
        alive(&st)?;
        st.open += 1;
        Ok(st.attr())
    }

    /// EPERM when chattr flags forbid opening `ino` so: immutable, for
    /// writing; append-only, for writing other than appending (O_APPEND,
    /// without O_TRUNC). The kernel checks this itself for file systems
    /// whose flags it sees, which FUSE's it does not.
    pub fn check_open(&self, ino: Ino, writing: bool, appending: bool) -> Result<()> {
        let flags = self.getattr(ino)?.flags;
        let forbidden = (flags & FLAG_IMMUTABLE != 0 && writing) || (flags & FLAG_APPEND != 0 && writing && !appending);
        if forbidden {
            return Err(Error::NotPermitted);
        }
        Ok(())
    }

    /// Releases a handle; frees the inode if it was the last one of an
    /// unlinked file.
    pub fn release_handle(&self, ino: Ino) -> Result<()> {
        self.drop_refs(ino, 1, |_| true)
    }

    /// The kernel took a reference to inode `ino` (a FUSE lookup). A
    /// directory's references keep it alive past rmdir, as handles keep
    /// an unlinked file: a removed working directory, or one still open,
    /// answers stat with nlink 0 and lists nothing until [`Fs::forget`]
    /// drops the last reference (tmpfs behaves so). A file's references
    /// keep it too with [`MountOptions::lookups_hold_files`]; without,
    /// its handles do that job, and the space of an unlinked file that
    /// nobody has open comes back at once; they keep only its number from
    /// reuse until the kernel forgets it. A lost inode (listed by
    /// [`Fs::readdir_plus`] without attributes) is held as a file's number
    /// is: nothing of it can be loaded.
    pub fn remember(&self, ino: Ino) -> Result<()> {
        let cell = match self.cell(ino) {
            Err(e) if is_loss(&e) => {
                self.cache.hold(ino);
                return Ok(());
            }
            found => found?,
        };
        let mut st = cell.state.write();
        alive(&st)?;
        if self.counts_references(&st) {
            st.open += 1;
        } else {
            self.cache.hold(ino);
        }
        Ok(())
    }

    /// Whether the kernel's references to this inode keep it alive.
    fn counts_references(&self, st: &InodeState) -> bool {
        self.lookups_hold_files || st.meta.attr.kind == FileType::Directory
    }

    /// How many unlinked inodes have been freed since the mount (their
    /// space back in the allocator): one atomic load, for the hot path.
    pub fn inodes_freed(&self) -> u64 {
        self.freed.load(Ordering::Acquire)
    }

    /// [`Fs::inodes_freed`], and whether more space is on its way:
    /// an unlinked inode still held by a handle or a kernel reference, or
    /// one being freed now. For a caller that found the file system full
    /// and would wait for a release that is due (the FUSE front end after
    /// an unlink, whose FORGET comes a moment later). The second scans the
    /// cached inodes: for the ENOSPC path only.
    pub fn space_coming_back(&self) -> (u64, bool) {
        // In this order: an inode counts as freeing before it leaves the
        // cache, and as freed before it stops counting as freeing, so one
        // of the three always sees it.
        let held = self.cache.cells().iter().any(|cell| {
            let st = cell.state.read();
            !st.dead && st.meta.attr.nlink == 0 && st.meta.attr.ino != ROOT_INO
        });
        let freeing = self.freeing.load(Ordering::Acquire) > 0;
        (self.freed.load(Ordering::Acquire), held || freeing)
    }

    /// See [`MountOptions::lookups_hold_files`].
    pub fn lookups_hold_files(&self) -> bool {
        self.lookups_hold_files
    }

    /// The kernel dropped `n` references to `ino` (see [`Fs::remember`]);
    /// a removed directory goes with the last.
    pub fn forget(&self, ino: Ino, n: u64) -> Result<()> {
        if self.cache.unhold(&self.ctx, ino, n) {
            return Ok(());
        }
        self.drop_refs(ino, n, |st| self.counts_references(st))
    }

    /// Drops `n` references (handles, or a directory's lookups) of `ino`
    /// when `counted` says they were counted, and frees the inode when
    /// the last goes and no name is left.
    fn drop_refs(&self, ino: Ino, n: u64, counted: impl Fn(&InodeState) -> bool) -> Result<()> {
        let _op = self.ctx.snapshots().epochs.enter();
        let cell = self.cell(ino)?;
        let mut st = cell.state.write();
        alive(&st)?;
        if !counted(&st) {
            return Ok(());
        }
        st.open = st.open.saturating_sub(u32::try_from(n).unwrap_or(u32::MAX));
        if st.open == 0 && st.meta.attr.nlink == 0 && st.meta.attr.ino != ROOT_INO && !self.read_only {
            self.free_inode(&mut st)?;
        }
        Ok(())
    }

    /// Reads at `off` into `buf`; returns bytes read (0 at end of file).
    pub fn read(&self, ino: Ino, off: u64, buf: &mut [u8]) -> Result<usize> {
        if pm::overlaps_window(buf.as_ptr(), buf.len()) {
            // A buffer in a DAX mapping may fault, and the fault takes the
            // locks this read holds: fill a copy, then store it (`mmap`).
            let mut bounce = vec![0u8; buf.len()];
            let n = self.read(ino, off, &mut bounce)?;
            buf[..n].copy_from_slice(&bounce[..n]);
            return Ok(n);
        }
        let cell = self.cell(ino)?;
        let st = cell.state.read();
        alive(&st)?;
        let n = file::read(&self.ctx, &st, off, buf)?;
        mmap::pending(&self.mmaps, &st, off, &mut buf[..n])?;
        let due = self.atime_due_for(&st.meta.attr, now_ns());
        drop(st);
        if due {
            self.accessed(&cell);
        }
        Ok(n)
    }

    /// The mount's access-time rule, and whether directories are left out.
    pub fn atime(&self) -> (Atime, bool) {
        (self.atime, self.no_dir_atime)
    }

    /// Whether a read of inode `ino` now would update its access time (the
    /// mount's [`Atime`] rule): a FUSE daemon lets such a read reach it
    /// instead of the kernel's page cache.
    pub fn atime_due(&self, ino: Ino) -> Result<bool> {
        let cell = self.cell(ino)?;
        let st = cell.state.read();
        alive(&st)?;
        Ok(self.atime_due_for(&st.meta.attr, now_ns()))
    }

    fn atime_due_for(&self, a: &Attr, now: i64) -> bool {
        if a.flags & FLAG_IMMUTABLE != 0 || (self.no_dir_atime && a.kind == FileType::Directory) {
            return false;
        }
        match self.atime {
            Atime::Never => false,
            Atime::Strict => a.atime != now,
            Atime::Relative => {
                a.atime <= a.mtime || a.atime <= a.ctime || now.saturating_sub(a.atime) >= RELATIME_PERIOD_NS
            }
        }
    }

    /// Sets the access time of the inode in `cell` to now, if the rule
    /// still says so under its write lock. A failure (a full device) is
    /// only logged: the read it follows succeeded.
    fn accessed(&self, cell: &Cell) {
        let _op = self.ctx.snapshots().epochs.enter();
        let mut st = cell.state.write();
        let now = now_ns();
        if alive(&st).is_err() || !self.atime_due_for(&st.meta.attr, now) {
            return;
        }
        let mut a = st.attr();
        a.atime = now;
        let entries = [setattr_entry(self.ctx.epoch(), &a)];
        if let Err(e) = file::commit_file(&self.ctx, &mut st, Budget::Normal, &entries) {
            tracing::debug!(ino = a.ino, error = %e, "access time not updated");
        }
    }

    /// Writes `data` at `off`: atomic and durable when it returns.
    pub fn write(&self, ino: Ino, off: u64, data: &[u8]) -> Result<usize> {
        self.write_where(ino, |_| off, data).map(|(_, n)| n)
    }

    /// Writes `data` at the end of the file, as O_APPEND does: the end is
    /// read under the lock the write holds, so appends by several threads
    /// never overlap (through FUSE the kernel's inode lock does this).
    /// Returns where the data went and how much was written.
    pub fn append(&self, ino: Ino, data: &[u8]) -> Result<(u64, usize)> {
        self.write_where(ino, |size| size, data)
    }

    /// `write` and `append`: `at` picks the offset from the size under
    /// the inode's lock.
    fn write_where(&self, ino: Ino, at: impl Fn(u64) -> u64, data: &[u8]) -> Result<(u64, usize)> {
        if pm::overlaps_window(data.as_ptr(), data.len()) {
            // As in `read`: load the caller's bytes before taking locks.
            let bounce: Vec<u8> = data.into();
            return self.write_where(ino, at, &bounce);
        }
        self.writing(|| {
            let cell = self.cell(ino)?;
            let mut st = cell.state.write();
            alive(&st)?;
            let off = at(st.meta.attr.size);
            let pages = byte_pages(off, data.len() as u64);
            mmap::changing(&self.ctx, &self.mmaps, &st, pages.clone())?;
            let n = file::write(&self.ctx, &mut st, off, data)?;
            mmap::changed(&self.mmaps, ino, pages)?;
            mmap::rewritten(&self.ctx, &self.mmaps, &st, off..off + n as u64)?;
            Ok((off, n))
        })
    }

    /// fallocate(2): mode 0, KEEP_SIZE, PUNCH_HOLE|KEEP_SIZE.
    pub fn fallocate(&self, ino: Ino, mode: u32, off: u64, len: u64) -> Result<()> {
        self.writing(|| {
            let cell = self.cell(ino)?;
            let mut st = cell.state.write();
            alive(&st)?;
            let pages = byte_pages(off, len);
            mmap::changing(&self.ctx, &self.mmaps, &st, pages.clone())?;
            let old_size = st.meta.attr.size;
            file::fallocate(&self.ctx, &mut st, mode, off, len)?;
            mmap::changed(&self.mmaps, ino, pages)?;
            // Bytes that now read differently: a punched or zeroed range, and
            // what lay past the old end of the file (preallocation keeps data).
            let zeroed = if mode & (file::FALLOC_FL_PUNCH_HOLE | file::FALLOC_FL_ZERO_RANGE) != 0 {
                off..off.saturating_add(len)
            } else {
                old_size..old_size.max(st.meta.attr.size)
            };
            mmap::rewritten(&self.ctx, &self.mmaps, &st, zeroed)
        })
    }

    /// lseek with SEEK_DATA or SEEK_HOLE; ENXIO past the end.
    pub fn lseek(&self, ino: Ino, off: u64, whence: u32) -> Result<u64> {
        let cell = self.cell(ino)?;
        let st = cell.state.read();
        alive(&st)?;
        let data = match whence {
            SEEK_DATA => true,
            SEEK_HOLE => false,
            _ => return Err(Error::Invalid("lseek whence")),
        };
        file::seek(&st, off, data)?.ok_or(Error::NoSuchOffset)
    }

    /// Whether this mount batches relaxed mode's in-place metadata
    /// changes ([`Batching`]): then [`Fs::fsync`] has work to do.
    pub fn batches(&self) -> bool {
        self.ctx.journal().batch().is_some()
    }

    /// Every operation is durable when it returns, but for a batching
    /// relaxed mount's in-place metadata changes ([`Batching`]): their
    /// running transaction commits, whole, as ext4's journal does at
    /// fsync. Checks that the inode exists.
    pub fn fsync(&self, ino: Ino) -> Result<()> {
        self.getattr(ino)?;
        self.ctx.journal().commit_running(self.ctx.region(), Journal::AT_FSYNC)
    }

    /// Space and inode counts.
    pub fn statfs(&self) -> StatFs {
        let b = self.ctx.bounds();
        let free_pages = self.ctx.alloc().free_pages();
        // Inode tables grow on demand: each free page could hold 32 inodes.
        let per_page = PAGE_SIZE / INODE_SIZE;
        let files_free = self.ctx.tables().free_count() + free_pages * per_page;
        let blocks = (b.data_end - b.data_start) / PAGE_SIZE;
        StatFs {
            block_size: PAGE_SIZE,
            blocks,
            blocks_free: free_pages,
            blocks_avail: self.ctx.alloc().available_pages(),
            blocks_reserved: self.ctx.alloc().reserved_pages(),
            files: self.ctx.tables().capacity() + free_pages * per_page,
            files_free,
            name_max: crate::layout::NAME_MAX as u64,
            snapshot_blocks: self.ctx.snapshots().held_total(),
            consistency: self.consistency(),
        }
    }
}
