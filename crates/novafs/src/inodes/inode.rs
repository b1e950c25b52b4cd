//! Inodes: the per-shard inode tables on media (NOVA §4.1) and the DRAM
//! state of an inode, rebuilt lazily from its log on first access (§4.7).
//! Replaying an entry at mount and applying it after a live commit are the
//! same code ([`Meta::apply`]), so the DRAM view can never drift from what a
//! remount would rebuild.

use std::collections::BTreeMap;

use pm::Region;
use zerocopy::IntoBytes;

use crate::alloc::{Extent, Freed};
use crate::dir::DirIndex;
use crate::error::{corrupt, Error, Result};
use crate::hash::U64Map;
use crate::journal::{Check, Update};
use crate::layout::Bounds;
use crate::layout::{
    decode, DentryHead, EntryHeader, EntryType, Inode, LinkChangeEntry, LostEntry, MmapEntry, SetattrEntry, WriteEntry,
    DENTRY_HEAD_SIZE, ENTRY_EPOCH_OFF, ENTRY_INVALID, FLAG_APPEND, FLAG_IMMUTABLE, INODE_CSUM_END, INODE_CSUM_WORD_OFF,
    INODE_FLAGS, INODE_HEAD_OFF, INODE_LIVE, INODE_STATE_OFF, MAX_FILE_PAGES, MAX_FILE_SIZE, MMAP_PROTECT,
    MMAP_UNPROTECT, PAGE_SIZE,
};
use crate::log::{Committed, Entry, Log};
use crate::pagemap::FileMap;
use crate::xattrmap::XattrMap;

pub use crate::layout::{Ino, ROOT_INO};

/// The type of a file, from the S_IFMT bits of its mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileType {
    RegularFile,
    Directory,
    Symlink,
    CharDevice,
    BlockDevice,
    NamedPipe,
    Socket,
}

impl FileType {
    pub fn from_mode(mode: u32) -> Option<FileType> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => FileType::RegularFile,
            libc::S_IFDIR => FileType::Directory,
            libc::S_IFLNK => FileType::Symlink,
            libc::S_IFCHR => FileType::CharDevice,
            libc::S_IFBLK => FileType::BlockDevice,
            libc::S_IFIFO => FileType::NamedPipe,
            libc::S_IFSOCK => FileType::Socket,
            _ => return None,
        })
    }

    /// The S_IFMT bits of this type.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileType::RegularFile => libc::S_IFREG,
            FileType::Directory => libc::S_IFDIR,
            FileType::Symlink => libc::S_IFLNK,
            FileType::CharDevice => libc::S_IFCHR,
            FileType::BlockDevice => libc::S_IFBLK,
            FileType::NamedPipe => libc::S_IFIFO,
            FileType::Socket => libc::S_IFSOCK,
        }
    }

    /// Files whose contents are data pages (symlink targets are stored as data).
    pub fn has_data(self) -> bool {
        matches!(self, FileType::RegularFile | FileType::Symlink)
    }
}

/// What `getattr` reports. Times are nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr {
    pub ino: Ino,
    pub kind: FileType,
    /// Permission bits (mode & 0o7777).
    pub perm: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// 512-byte blocks allocated to the file's data.
    pub blocks: u64,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    pub rdev: u64,
    pub generation: u64,
    /// chattr flags (`layout::INODE_FLAGS`).
    pub flags: u32,
}

impl Attr {
    /// The full mode: type bits and permission bits.
    pub fn mode(&self) -> u32 {
        self.kind.mode_bits() | self.perm
    }

    /// EPERM when chattr's immutable or append-only flag forbids changing
    /// the inode's attributes or removing a name of it.
    pub fn check_changeable(&self) -> Result<()> {
        if self.flags & (FLAG_IMMUTABLE | FLAG_APPEND) != 0 {
            return Err(Error::NotPermitted);
        }
        Ok(())
    }

    /// EPERM when the directory is immutable: no name is added to it.
    pub fn check_names_added(&self) -> Result<()> {
        if self.flags & FLAG_IMMUTABLE != 0 {
            return Err(Error::NotPermitted);
        }
        Ok(())
    }
}

/// The per-type index an inode's log rebuilds.
#[derive(Debug)]
pub(crate) enum Body {
    File(FileMap),
    Dir(DirIndex),
    Special,
}

/// Attributes, index and liveness bookkeeping: everything the log replays into.
#[derive(Debug)]
pub(crate) struct Meta {
    pub attr: Attr,
    pub body: Body,
    /// Extended attributes, whatever the type.
    pub xattrs: XattrMap,
    /// The latest non-shrinking setattr entry (dead once superseded, §4.6).
    last_setattr: Option<u64>,
    /// The latest link-change entry.
    last_link: Option<u64>,
    /// File pages mapped writable (DAX mmap, caveat DAXor): their data
    /// pages' checksums may be stale. Page → its MMAP_UNPROTECT entry.
    pub unprotected: BTreeMap<u64, u64>,
    /// The log's newest entry when it is one relaxed mode may change in
    /// place (`relaxed`): a setattr, or a write entry that maps pages
    /// (which then all stay its own: nothing newer superseded them). Such
    /// an entry is live, so GC keeps its page.
    pub newest: Option<u64>,
}

/// Log entries decoded and checked against the inode they belong to.
impl Meta {
    fn new(attr: Attr) -> Meta {
        let body = match attr.kind {
            FileType::RegularFile | FileType::Symlink => Body::File(FileMap::default()),
            FileType::Directory => Body::Dir(DirIndex::default()),
            _ => Body::Special,
        };
        Meta {
            attr,
            body,
            xattrs: XattrMap::default(),
            last_setattr: None,
            last_link: None,
            unprotected: BTreeMap::new(),
            newest: None,
        }
    }

    /// Pages from `range` are protected again (their data page is new,
    /// gone, or resealed): their unprotect entries die.
    fn protect(&mut self, log: &mut Log, range: std::ops::Range<u64>) {
        if self.unprotected.is_empty() {
            return;
        }
        let gone: Vec<u64> = self.unprotected.range(range).map(|(&pg, _)| pg).collect();
        for pg in gone {
            if let Some(entry) = self.unprotected.remove(&pg) {
                log.kill(entry);
            }
        }
    }

    /// Applies one committed entry at `off` to the DRAM state, marking the
    /// entries it supersedes dead in `log` and collecting data pages that are
    /// no longer referenced into `freed` (the caller frees them after the
    /// commit, rule R3; during replay they were freed long ago). Reached
    /// only through replay ([`InodeState::load`]) and, with a commit's
    /// proof, [`InodeState::publish`].
    fn apply(&mut self, log: &mut Log, bounds: Bounds, off: u64, bytes: &[u8], freed: &mut Freed) -> Result<()> {
        let hdr: EntryHeader = decode(bytes)?;
        let Some(etype) = EntryType::from_u8(hdr.etype) else {
            return Err(corrupt!(
                LogEntry,
                at = off,
                "unknown log entry type {} at {off:#x}",
                hdr.etype
            ));
        };
        // What this entry supersedes dies in its epoch.
        log.applying(hdr.epoch);
        self.newest = None;
        match etype {
            EntryType::Write => {
                let e: WriteEntry = decode(bytes)?;
                let Body::File(map) = &mut self.body else {
                    return Err(corrupt!(
                        LogEntry,
                        at = off,
                        "write entry in the log of a non-file at {off:#x}"
                    ));
                };
                if e.npages == 0 || (e.block != 0 && !bounds.is_extent(e.block, u64::from(e.npages))) {
                    return Err(corrupt!(
                        LogEntry,
                        at = off,
                        "write entry at {off:#x} points outside the data area"
                    ));
                }
                if e.pgoff
                    .checked_add(u64::from(e.npages))
                    .is_none_or(|end| end > MAX_FILE_PAGES)
                    || e.size > MAX_FILE_SIZE
                {
                    return Err(corrupt!(
                        LogEntry,
                        at = off,
                        "write entry at {off:#x} lies past the largest file size"
                    ));
                }
                map.apply_write(log, off, e.pgoff, e.block, u64::from(e.npages), freed);
                self.protect(log, e.pgoff..e.pgoff + u64::from(e.npages));
                self.newest = (e.block != 0).then_some(off);
                self.attr.size = e.size;
                self.attr.mtime = e.mtime;
                self.attr.ctime = e.mtime;
            }
            EntryType::Setattr => {
                let e: SetattrEntry = decode(bytes)?;
                if e.size > MAX_FILE_SIZE {
                    return Err(corrupt!(
                        LogEntry,
                        at = off,
                        "setattr entry at {off:#x} sets a size past the largest file size"
                    ));
                }
                let shrinks = e.size < self.attr.size;
                if let Body::File(map) = &mut self.body {
                    if shrinks {
                        map.truncate(log, e.size.div_ceil(PAGE_SIZE), freed);
                        self.protect(log, e.size.div_ceil(PAGE_SIZE)..u64::MAX);
                    }
                }
                if e.flags & !INODE_FLAGS != 0 {
                    return Err(corrupt!(
                        LogEntry,
                        at = off,
                        "setattr entry at {off:#x} sets unknown flags {:#x}",
                        e.flags
                    ));
                }
                self.attr.flags = e.flags;
                self.attr.perm = e.mode & 0o7777;
                self.attr.uid = e.uid;
                self.attr.gid = e.gid;
                self.attr.size = e.size;
                self.attr.atime = e.atime;
                self.attr.mtime = e.mtime;
                self.attr.ctime = e.ctime;
                self.newest = Some(off);
                // A shrinking setattr stays live until thorough GC: dropping it
                // while older write entries remain would resurrect their pages.
                if !shrinks {
                    if let Some(prev) = self.last_setattr.replace(off) {
                        log.kill(prev);
                    }
                }
            }
            EntryType::LinkChange => {
                let e: LinkChangeEntry = decode(bytes)?;
                self.attr.nlink = e.nlink;
                self.attr.ctime = e.ctime;
                if let Some(prev) = self.last_link.replace(off) {
                    log.kill(prev);
                }
            }
            EntryType::DentryAdd | EntryType::DentryRemove => {
                let d: DentryHead = decode(bytes)?;
                let name = bytes
                    .get(DENTRY_HEAD_SIZE..DENTRY_HEAD_SIZE + usize::from(d.name_len))
                    .ok_or_else(|| corrupt!(Directory, at = off, "dentry at {off:#x} has a bad name length"))?;
                let Body::Dir(dir) = &mut self.body else {
                    return Err(corrupt!(
                        Directory,
                        at = off,
                        "dentry in the log of a non-directory at {off:#x}"
                    ));
                };
                if hdr.flags & ENTRY_INVALID != 0 {
                    // Cancelled by a later remove or replace (NOVA §4.6).
                    log.kill(off);
                    return Ok(());
                }
                if etype == EntryType::DentryAdd {
                    dir.apply_add(log, off, name, &d)?;
                } else {
                    dir.apply_remove(log, off, name);
                }
                // The newest dentry carries the directory's link count.
                log.pin(off);
                self.attr.nlink = d.dir_nlink;
                self.attr.mtime = d.dir_mtime;
                self.attr.ctime = d.dir_mtime;
            }
            EntryType::Xattr => {
                self.attr.ctime = self.xattrs.apply(log, bounds, off, bytes, freed)?;
            }
            EntryType::Mmap => {
                let e: MmapEntry = decode(bytes)?;
                if !matches!(self.body, Body::File(_))
                    || e.npages == 0
                    || e.pgoff.checked_add(e.npages).is_none_or(|end| end > MAX_FILE_PAGES)
                {
                    return Err(corrupt!(
                        LogEntry,
                        at = off,
                        "mmap entry at {off:#x} names no pages of a file"
                    ));
                }
                match e.prot {
                    MMAP_UNPROTECT if e.npages == 1 => {
                        if let Some(prev) = self.unprotected.insert(e.pgoff, off) {
                            log.kill(prev);
                        }
                    }
                    MMAP_PROTECT => {
                        self.protect(log, e.pgoff..e.pgoff + e.npages);
                        // It only ever cancels the entries above.
                        log.kill(off);
                    }
                    _ => return Err(corrupt!(LogEntry, at = off, "mmap entry at {off:#x} has a bad kind")),
                }
            }
            EntryType::Lost => {
                let e: LostEntry = decode(bytes)?;
                let Body::File(map) = &mut self.body else {
                    return Err(corrupt!(
                        LogEntry,
                        at = off,
                        "lost range entry in the log of a non-file at {off:#x}"
                    ));
                };
                if e.npages == 0 || e.pgoff.checked_add(e.npages).is_none_or(|end| end > MAX_FILE_PAGES) {
                    return Err(corrupt!(
                        LogEntry,
                        at = off,
                        "lost range entry at {off:#x} names no pages of a file"
                    ));
                }
                map.apply_lost(log, e.pgoff, e.npages, freed);
                // Their data pages are gone: nothing left to reseal.
                self.protect(log, e.pgoff..e.pgoff + e.npages);
            }
            // The snapshot list's own records; never in an inode's log.
            EntryType::SnapshotInfo => {}
        }
        if let Body::File(map) = &self.body {
            self.attr.blocks = map.mapped_pages() * (PAGE_SIZE / 512);
        }
        Ok(())
    }

    /// Entries a compacted log would hold: the thorough-GC yardstick.
    pub(crate) fn live_estimate(&self) -> u64 {
        2 + self.xattrs.len() as u64
            + self.unprotected.len() as u64
            + match &self.body {
                Body::File(m) => m.live_entries() + m.lost().runs().count() as u64,
                Body::Dir(d) => d.len() as u64 + 1,
                Body::Special => 0,
            }
    }
}

/// DRAM state of one inode, behind its lock.
#[derive(Debug)]
pub(crate) struct InodeState {
    pub meta: Meta,
    pub log: Log,
    /// Byte offset of the inode in its table.
    pub off: u64,
    /// Open handles; an unlinked inode lives until the last is released.
    pub open: u32,
    /// Set once the inode has been freed: holders of a stale reference see
    /// ENOENT instead of touching a reused slot.
    pub dead: bool,
    /// The epoch it was created in (its record's `create_epoch`): the
    /// snapshots at or after it may need it (Fortis §3.2).
    pub born: u64,
}

/// A data run that a later entry of the log superseded: mapped by an
/// entry of epoch `birth`, unreferenced by one of epoch `death`. A
/// snapshot `s` with `birth <= s < death` still needs it (Fortis §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Superseded {
    pub ext: Extent,
    pub birth: u64,
    pub death: u64,
}

impl InodeState {
    /// Rebuilds an inode from its table record and log.
    pub(crate) fn load(region: &dyn Region, bounds: Bounds, off: u64, rec: &Inode) -> Result<InodeState> {
        Self::replay(region, bounds, off, rec, u64::MAX, None, None)
    }

    /// [`InodeState::load`] with each entry damaged in every copy that
    /// `salvage` holds replaced by its lost range record (`fsck::salvage`).
    pub(crate) fn load_salvaged(
        region: &dyn Region,
        bounds: Bounds,
        off: u64,
        rec: &Inode,
        salvage: &U64Map<Entry>,
    ) -> Result<InodeState> {
        Self::replay(region, bounds, off, rec, u64::MAX, None, Some(salvage))
    }

    /// The inode as snapshot `epoch` sees it (Fortis §3): its log replayed
    /// up to the last entry of that epoch. A dentry add invalidated on the
    /// media is left out as at any replay: it was invalidated only once no
    /// snapshot could see it (`commit::Multi::cancel`).
    pub(crate) fn load_at(
        region: &dyn Region,
        bounds: Bounds,
        off: u64,
        rec: &Inode,
        epoch: u64,
    ) -> Result<InodeState> {
        Self::replay(region, bounds, off, rec, epoch, None, None)
    }

    /// [`InodeState::load`], also listing every data run the replay found
    /// superseded: what the crash scan and fsck give the snapshots.
    pub(crate) fn load_superseded(
        region: &dyn Region,
        bounds: Bounds,
        off: u64,
        rec: &Inode,
    ) -> Result<(InodeState, Vec<Superseded>)> {
        let mut gone = Vec::new();
        let st = Self::replay(region, bounds, off, rec, u64::MAX, Some(&mut gone), None)?;
        Ok((st, gone))
    }

    fn replay(
        region: &dyn Region,
        bounds: Bounds,
        off: u64,
        rec: &Inode,
        upto: u64,
        mut gone: Option<&mut Vec<Superseded>>,
        salvage: Option<&U64Map<Entry>>,
    ) -> Result<InodeState> {
        let attr = attr_of_record(rec)?;
        let mut meta = Meta::new(attr);
        let mut freed = Freed::default();
        let log = Log::load_salvaging(
            region,
            bounds,
            rec.log_head,
            rec.log_tail,
            salvage,
            |log, eoff, bytes| {
                // Epochs only grow along a log (`snapshot`: the gate).
                let epoch = decode::<EntryHeader>(bytes)?.epoch;
                if epoch > upto {
                    return Ok(());
                }
                meta.apply(log, bounds, eoff, bytes, &mut freed)?;
                if let Some(out) = gone.as_deref_mut() {
                    let death = epoch;
                    for &(ext, entry) in freed.runs() {
                        // The superseded entry is an earlier one of this log.
                        let birth = region.load_u64(entry + ENTRY_EPOCH_OFF)?;
                        out.push(Superseded { ext, birth, death });
                    }
                }
                freed.clear();
                Ok(())
            },
        )?;
        Ok(InodeState {
            meta,
            log,
            off,
            open: 0,
            dead: false,
            born: rec.create_epoch,
        })
    }

    /// Publishes committed `entries` to the DRAM state (the log's view, the
    /// attributes and the index), returning the data pages they made
    /// unreferenced: the caller frees them with the same proof (R3).
    pub(crate) fn publish(&mut self, bounds: Bounds, entries: &[Entry], proof: &Committed) -> Result<Freed> {
        self.log.committed(proof);
        let mut freed = Freed::default();
        for (e, &off) in entries.iter().zip(proof.offsets()) {
            self.meta.apply(&mut self.log, bounds, off, e.bytes(), &mut freed)?;
        }
        Ok(freed)
    }

    /// Every page the inode occupies: its log pages, their mirrors (the
    /// replicas, `replica`), its data pages and its xattr values' pages.
    pub(crate) fn pages(&self, bounds: Bounds) -> Vec<u64> {
        let mut v: Vec<u64> = self.log.pages().iter().flat_map(|&p| bounds.copies(p)).collect();
        if let Body::File(map) = &self.meta.body {
            v.extend(map.blocks());
        }
        v.extend(self.meta.xattrs.blocks());
        v
    }

    /// Takes every page the inode holds, merged into runs (a file written
    /// in order frees in one call), leaving it empty: the inode is gone.
    /// Returns the log pages (freed with their mirrors) and the data pages.
    pub(crate) fn take_pages(&mut self) -> (Vec<Extent>, Vec<Extent>) {
        let log = runs(self.log.take_pages());
        let mut data: Vec<u64> = std::mem::take(&mut self.meta.xattrs).blocks().collect();
        if let Body::File(map) = std::mem::replace(&mut self.meta.body, Body::Special) {
            data.extend(map.into_blocks());
        }
        (log, runs(data))
    }

    /// A brand-new inode with an empty log, created in epoch `born`.
    pub(crate) fn new(attr: Attr, off: u64, born: u64) -> InodeState {
        InodeState {
            meta: Meta::new(attr),
            log: Log::default(),
            off,
            open: 0,
            dead: false,
            born,
        }
    }

    pub(crate) fn attr(&self) -> Attr {
        let mut a = self.meta.attr;
        if let Body::Dir(_) = self.meta.body {
            // A directory's storage is its log: its size and blocks count
            // the log's pages, as ext4 counts a directory's blocks.
            let pages = self.log.pages().len() as u64;
            a.size = pages * PAGE_SIZE;
            a.blocks = pages * (PAGE_SIZE / 512);
        }
        a
    }

    pub(crate) fn dir(&self) -> Result<&DirIndex> {
        match &self.meta.body {
            Body::Dir(d) => Ok(d),
            _ => Err(Error::NotDir),
        }
    }
}

/// A DAX mmap record (`MmapEntry`): `prot` is MMAP_UNPROTECT or
/// MMAP_PROTECT.
pub(crate) fn mmap_entry(epoch: u64, pgoff: u64, npages: u64, prot: u64) -> Entry {
    let e = MmapEntry {
        pgoff,
        npages,
        prot,
        ..MmapEntry::default()
    };
    Entry::new(EntryType::Mmap, epoch, &e)
}

/// A lost range record (`LostEntry`) for file pages `pages`.
pub(crate) fn lost_entry(epoch: u64, pages: std::ops::Range<u64>) -> Entry {
    let e = LostEntry {
        pgoff: pages.start,
        npages: pages.end - pages.start,
        ..LostEntry::default()
    };
    Entry::new(EntryType::Lost, epoch, &e)
}

/// An inode update carrying the full attribute set `a` (NOVA §4.6: the
/// latest one supersedes every earlier one).
pub(crate) fn setattr_entry(epoch: u64, a: &Attr) -> Entry {
    let e = SetattrEntry {
        mode: a.mode(),
        uid: a.uid,
        gid: a.gid,
        size: a.size,
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
        flags: a.flags,
        ..SetattrEntry::default()
    };
    Entry::new(EntryType::Setattr, epoch, &e)
}

/// A link-count change.
pub(crate) fn link_entry(epoch: u64, nlink: u32, ctime: i64) -> Entry {
    let e = LinkChangeEntry {
        nlink,
        ctime,
        ..LinkChangeEntry::default()
    };
    Entry::new(EntryType::LinkChange, epoch, &e)
}

/// Decodes and checks a live inode record.
pub(crate) fn attr_of_record(rec: &Inode) -> Result<Attr> {
    if rec.csum != rec.compute_csum() {
        return Err(corrupt!(
            InodeRecord,
            ino = rec.ino,
            "inode {} fails its checksum",
            rec.ino
        ));
    }
    let kind = FileType::from_mode(rec.mode).ok_or_else(|| {
        corrupt!(
            InodeRecord,
            ino = rec.ino,
            "inode {} has bad mode {:o}",
            rec.ino,
            rec.mode
        )
    })?;
    if rec.size > MAX_FILE_SIZE {
        return Err(corrupt!(
            InodeRecord,
            ino = rec.ino,
            "inode {} has size {} past the largest file size",
            rec.ino,
            rec.size
        ));
    }
    Ok(Attr {
        ino: rec.ino,
        kind,
        perm: rec.mode & 0o7777,
        nlink: rec.nlink,
        uid: rec.uid,
        gid: rec.gid,
        size: rec.size,
        blocks: 0,
        atime: rec.atime,
        mtime: rec.mtime,
        ctime: rec.ctime,
        rdev: rec.rdev,
        generation: rec.generation,
        flags: 0,
    })
}

/// `pages` sorted and merged into runs of contiguous pages.
fn runs(mut pages: Vec<u64>) -> Vec<Extent> {
    pages.sort_unstable();
    let mut runs: Vec<Extent> = Vec::new();
    for p in pages {
        match runs.last_mut() {
            Some(r) if r.off + r.npages * PAGE_SIZE == p => r.npages += 1,
            _ => runs.push(Extent { off: p, npages: 1 }),
        }
    }
    runs
}

/// Builds the record of a new inode (state still free: the creating
/// transaction sets it live).
pub(crate) fn record_of_attr(a: &Attr, epoch: u64) -> Inode {
    let mut rec = Inode {
        state: 0,
        log_head: 0,
        log_tail: 0,
        ino: a.ino,
        generation: a.generation,
        mode: a.mode(),
        uid: a.uid,
        gid: a.gid,
        flags: 0,
        nlink: a.nlink,
        pad0: 0,
        size: a.size,
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
        rdev: a.rdev,
        create_epoch: epoch,
        delete_epoch: 0,
        csum: 0,
        pad1: 0,
    };
    rec.csum = rec.compute_csum();
    rec
}

/// How a journal transaction publishes the new record `rec`, written at
/// `off` and flushed but not fenced (rule R2). Every byte of the slot is
/// covered: the state word is an update (the valid bit the transaction
/// sets); `log_head`, `log_tail` and the checksummed fields are one check,
/// so a torn line or the previous occupant's log words keep the
/// transaction from being accepted; the checksum word is a second update,
/// replayed in place, because a check cannot cover it (a CRC32C over bytes
/// followed by their own CRC32C is a constant, which stale records pass).
pub(crate) fn record_publish(off: u64, rec: &Inode) -> (Check, [Update; 2]) {
    let bytes = rec.as_bytes();
    let fields = &bytes[INODE_HEAD_OFF as usize..INODE_CSUM_END];
    let csum_word = u64::from(rec.csum) | u64::from(rec.pad1) << 32;
    (
        Check::of(off + INODE_HEAD_OFF, fields),
        [
            Update::word(off + INODE_STATE_OFF, INODE_LIVE),
            Update::word(off + INODE_CSUM_WORD_OFF, csum_word),
        ],
    )
}
