//! The public, thread-safe API: [`Fs`]. Calls take inode numbers (as FUSE
//! does); a few path helpers sit on top. Each inode has its own lock and there
//! is no global lock on the data path; operations on several inodes lock
//! them in inode-number order, and cross-directory renames also take the
//! rename lock (as Linux's s_vfs_rename_mutex) so the tree cannot change
//! shape while one checks for loops.
//!
//! Strict mode (DESIGN.md §1): every call that returns Ok is atomic and
//! durable. Dropping an `Fs` without [`Fs::unmount`] is a crash: the next
//! open recovers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock, RwLockWriteGuard};
use pm::Region;

use crate::alloc::Budget;
use crate::ctx::Ctx;
use crate::dir::{check_name, dentry, DentrySpec};
use crate::error::{Error, Result};
use crate::file;
use crate::hash::U64Map;
use crate::inode::{
    link_entry, read_live_record, record_of_attr, record_publish, setattr_entry, Attr, FileType, Ino, InodeState,
    ROOT_INO,
};
use crate::journal::Update;
use crate::layout::{ftype_of_mode, invalidated_word, Superblock, INODE_LIVE, INODE_SIZE, INODE_STATE_OFF, PAGE_SIZE};
use crate::log::Entry;
use crate::recovery::{self, FormatOptions, MountReport};
use crate::time::now_ns;

/// Most hard links one inode may have.
pub const MAX_LINKS: u32 = 65_000;
/// Longest symlink target (PATH_MAX less the terminating NUL).
pub const MAX_SYMLINK: usize = 4095;

const CACHE_SHARDS: usize = 256;

/// How to open an image.
#[derive(Clone, Copy, Debug, Default)]
pub struct MountOptions {
    pub read_only: bool,
}

/// Attribute changes for [`Fs::setattr`]; `None` leaves a field alone.
#[derive(Clone, Copy, Debug, Default)]
pub struct SetAttr {
    /// Permission bits; the file type cannot change.
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<i64>,
    pub mtime: Option<i64>,
    pub ctime: Option<i64>,
}

/// `rename` flags (Linux values).
pub const RENAME_NOREPLACE: u32 = 1;
pub const RENAME_EXCHANGE: u32 = 2;

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
    pub files: u64,
    pub files_free: u64,
    pub name_max: u64,
}

/// The in-DRAM inode: its state behind a lock, plus the parent of a
/// directory readable without the lock (for rename's loop check).
struct Cell {
    state: RwLock<InodeState>,
    parent: AtomicU64,
}

/// A mounted novafs.
pub struct Fs {
    ctx: Ctx,
    sb: Mutex<Superblock>,
    cache: Vec<Mutex<U64Map<Arc<Cell>>>>,
    rename_lock: Mutex<()>,
    read_only: bool,
    report: MountReport,
}

/// Write locks on a set of inodes taken in inode-number order.
struct Locked<'a> {
    inos: Vec<Ino>,
    guards: Vec<RwLockWriteGuard<'a, InodeState>>,
}

impl Locked<'_> {
    /// The locked state of `ino`. Every caller asks only for inodes it put
    /// in the set, so a miss is a bug in this module, never bad input.
    fn get(&mut self, ino: Ino) -> &mut InodeState {
        let i = self
            .inos
            .iter()
            .position(|&x| x == ino)
            .expect("inode not locked by this operation");
        &mut self.guards[i]
    }
}

fn alive(st: &InodeState) -> Result<()> {
    if st.dead {
        Err(Error::NotFound)
    } else {
        Ok(())
    }
}

/// Looks `name` up in the directory held by `cell` under a read lock.
fn peek_in(cell: &Cell, name: &[u8]) -> Result<Option<crate::dir::Dent>> {
    if name.len() > crate::layout::NAME_MAX {
        return Err(Error::NameTooLong);
    }
    let st = cell.state.read();
    alive(&st)?;
    Ok(st.dir()?.get(name))
}

fn kind_of_ftype(ftype: u8) -> FileType {
    FileType::from_mode(u32::from(ftype) << 12).unwrap_or(FileType::RegularFile)
}

impl Fs {
    /// Lays out an empty file system on `region`.
    pub fn format(region: Arc<dyn Region>, opts: &FormatOptions) -> Result<()> {
        recovery::format(region, opts)
    }

    /// Mounts the file system on `region`, recovering after a crash.
    pub fn open(region: Arc<dyn Region>, opts: MountOptions) -> Result<Fs> {
        let (ctx, sb, report) = recovery::mount(region, opts.read_only)?;
        Ok(Fs {
            ctx,
            sb: Mutex::new(sb),
            cache: (0..CACHE_SHARDS).map(|_| Mutex::new(U64Map::default())).collect(),
            rename_lock: Mutex::new(()),
            read_only: opts.read_only,
            report,
        })
    }

    /// Clean unmount: reclaims unlinked inodes that were still open, saves
    /// the allocators and marks the image clean (NOVA §4.7).
    pub fn unmount(self) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        let cells: Vec<Arc<Cell>> = self
            .cache
            .iter()
            .flat_map(|s| s.lock().values().cloned().collect::<Vec<_>>())
            .collect();
        for cell in cells {
            let mut st = cell.state.write();
            if !st.dead && st.meta.attr.nlink == 0 && st.meta.attr.ino != ROOT_INO {
                st.open = 0;
                self.ctx.region().commit_u64(st.off + INODE_STATE_OFF, 0)?;
                self.forget(&mut st);
            }
        }
        let mut sb = self.sb.lock();
        recovery::save_clean(&self.ctx, &mut sb)
    }

    /// How the mount went (clean or recovered, time taken).
    pub fn mount_report(&self) -> &MountReport {
        &self.report
    }

    /// A copy of the superblock as mounted.
    pub fn superblock(&self) -> Superblock {
        *self.sb.lock()
    }

    fn writable(&self) -> Result<()> {
        if self.read_only {
            Err(Error::ReadOnly)
        } else {
            Ok(())
        }
    }

    /// The DRAM inode, rebuilt from its log on first access (NOVA §4.7 lazy
    /// rebuild). Loading under the cache-shard lock makes "not cached" and
    /// "load" atomic with respect to deletion, which evicts under it too.
    fn cell(&self, ino: Ino) -> Result<Arc<Cell>> {
        let mut shard = self.cache[ino as usize % CACHE_SHARDS].lock();
        if let Some(c) = shard.get(&ino) {
            return Ok(c.clone());
        }
        let off = self.ctx.tables.locate(ino)?;
        let rec = read_live_record(self.ctx.region(), off, ino)?;
        let st = InodeState::load(self.ctx.region(), self.ctx.bounds, off, &rec)?;
        let parent = st.dir().map_or(0, |d| d.parent());
        let cell = Arc::new(Cell {
            state: RwLock::new(st),
            parent: AtomicU64::new(parent),
        });
        shard.insert(ino, cell.clone());
        Ok(cell)
    }

    fn insert_cell(&self, st: InodeState, parent: Ino) {
        let ino = st.meta.attr.ino;
        let cell = Arc::new(Cell {
            state: RwLock::new(st),
            parent: AtomicU64::new(parent),
        });
        self.cache[ino as usize % CACHE_SHARDS].lock().insert(ino, cell);
    }

    /// Marks a freed inode dead and returns its pages and slot (R3: its
    /// state word is already durably free).
    fn forget(&self, st: &mut InodeState) {
        let ino = st.meta.attr.ino;
        st.dead = true;
        // Evict before the slot can be claimed again: a create reusing the
        // number must not have its new cache entry removed here.
        self.cache[ino as usize % CACHE_SHARDS].lock().remove(&ino);
        recovery::release_resources(&self.ctx, st);
        self.ctx.tables.release(ino);
    }

    /// Locks `inos` (deduplicated) for writing in inode-number order.
    fn lock_all<'a>(&self, cells: &'a [(Ino, Arc<Cell>)]) -> Result<Locked<'a>> {
        let mut order: Vec<&(Ino, Arc<Cell>)> = cells.iter().collect();
        order.sort_by_key(|(ino, _)| *ino);
        order.dedup_by_key(|(ino, _)| *ino);
        let mut l = Locked {
            inos: Vec::new(),
            guards: Vec::new(),
        };
        for (ino, cell) in order {
            let g = cell.state.write();
            alive(&g)?;
            l.inos.push(*ino);
            l.guards.push(g);
        }
        Ok(l)
    }

    fn cells(&self, inos: &[Ino]) -> Result<Vec<(Ino, Arc<Cell>)>> {
        inos.iter().map(|&i| Ok((i, self.cell(i)?))).collect()
    }

    /// Appends each inode's entries, then commits every tail, the in-place
    /// invalidation of the dentry adds that `cancel` names as (directory,
    /// name), and `extra` in one journal transaction (R2), then applies the
    /// entries to DRAM.
    ///
    /// GC runs first, outside the transaction ([`Ctx::make_room`]), and the
    /// cancelled adds are located only after it: thorough GC (NOVA §4.6)
    /// moves a directory's live dentries into a new log and frees the old
    /// pages, so an address taken earlier would point into a freed page,
    /// possibly another file's data by then.
    fn commit_multi(
        &self,
        l: &mut Locked<'_>,
        budget: Budget,
        parts: &[(Ino, Vec<Entry>)],
        cancel: &[(Ino, &[u8])],
        extra: &[Update],
    ) -> Result<()> {
        for (ino, entries) in parts {
            self.ctx.make_room(l.get(*ino), entries)?;
        }
        let mut txn = self.ctx.journal.begin();
        let mut updates = Vec::new();
        let mut pending = Vec::new();
        for (ino, entries) in parts {
            let st = l.get(*ino);
            let p = self.ctx.append_in(&mut txn, st, budget, entries)?;
            Ctx::tail_updates(st, &p, &mut updates);
            pending.push(p);
        }
        for &(dir, name) in cancel {
            let d = l.get(dir).dir()?.get(name).ok_or(Error::NotFound)?;
            let word = self.ctx.region().load_u64(d.entry)?;
            updates.push(Update::word(d.entry, invalidated_word(word)));
        }
        updates.extend_from_slice(extra);
        txn.commit(self.ctx.region(), &updates)?;
        for ((ino, entries), p) in parts.iter().zip(&pending) {
            self.ctx.apply(l.get(*ino), entries, p)?;
        }
        Ok(())
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
        self.writable()?;
        let cell = self.cell(ino)?;
        let mut st = cell.state.write();
        alive(&st)?;
        let now = now_ns();
        let old = st.attr();
        let mut a = old;
        if let Some(m) = set.mode {
            a.perm = m & 0o7777;
        }
        a.uid = set.uid.unwrap_or(a.uid);
        a.gid = set.gid.unwrap_or(a.gid);
        a.atime = set.atime.unwrap_or(a.atime);
        a.mtime = set.mtime.unwrap_or(a.mtime);
        a.ctime = set.ctime.unwrap_or(now);
        let mut prep = (Vec::new(), Vec::new());
        if let Some(size) = set.size {
            match old.kind {
                FileType::RegularFile => {}
                FileType::Directory => return Err(Error::IsDir),
                _ => return Err(Error::Invalid("size change of a special file")),
            }
            if size > file::MAX_FILE_SIZE {
                return Err(Error::FileTooBig);
            }
            if size != old.size {
                a.size = size;
                a.mtime = set.mtime.unwrap_or(now);
                prep = file::shrink_prep(&self.ctx, &st, size)?;
            }
        }
        let (mut entries, extents) = prep;
        entries.push(setattr_entry(self.ctx.epoch, &a));
        // A shrink frees space: it may use the reserve (alloc.rs `Budget`).
        let budget = if a.size < old.size {
            Budget::Reserve
        } else {
            Budget::Normal
        };
        if let Err(e) = self.ctx.commit_single(&mut st, budget, &entries) {
            self.ctx.free_extents(&extents);
            return Err(e);
        }
        Ok(st.attr())
    }

    // ---- namespace ----

    /// Creates a regular file.
    pub fn create(&self, parent: Ino, name: &[u8], perm: u32, uid: u32, gid: u32) -> Result<Attr> {
        self.make_node(parent, name, libc::S_IFREG | (perm & 0o7777), 0, uid, gid, None, false)
    }

    /// Creates a regular file with an open handle already registered (as
    /// open(O_CREAT) does), so no unlink can come in between.
    pub fn create_open(&self, parent: Ino, name: &[u8], perm: u32, uid: u32, gid: u32) -> Result<Attr> {
        self.make_node(parent, name, libc::S_IFREG | (perm & 0o7777), 0, uid, gid, None, true)
    }

    /// Creates a directory.
    pub fn mkdir(&self, parent: Ino, name: &[u8], perm: u32, uid: u32, gid: u32) -> Result<Attr> {
        self.make_node(parent, name, libc::S_IFDIR | (perm & 0o7777), 0, uid, gid, None, false)
    }

    /// Creates a node of any non-directory type from a full `mode`: regular
    /// file, FIFO, socket, or device (rdev is kept as metadata).
    pub fn mknod(&self, parent: Ino, name: &[u8], mode: u32, rdev: u64, uid: u32, gid: u32) -> Result<Attr> {
        match FileType::from_mode(mode) {
            None => Err(Error::Invalid("unknown file type in mode")),
            Some(FileType::Directory) => Err(Error::Invalid("mknod cannot make directories")),
            Some(FileType::Symlink) => Err(Error::Invalid("mknod cannot make symlinks")),
            Some(_) => self.make_node(parent, name, mode, rdev, uid, gid, None, false),
        }
    }

    /// Creates a symbolic link to `target`.
    pub fn symlink(&self, parent: Ino, name: &[u8], target: &[u8], uid: u32, gid: u32) -> Result<Attr> {
        if target.is_empty() || target.contains(&0) {
            return Err(Error::Invalid("bad symlink target"));
        }
        if target.len() > MAX_SYMLINK {
            return Err(Error::NameTooLong);
        }
        self.make_node(parent, name, libc::S_IFLNK | 0o777, 0, uid, gid, Some(target), false)
    }

    /// Reads a symlink's target.
    pub fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        let cell = self.cell(ino)?;
        let st = cell.state.read();
        alive(&st)?;
        if st.meta.attr.kind != FileType::Symlink {
            return Err(Error::Invalid("not a symlink"));
        }
        let mut buf = vec![0u8; st.meta.attr.size as usize];
        let n = file::read(&self.ctx, &st, 0, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// NOVA §4.3 create: the new inode and its log are written while its
    /// slot is still free, the dentry is appended to the parent's log, then
    /// one journal transaction sets the valid bit and the parent's tail.
    #[allow(clippy::too_many_arguments)]
    fn make_node(
        &self,
        parent: Ino,
        name: &[u8],
        mode: u32,
        rdev: u64,
        uid: u32,
        gid: u32,
        target: Option<&[u8]>,
        opened: bool,
    ) -> Result<Attr> {
        self.writable()?;
        check_name(name)?;
        let kind = FileType::from_mode(mode).ok_or(Error::Invalid("unknown file type"))?;
        let is_dir = kind == FileType::Directory;
        let pcell = self.cell(parent)?;
        let mut pst = pcell.state.write();
        alive(&pst)?;
        if pst.dir()?.get(name).is_some() {
            return Err(Error::Exists);
        }
        if pst.meta.attr.nlink == 0 {
            return Err(Error::NotFound);
        }
        if is_dir && pst.meta.attr.nlink >= MAX_LINKS {
            return Err(Error::TooManyLinks);
        }
        let (ino, off) = self.ctx.tables.claim(self.ctx.region(), &self.ctx.alloc)?;
        let now = now_ns();
        let attr = Attr {
            ino,
            kind,
            perm: mode & 0o7777,
            nlink: if is_dir { 2 } else { 1 },
            uid,
            gid,
            size: 0,
            blocks: 0,
            atime: now,
            mtime: now,
            ctime: now,
            rdev,
            generation: now as u64,
        };
        let mut st = InodeState::new(attr, off);
        let built = (|| -> Result<()> {
            let record = record_of_attr(&attr, self.ctx.epoch);
            let rec = zerocopy::IntoBytes::as_bytes(&record);
            let write_record = || -> Result<()> {
                self.ctx.region().write(off, rec)?;
                Ok(self.ctx.region().flush(off, INODE_SIZE)?)
            };
            // A directory's ".." and a symlink's target are committed in the
            // new inode's own log first, over the record: that commit's R1
            // fence makes the whole record persistent before the parent's
            // transaction begins, so it only has to set the valid bit.
            let has_init = is_dir || target.is_some();
            if has_init {
                write_record()?;
            }
            if is_dir {
                let spec = DentrySpec {
                    ino: parent,
                    seq: 0,
                    ftype: ftype_of_mode(libc::S_IFDIR),
                    dir_nlink: 2,
                    dir_mtime: now,
                };
                self.ctx
                    .commit_single(&mut st, Budget::Normal, &[dentry(self.ctx.epoch, true, b"..", &spec)])?;
            }
            if let Some(t) = target {
                file::write(&self.ctx, &mut st, 0, t)?;
            }
            let pa = pst.meta.attr;
            let spec = DentrySpec {
                ino,
                seq: pst.dir()?.next_seq(),
                ftype: ftype_of_mode(mode),
                dir_nlink: pa.nlink + u32::from(is_dir),
                dir_mtime: now,
            };
            let entries = [dentry(self.ctx.epoch, true, name, &spec)];
            self.ctx.make_room(&mut pst, &entries)?;
            let mut txn = self.ctx.journal.begin();
            let mut updates = Vec::with_capacity(4);
            if has_init {
                updates.push(Update::word(off + INODE_STATE_OFF, INODE_LIVE));
            } else {
                // The record's flush shares the transaction's R2 fence, so
                // the transaction publishes it by a check and updates
                // (inode::record_publish; FORMAT.md, "What a transaction
                // publishes").
                write_record()?;
                let (check, words) = record_publish(off, &record);
                txn.depends_on(&[check]);
                updates.extend(words);
            }
            let p = self.ctx.append_in(&mut txn, &mut pst, Budget::Normal, &entries)?;
            Ctx::tail_updates(&pst, &p, &mut updates);
            txn.commit(self.ctx.region(), &updates)?;
            self.ctx.apply(&mut pst, &entries, &p)
        })();
        if let Err(e) = built {
            recovery::release_resources(&self.ctx, &mut st);
            self.ctx.tables.release(ino);
            return Err(e);
        }
        let attr = st.attr();
        st.open = u32::from(opened);
        self.insert_cell(st, if is_dir { parent } else { 0 });
        Ok(attr)
    }

    /// Adds the name `newname` in `newparent` for inode `ino`.
    pub fn link(&self, ino: Ino, newparent: Ino, newname: &[u8]) -> Result<Attr> {
        self.writable()?;
        check_name(newname)?;
        let cells = self.cells(&[ino, newparent])?;
        let mut l = self.lock_all(&cells)?;
        let now = now_ns();
        let target = l.get(ino).attr();
        if target.kind == FileType::Directory {
            return Err(Error::NotPermitted);
        }
        if target.nlink == 0 {
            return Err(Error::NotFound);
        }
        if target.nlink >= MAX_LINKS {
            return Err(Error::TooManyLinks);
        }
        let p = l.get(newparent);
        if p.dir()?.get(newname).is_some() {
            return Err(Error::Exists);
        }
        let spec = DentrySpec {
            ino,
            seq: p.dir()?.next_seq(),
            ftype: ftype_of_mode(target.mode()),
            dir_nlink: p.meta.attr.nlink,
            dir_mtime: now,
        };
        let parts = [
            (newparent, vec![dentry(self.ctx.epoch, true, newname, &spec)]),
            (ino, vec![link_entry(self.ctx.epoch, target.nlink + 1, now)]),
        ];
        self.commit_multi(&mut l, Budget::Normal, &parts, &[], &[])?;
        Ok(l.get(ino).attr())
    }

    /// Removes a non-directory name.
    pub fn unlink(&self, parent: Ino, name: &[u8]) -> Result<()> {
        self.remove(parent, name, false)
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, parent: Ino, name: &[u8]) -> Result<()> {
        self.remove(parent, name, true)
    }

    /// Looks `name` up in `parent` under a read lock.
    fn peek(&self, parent: Ino, name: &[u8]) -> Result<Option<crate::dir::Dent>> {
        peek_in(&*self.cell(parent)?, name)
    }

    fn remove(&self, parent: Ino, name: &[u8], want_dir: bool) -> Result<()> {
        self.writable()?;
        if name == b"." || name == b".." {
            return Err(if want_dir {
                Error::Invalid("cannot remove . or ..")
            } else {
                Error::IsDir
            });
        }
        let pcell = self.cell(parent)?;
        loop {
            let d = peek_in(&pcell, name)?.ok_or(Error::NotFound)?;
            let cells = [(parent, pcell.clone()), (d.ino, self.cell(d.ino)?)];
            let mut l = self.lock_all(&cells)?;
            if l.get(parent).dir()?.get(name) != Some(d) {
                continue; // Changed while unlocked: look again.
            }
            let child = l.get(d.ino).attr();
            let is_dir = child.kind == FileType::Directory;
            match (want_dir, is_dir) {
                (true, false) => return Err(Error::NotDir),
                (false, true) => return Err(Error::IsDir),
                _ => {}
            }
            if is_dir && !l.get(d.ino).dir()?.is_empty() {
                return Err(Error::NotEmpty);
            }
            let now = now_ns();
            let p = l.get(parent).meta.attr;
            let spec = DentrySpec {
                ino: d.ino,
                seq: d.seq,
                ftype: d.ftype,
                dir_nlink: p.nlink - u32::from(is_dir),
                dir_mtime: now,
            };
            let mut parts = vec![(parent, vec![dentry(self.ctx.epoch, false, name, &spec)])];
            let nlink = if is_dir { 0 } else { child.nlink.saturating_sub(1) };
            let (extra, free) = self.drop_link(&mut parts, l.get(d.ino), nlink, now);
            self.commit_multi(&mut l, Budget::Reserve, &parts, &[(parent, name)], &extra)?;
            if free {
                self.forget(l.get(d.ino));
            }
            return Ok(());
        }
    }

    /// One link of `st` goes away, leaving `nlink`: either the inode is
    /// freed in the same transaction (returns its state word and true), or
    /// a link-change entry records the new count (NOVA keeps an unlinked
    /// but open file until its last release).
    fn drop_link(
        &self,
        parts: &mut Vec<(Ino, Vec<Entry>)>,
        st: &InodeState,
        nlink: u32,
        now: i64,
    ) -> (Vec<Update>, bool) {
        if nlink == 0 && (st.open == 0 || st.meta.attr.kind == FileType::Directory) {
            (vec![Update::word(st.off + INODE_STATE_OFF, 0)], true)
        } else {
            parts.push((st.meta.attr.ino, vec![link_entry(self.ctx.epoch, nlink, now)]));
            (Vec::new(), false)
        }
    }

    /// rename(2) with RENAME_NOREPLACE and RENAME_EXCHANGE: every change —
    /// both directories, a replaced target, a moved directory's ".." — is
    /// committed by one journal transaction.
    pub fn rename(&self, parent: Ino, name: &[u8], newparent: Ino, newname: &[u8], flags: u32) -> Result<()> {
        self.writable()?;
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0 || flags == RENAME_NOREPLACE | RENAME_EXCHANGE {
            return Err(Error::Invalid("rename flags"));
        }
        for n in [name, newname] {
            if n == b"." || n == b".." {
                return Err(Error::Invalid("cannot rename . or .."));
            }
        }
        check_name(newname)?;
        let exchange = flags & RENAME_EXCHANGE != 0;
        let cross = parent != newparent;
        let _tree = cross.then(|| self.rename_lock.lock());
        loop {
            let src = self.peek(parent, name)?.ok_or(Error::NotFound)?;
            let dst = self.peek(newparent, newname)?;
            if flags & RENAME_NOREPLACE != 0 && dst.is_some() {
                return Err(Error::Exists);
            }
            if exchange && dst.is_none() {
                return Err(Error::NotFound);
            }
            if dst.is_some_and(|d| d.ino == src.ino) {
                return Ok(()); // Two names of one inode: POSIX says do nothing.
            }
            let mut inos = vec![parent, newparent, src.ino];
            inos.extend(dst.map(|d| d.ino));
            let cells = self.cells(&inos)?;
            let mut l = self.lock_all(&cells)?;
            if l.get(parent).dir()?.get(name) != Some(src) || l.get(newparent).dir()?.get(newname) != dst {
                continue;
            }
            return self.rename_locked(&mut l, parent, name, newparent, newname, src, dst, exchange);
        }
    }

    /// True when directory `dir` is `ancestor` or lies below it. Parents are
    /// read without locks: the rename lock keeps the tree's shape fixed.
    fn is_within(&self, mut dir: Ino, ancestor: Ino) -> Result<bool> {
        for _ in 0..=self.ctx.bounds.max_pages() {
            if dir == ancestor {
                return Ok(true);
            }
            if dir == ROOT_INO {
                return Ok(false);
            }
            dir = self.cell(dir)?.parent.load(Ordering::Acquire);
        }
        Err(Error::Corrupt("directory parents form a loop".into()))
    }

    #[allow(clippy::too_many_arguments)]
    fn rename_locked(
        &self,
        l: &mut Locked<'_>,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        src: crate::dir::Dent,
        dst: Option<crate::dir::Dent>,
        exchange: bool,
    ) -> Result<()> {
        let dir_ft = ftype_of_mode(libc::S_IFDIR);
        let src_dir = src.ftype == dir_ft;
        let dst_dir = dst.is_some_and(|d| d.ftype == dir_ft);
        let cross = parent != newparent;
        if let Some(d) = dst {
            if !exchange {
                if src_dir && !dst_dir {
                    return Err(Error::NotDir);
                }
                if !src_dir && dst_dir {
                    return Err(Error::IsDir);
                }
                if dst_dir && !l.get(d.ino).dir()?.is_empty() {
                    return Err(Error::NotEmpty);
                }
            }
        }
        if cross {
            if src_dir && self.is_within(newparent, src.ino)? {
                return Err(Error::Invalid("cannot move a directory into itself"));
            }
            if let Some(d) = dst.filter(|_| exchange && dst_dir) {
                if self.is_within(parent, d.ino)? {
                    return Err(Error::Invalid("cannot move a directory into itself"));
                }
            }
        }
        // Link counts of the two directories after the move.
        let (mut p_nlink, mut np_nlink) = (
            l.get(parent).meta.attr.nlink as i64,
            l.get(newparent).meta.attr.nlink as i64,
        );
        if exchange {
            if cross {
                let delta = i64::from(dst_dir) - i64::from(src_dir);
                p_nlink += delta;
                np_nlink -= delta;
            }
        } else {
            if cross && src_dir {
                p_nlink -= 1;
                np_nlink += 1;
            }
            if dst_dir {
                np_nlink -= 1;
                if !cross {
                    p_nlink -= 1;
                }
            }
        }
        if np_nlink > i64::from(MAX_LINKS) || p_nlink > i64::from(MAX_LINKS) {
            return Err(Error::TooManyLinks);
        }
        let now = now_ns();
        let e = self.ctx.epoch;
        let np_seq = l.get(newparent).dir()?.next_seq();
        let mut parent_entries = Vec::new();
        let mut new_entries = Vec::new();
        let spec = |ino, seq, ftype, nlink: i64| DentrySpec {
            ino,
            seq,
            ftype,
            dir_nlink: nlink as u32,
            dir_mtime: now,
        };
        let (np_final, p_final) = if cross { (np_nlink, p_nlink) } else { (p_nlink, p_nlink) };
        new_entries.push(dentry(e, true, newname, &spec(src.ino, np_seq, src.ftype, np_final)));
        let mut extra = Vec::new();
        let mut freed = None;
        let mut parts: Vec<(Ino, Vec<Entry>)> = Vec::new();
        if exchange {
            let d = dst.ok_or(Error::NotFound)?;
            let seq = if cross {
                l.get(parent).dir()?.next_seq()
            } else {
                np_seq + 1
            };
            parent_entries.push(dentry(e, true, name, &spec(d.ino, seq, d.ftype, p_final)));
            if cross && dst_dir {
                parts.push((
                    d.ino,
                    vec![dentry(
                        e,
                        true,
                        b"..",
                        &spec(parent, 0, dir_ft, l.get(d.ino).meta.attr.nlink.into()),
                    )],
                ));
            }
        } else {
            parent_entries.push(dentry(e, false, name, &spec(src.ino, src.seq, src.ftype, p_final)));
            if let Some(d) = dst {
                let victim = l.get(d.ino);
                let nlink = if dst_dir {
                    0
                } else {
                    victim.meta.attr.nlink.saturating_sub(1)
                };
                let (x, free) = self.drop_link(&mut parts, victim, nlink, now);
                extra = x;
                freed = free.then_some(d.ino);
            }
        }
        if cross && src_dir {
            parts.push((
                src.ino,
                vec![dentry(
                    e,
                    true,
                    b"..",
                    &spec(newparent, 0, dir_ft, l.get(src.ino).meta.attr.nlink.into()),
                )],
            ));
        }
        if cross {
            parts.push((parent, parent_entries));
            parts.push((newparent, new_entries));
        } else {
            new_entries.extend(parent_entries);
            parts.push((parent, new_entries));
        }
        // NOVA §4.6: the adds of both old names are invalidated in place, so
        // they can never reappear once their replacements are collected.
        let mut cancel = vec![(parent, name)];
        if dst.is_some() {
            cancel.push((newparent, newname));
        }
        self.commit_multi(l, Budget::Reserve, &parts, &cancel, &extra)?;
        if let Some(v) = freed {
            self.forget(l.get(v));
        }
        if cross {
            if src_dir {
                self.cell(src.ino)?.parent.store(newparent, Ordering::Release);
            }
            if let Some(d) = dst.filter(|_| exchange && dst_dir) {
                self.cell(d.ino)?.parent.store(parent, Ordering::Release);
            }
        }
        Ok(())
    }

    /// Lists directory `ino` from `offset` (0 to start; then the
    /// `next_offset` of the last entry seen). `emit` returns true to stop.
    /// Offsets stay valid while the directory changes.
    pub fn readdir(&self, ino: Ino, offset: u64, mut emit: impl FnMut(DirEntry) -> bool) -> Result<()> {
        let cell = self.cell(ino)?;
        let st = cell.state.read();
        alive(&st)?;
        let dir = st.dir()?;
        let dots = [(b".".as_slice(), ino, 1u64), (b"..".as_slice(), dir.parent(), 2)];
        for (name, target, next) in dots {
            if offset < next
                && emit(DirEntry {
                    ino: target,
                    kind: FileType::Directory,
                    name: name.to_vec(),
                    next_offset: next,
                })
            {
                return Ok(());
            }
        }
        for (name, d) in dir.entries_after(offset.max(2)) {
            if emit(DirEntry {
                ino: d.ino,
                kind: kind_of_ftype(d.ftype),
                name: name.to_vec(),
                next_offset: d.seq,
            }) {
                break;
            }
        }
        Ok(())
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

    /// Releases a handle; frees the inode if it was the last one of an
    /// unlinked file.
    pub fn release_handle(&self, ino: Ino) -> Result<()> {
        let cell = self.cell(ino)?;
        let mut st = cell.state.write();
        alive(&st)?;
        st.open = st.open.saturating_sub(1);
        if st.open == 0 && st.meta.attr.nlink == 0 && !self.read_only {
            self.ctx.region().commit_u64(st.off + INODE_STATE_OFF, 0)?; // R5, then R3.
            self.forget(&mut st);
        }
        Ok(())
    }

    /// Reads at `off` into `buf`; returns bytes read (0 at end of file).
    pub fn read(&self, ino: Ino, off: u64, buf: &mut [u8]) -> Result<usize> {
        let cell = self.cell(ino)?;
        let st = cell.state.read();
        alive(&st)?;
        file::read(&self.ctx, &st, off, buf)
    }

    /// Writes `data` at `off`: atomic and durable when it returns.
    pub fn write(&self, ino: Ino, off: u64, data: &[u8]) -> Result<usize> {
        self.writable()?;
        let cell = self.cell(ino)?;
        let mut st = cell.state.write();
        alive(&st)?;
        file::write(&self.ctx, &mut st, off, data)
    }

    /// fallocate(2): mode 0, KEEP_SIZE, PUNCH_HOLE|KEEP_SIZE.
    pub fn fallocate(&self, ino: Ino, mode: u32, off: u64, len: u64) -> Result<()> {
        self.writable()?;
        let cell = self.cell(ino)?;
        let mut st = cell.state.write();
        alive(&st)?;
        file::fallocate(&self.ctx, &mut st, mode, off, len)
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

    /// Nothing to do: every operation is durable when it returns (strict
    /// mode). Checks only that the inode exists.
    pub fn fsync(&self, ino: Ino) -> Result<()> {
        self.getattr(ino).map(|_| ())
    }

    /// Space and inode counts.
    pub fn statfs(&self) -> StatFs {
        let b = self.ctx.bounds;
        let free_pages = self.ctx.alloc.free_pages();
        // Inode tables grow on demand: each free page could hold 32 inodes.
        let per_page = PAGE_SIZE / INODE_SIZE;
        let files_free = self.ctx.tables.free_count() + free_pages * per_page;
        StatFs {
            block_size: PAGE_SIZE,
            blocks: (b.data_end - b.data_start) / PAGE_SIZE,
            blocks_free: free_pages,
            blocks_avail: self.ctx.alloc.available_pages(),
            files: self.ctx.tables.capacity() + free_pages * per_page,
            files_free,
            name_max: crate::layout::NAME_MAX as u64,
        }
    }
}
