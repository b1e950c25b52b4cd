//! Inodes: the per-shard inode tables on media (NOVA §4.1) and the DRAM
//! state of an inode, rebuilt lazily from its log on first access (§4.7).
//! Replaying an entry at mount and applying it after a live commit are the
//! same code ([`Meta::apply`]), so the DRAM view can never drift from what a
//! remount would rebuild.

use parking_lot::{Mutex, RwLock};
use pm::Region;
use zerocopy::IntoBytes;

use crate::alloc::{current_shard, Extent, PageAllocator, RangeSet};
use crate::dir::DirIndex;
use crate::error::{corrupt, Error, Result};
use crate::file::FileMap;
use crate::journal::{Check, Update};
use crate::layout::{
    decode, ChunkFooter, DentryHead, EntryHeader, EntryType, Inode, LinkChangeEntry, SetattrEntry, Superblock,
    WriteEntry, CHUNK_FOOTER_OFF, CHUNK_MAGIC, CHUNK_NEXT_OFF, CHUNK_PAGES, CHUNK_SIZE, DENTRY_HEAD_SIZE,
    ENTRY_INVALID, INODES_PER_CHUNK, INODE_CSUM_END, INODE_CSUM_WORD_OFF, INODE_HEAD_OFF, INODE_LIVE, INODE_SIZE,
    INODE_STATE_OFF, PAGE_SIZE,
};
use crate::log::{Bounds, Entry, Log};

/// Inode number. The root directory is 1, as FUSE expects.
pub type Ino = u64;
pub const ROOT_INO: Ino = 1;

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
}

impl Attr {
    /// The full mode: type bits and permission bits.
    pub fn mode(&self) -> u32 {
        self.kind.mode_bits() | self.perm
    }
}

/// The per-type index an inode's log rebuilds.
#[derive(Debug)]
pub enum Body {
    File(FileMap),
    Dir(DirIndex),
    Special,
}

/// Attributes, index and liveness bookkeeping: everything the log replays into.
#[derive(Debug)]
pub struct Meta {
    pub attr: Attr,
    pub body: Body,
    /// The latest non-shrinking setattr entry (dead once superseded, §4.6).
    last_setattr: Option<u64>,
    /// The latest link-change entry.
    last_link: Option<u64>,
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
            last_setattr: None,
            last_link: None,
        }
    }

    /// Applies one committed entry at `off` to the DRAM state, marking the
    /// entries it supersedes dead in `log` and collecting data pages that are
    /// no longer referenced into `freed` (the caller frees them after the
    /// commit, rule R3; during replay they were freed long ago).
    pub fn apply(
        &mut self,
        log: &mut Log,
        bounds: Bounds,
        off: u64,
        bytes: &[u8],
        freed: &mut Vec<Extent>,
    ) -> Result<()> {
        let hdr: EntryHeader = decode(bytes)?;
        let Some(etype) = EntryType::from_u8(hdr.etype) else {
            return Err(corrupt!("unknown log entry type {} at {off:#x}", hdr.etype));
        };
        match etype {
            EntryType::Write => {
                let e: WriteEntry = decode(bytes)?;
                let Body::File(map) = &mut self.body else {
                    return Err(corrupt!("write entry in the log of a non-file at {off:#x}"));
                };
                if e.npages == 0 || (e.block != 0 && !bounds.is_extent(e.block, u64::from(e.npages))) {
                    return Err(corrupt!("write entry at {off:#x} points outside the data area"));
                }
                map.apply_write(log, off, e.pgoff, e.block, u64::from(e.npages), freed);
                self.attr.size = e.size;
                self.attr.mtime = e.mtime;
                self.attr.ctime = e.mtime;
            }
            EntryType::Setattr => {
                let e: SetattrEntry = decode(bytes)?;
                let shrinks = e.size < self.attr.size;
                if let Body::File(map) = &mut self.body {
                    if shrinks {
                        map.truncate(log, e.size.div_ceil(PAGE_SIZE), freed);
                    }
                }
                self.attr.perm = e.mode & 0o7777;
                self.attr.uid = e.uid;
                self.attr.gid = e.gid;
                self.attr.size = e.size;
                self.attr.atime = e.atime;
                self.attr.mtime = e.mtime;
                self.attr.ctime = e.ctime;
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
                    .ok_or_else(|| corrupt!("dentry at {off:#x} has a bad name length"))?;
                let Body::Dir(dir) = &mut self.body else {
                    return Err(corrupt!("dentry in the log of a non-directory at {off:#x}"));
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
            // Reserved for the mmap and snapshot waves: kept, never applied.
            EntryType::Mmap | EntryType::SnapshotInfo => {}
        }
        if let Body::File(map) = &self.body {
            self.attr.blocks = map.mapped_pages() * (PAGE_SIZE / 512);
        }
        Ok(())
    }

    /// Entries a compacted log would hold: the thorough-GC yardstick.
    pub fn live_estimate(&self) -> u64 {
        2 + match &self.body {
            Body::File(m) => m.live_entries(),
            Body::Dir(d) => d.len() as u64 + 1,
            Body::Special => 0,
        }
    }
}

/// DRAM state of one inode, behind its lock.
#[derive(Debug)]
pub struct InodeState {
    pub meta: Meta,
    pub log: Log,
    /// Byte offset of the inode in its table.
    pub off: u64,
    /// Open handles; an unlinked inode lives until the last is released.
    pub open: u32,
    /// Set once the inode has been freed: holders of a stale reference see
    /// ENOENT instead of touching a reused slot.
    pub dead: bool,
}

impl InodeState {
    /// Rebuilds an inode from its table record and log.
    pub fn load(region: &dyn Region, bounds: Bounds, off: u64, rec: &Inode) -> Result<InodeState> {
        let attr = attr_of_record(rec)?;
        let mut meta = Meta::new(attr);
        let mut freed = Vec::new();
        let log = Log::load(region, bounds, rec.log_head, rec.log_tail, |log, eoff, bytes| {
            meta.apply(log, bounds, eoff, bytes, &mut freed)
        })?;
        Ok(InodeState {
            meta,
            log,
            off,
            open: 0,
            dead: false,
        })
    }

    /// A brand-new inode with an empty log.
    pub fn new(attr: Attr, off: u64) -> InodeState {
        InodeState {
            meta: Meta::new(attr),
            log: Log::default(),
            off,
            open: 0,
            dead: false,
        }
    }

    pub fn attr(&self) -> Attr {
        self.meta.attr
    }

    pub fn dir(&self) -> Result<&DirIndex> {
        match &self.meta.body {
            Body::Dir(d) => Ok(d),
            _ => Err(Error::NotDir),
        }
    }
}

/// An inode update carrying the full attribute set `a` (NOVA §4.6: the
/// latest one supersedes every earlier one).
pub fn setattr_entry(epoch: u64, a: &Attr) -> Entry {
    let e = SetattrEntry {
        mode: a.mode(),
        uid: a.uid,
        gid: a.gid,
        size: a.size,
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
        ..SetattrEntry::default()
    };
    Entry::new(EntryType::Setattr, epoch, &e)
}

/// A link-count change.
pub fn link_entry(epoch: u64, nlink: u32, ctime: i64) -> Entry {
    let e = LinkChangeEntry {
        nlink,
        ctime,
        ..LinkChangeEntry::default()
    };
    Entry::new(EntryType::LinkChange, epoch, &e)
}

/// Decodes and checks a live inode record.
pub fn attr_of_record(rec: &Inode) -> Result<Attr> {
    if rec.csum != rec.compute_csum() {
        return Err(corrupt!("inode {} fails its checksum", rec.ino));
    }
    let kind =
        FileType::from_mode(rec.mode).ok_or_else(|| corrupt!("inode {} has bad mode {:o}", rec.ino, rec.mode))?;
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
    })
}

/// Builds the record of a new inode (state still free: the creating
/// transaction sets it live).
pub fn record_of_attr(a: &Attr, epoch: u64) -> Inode {
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
pub fn record_publish(off: u64, rec: &Inode) -> (Check, [Update; 2]) {
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

/// One shard's inode table: its chunk chain and free slots.
#[derive(Default)]
struct TableShard {
    chunks: RwLock<Vec<u64>>,
    free: Mutex<RangeSet>,
}

/// The per-shard inode tables (NOVA §4.1). Inode number `ino` lives in
/// shard `(ino - 1) % shards` at local index `(ino - 1) / shards`.
pub struct InodeTables {
    shards: Vec<TableShard>,
    heads_off: u64,
}

impl InodeTables {
    /// Walks every shard's chunk chain. Free slots are filled in later, from
    /// the saved allocator state or a scan.
    pub fn load(region: &dyn Region, sb: &Superblock, bounds: Bounds) -> Result<InodeTables> {
        let mut shards = Vec::new();
        for s in 0..u64::from(sb.shards) {
            let mut chunks = Vec::new();
            let mut c = region.load_u64(sb.inode_heads_off + 8 * s)?;
            while c != 0 {
                if !bounds.is_extent(c, CHUNK_PAGES) || chunks.len() as u64 > bounds.max_pages() / CHUNK_PAGES {
                    return Err(corrupt!("inode table chunk pointer {c:#x} of shard {s} is invalid"));
                }
                let mut buf = [0u8; INODE_SIZE as usize];
                region.read(c + CHUNK_FOOTER_OFF, &mut buf)?;
                let f: ChunkFooter = decode(&buf)?;
                if f.magic != CHUNK_MAGIC {
                    return Err(corrupt!("inode table chunk at {c:#x} has a bad magic"));
                }
                chunks.push(c);
                c = f.next;
            }
            if chunks.is_empty() {
                return Err(corrupt!("inode table of shard {s} is missing"));
            }
            shards.push(TableShard {
                chunks: RwLock::new(chunks),
                free: Mutex::new(RangeSet::default()),
            });
        }
        Ok(InodeTables {
            shards,
            heads_off: sb.inode_heads_off,
        })
    }

    /// Fresh tables for mkfs: one zeroed chunk per shard.
    pub fn create(region: &dyn Region, alloc: &PageAllocator, shards: u32) -> Result<InodeTables> {
        let t = InodeTables {
            shards: (0..shards).map(|_| TableShard::default()).collect(),
            heads_off: crate::layout::INODE_HEADS_OFF,
        };
        for s in 0..shards as usize {
            t.grow(region, alloc, s, &mut t.shards[s].free.lock())?;
        }
        Ok(t)
    }

    pub fn shard_count(&self) -> u64 {
        self.shards.len() as u64
    }

    fn split(&self, ino: Ino) -> Option<(usize, u64)> {
        let n = ino.checked_sub(1)?;
        Some(((n % self.shard_count()) as usize, n / self.shard_count()))
    }

    /// Inode number of slot `local` in `shard`.
    pub fn ino_of(&self, shard: usize, local: u64) -> Ino {
        local * self.shard_count() + shard as u64 + 1
    }

    /// Byte offset of inode `ino`'s record, or NotFound past the tables.
    pub fn locate(&self, ino: Ino) -> Result<u64> {
        let (shard, local) = self.split(ino).ok_or(Error::NotFound)?;
        let chunks = self.shards[shard].chunks.read();
        let c = chunks.get((local / INODES_PER_CHUNK) as usize).ok_or(Error::NotFound)?;
        Ok(c + (local % INODES_PER_CHUNK) * INODE_SIZE)
    }

    /// Every `(shard, local index, record offset)` slot, chunk by chunk.
    pub fn slots(&self, shard: usize) -> Vec<(u64, u64)> {
        let chunks = self.shards[shard].chunks.read();
        chunks
            .iter()
            .enumerate()
            .map(|(i, &c)| (i as u64 * INODES_PER_CHUNK, c))
            .collect()
    }

    /// Every chunk of every shard (for the recovery scan and fsck).
    pub fn all_chunks(&self) -> Vec<u64> {
        self.shards.iter().flat_map(|s| s.chunks.read().clone()).collect()
    }

    /// Marks a slot free (recovery, fsck, unmount state).
    pub fn release(&self, ino: Ino) {
        if let Some((shard, local)) = self.split(ino) {
            if self.shards[shard].free.lock().insert(local, 1).is_err() {
                tracing::error!(ino, "inode slot freed twice");
                debug_assert!(false, "inode slot {ino} freed twice");
            }
        }
    }

    /// Claims a free slot in this thread's shard, growing the table by a
    /// 2 MiB chunk when it is full. Returns the number and record offset.
    pub fn claim(&self, region: &dyn Region, alloc: &PageAllocator) -> Result<(Ino, u64)> {
        self.claim_in(region, alloc, current_shard(self.shards.len()))
    }

    /// Claims the lowest free slot of `shard`.
    pub fn claim_in(&self, region: &dyn Region, alloc: &PageAllocator, shard: usize) -> Result<(Ino, u64)> {
        let t = &self.shards[shard];
        let mut free = t.free.lock();
        if free.total() == 0 {
            self.grow(region, alloc, shard, &mut free)?;
        }
        let (local, _) = free.take_first(1).ok_or(Error::NoSpace)?;
        drop(free);
        let ino = self.ino_of(shard, local);
        Ok((ino, self.locate(ino)?))
    }

    fn grow(&self, region: &dyn Region, alloc: &PageAllocator, shard: usize, free: &mut RangeSet) -> Result<()> {
        let t = &self.shards[shard];
        let index = t.chunks.read().len() as u64;
        let chunk = alloc.alloc_contiguous(CHUNK_PAGES)?;
        let footer = ChunkFooter {
            magic: CHUNK_MAGIC,
            next: 0,
            shard: shard as u32,
            index: index as u32,
            reserved: [0; 13],
        };
        let init = || -> Result<()> {
            region.zero_nt(chunk, CHUNK_SIZE)?;
            region.write(chunk + CHUNK_FOOTER_OFF, footer.as_bytes())?;
            region.flush(chunk + CHUNK_FOOTER_OFF, INODE_SIZE)?;
            region.fence(); // The chunk is initialised before it is linked.
            let link = match t.chunks.read().last() {
                Some(&last) => last + CHUNK_NEXT_OFF,
                None => self.heads_off + 8 * shard as u64,
            };
            Ok(region.commit_u64(link, chunk)?) // R5
        };
        if let Err(e) = init() {
            alloc.free(chunk, CHUNK_PAGES);
            return Err(e);
        }
        t.chunks.write().push(chunk);
        let _ = free.insert(index * INODES_PER_CHUNK, INODES_PER_CHUNK);
        Ok(())
    }

    /// Free slots as `(shard << 48 | local, len)` for the saved state.
    pub fn export_free(&self) -> Vec<(u64, u64)> {
        self.shards
            .iter()
            .enumerate()
            .flat_map(|(s, t)| {
                t.free
                    .lock()
                    .iter()
                    .map(move |(l, n)| ((s as u64) << 48 | l, n))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Restores free slots saved by [`InodeTables::export_free`].
    pub fn import_free(&self, ranges: &[(u64, u64)]) -> Result<()> {
        for &(key, n) in ranges {
            let (s, l) = ((key >> 48) as usize, key & ((1 << 48) - 1));
            let t = self
                .shards
                .get(s)
                .ok_or_else(|| corrupt!("saved inode range for missing shard {s}"))?;
            t.free
                .lock()
                .insert(l, n)
                .map_err(|_| corrupt!("saved inode ranges overlap"))?;
        }
        Ok(())
    }

    /// Inode slots in all tables, used or not.
    pub fn capacity(&self) -> u64 {
        self.shards
            .iter()
            .map(|t| t.chunks.read().len() as u64 * INODES_PER_CHUNK)
            .sum()
    }

    /// Free inode slots in all tables.
    pub fn free_count(&self) -> u64 {
        self.shards.iter().map(|t| t.free.lock().total()).sum()
    }
}

/// Reads the record at `off` and checks that it is a live inode `ino`.
pub fn read_live_record(region: &dyn Region, off: u64, ino: Ino) -> Result<Inode> {
    let mut buf = [0u8; INODE_SIZE as usize];
    region.read(off, &mut buf)?;
    let rec: Inode = decode(&buf)?;
    if rec.state != INODE_LIVE {
        return Err(Error::NotFound);
    }
    if rec.ino != ino {
        return Err(corrupt!("inode slot for {ino} holds inode {}", rec.ino));
    }
    Ok(rec)
}
