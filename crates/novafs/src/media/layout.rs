//! Every persistent structure of novafs, declared once (FORMAT.md explains the
//! same bytes in prose). All integers are little-endian; every persistent
//! pointer is a byte offset from the start of the region, 0 meaning "none".
//!
//! Region map (NOVA §4.1, Figure 1):
//!
//! ```text
//! page 0            superblock (primary)
//! page 1            journal headers, one 64 B line per shard
//! page 2            reserved inodes (slot 0 = recovery inode) + inode-table heads
//! pages 3..         journal rings, `journal_ring_size` bytes per shard
//! data_start..end   log pages, data pages, inode-table chunks, recovery chain
//! last page         superblock replica (Fortis §4.2: far from the primary)
//! ```

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::error::{corrupt, Result};

/// Inode number. The root directory is 1, as FUSE expects.
pub type Ino = u64;
pub const ROOT_INO: Ino = 1;

pub const PAGE_SIZE: u64 = 4096;
pub const PAGE_SHIFT: u32 = 12;
/// Largest file size: keeps page numbers and byte offsets far from
/// overflow. Sizes and page numbers read from a log are checked against it.
pub const MAX_FILE_SIZE: u64 = 1 << 52;
pub const MAX_FILE_PAGES: u64 = MAX_FILE_SIZE / PAGE_SIZE;
/// File data protection (Fortis §4.3): a page is a stripe of eight
/// 512-byte strips, each with two CRC32C copies, plus a parity strip.
pub const STRIP_SIZE: u64 = 512;
pub const STRIPS_PER_PAGE: usize = (PAGE_SIZE / STRIP_SIZE) as usize;
/// Bytes of one page's checksums in one checksum area.
pub const CSUM_BYTES: u64 = 4 * STRIPS_PER_PAGE as u64;

/// "NOVAFS" + format generation, as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"NOVAFS\0\x01");
/// Current on-media format version. History: 1 — first format; 2 — journal
/// transactions commit by checksums (check records), no journal tail.
pub const VERSION: u32 = 2;

/// Shards ("CPUs", DESIGN.md §5) are capped so the header pages stay one page.
pub const MAX_SHARDS: u32 = 64;
pub const JOURNAL_RING_SIZE: u64 = 64 * 1024;

pub const JOURNAL_HEADERS_OFF: u64 = PAGE_SIZE;
pub const RESERVED_INODES_OFF: u64 = 2 * PAGE_SIZE;
/// Reserved inode slots at the start of page 2.
pub const RESERVED_INODES: u64 = 16;
pub const RECOVERY_INODE_OFF: u64 = RESERVED_INODES_OFF;
/// Per-shard first inode-table chunk, after the reserved inodes in page 2.
pub const INODE_HEADS_OFF: u64 = RESERVED_INODES_OFF + RESERVED_INODES * INODE_SIZE;
pub const JOURNAL_RINGS_OFF: u64 = 3 * PAGE_SIZE;

/// Superblock `state` values.
pub const STATE_CLEAN: u64 = 1;
pub const STATE_MOUNTED: u64 = 2;

/// Feature flags reserved for the next wave (Fortis §4.2–4.3); an image that
/// sets an incompat bit this build does not know is refused.
pub const FEATURE_INCOMPAT_META_REPLICA: u64 = 1 << 0;
pub const FEATURE_INCOMPAT_DATA_CSUM: u64 = 1 << 1;
pub const FEATURE_INCOMPAT_DATA_PARITY: u64 = 1 << 2;
/// The metadata replicas are behind their primaries: the image was mounted
/// without metadata protection. Incompatible, so that no novafs that does
/// not know it trusts (repairs from) a stale replica.
pub const FEATURE_INCOMPAT_REPLICAS_STALE: u64 = 1 << 3;
/// Some log holds xattr entries (type 8): set, durably, before the first
/// is written, so a novafs that does not know them refuses the image
/// instead of taking them for damage.
pub const FEATURE_INCOMPAT_XATTR: u64 = 1 << 4;
/// The image has (or had) snapshots: entries and inodes are kept for them
/// (Fortis §3), which a novafs that does not know them would free. Set,
/// durably, before the first snapshot record is written.
pub const FEATURE_INCOMPAT_SNAPSHOTS: u64 = 1 << 5;
/// Some log holds DAX mmap records (type 6): a novafs that does not know
/// them would check, and "repair" from parity, pages whose checksums a
/// mapping left stale (caveat DAXor). Set, durably, before the first.
pub const FEATURE_INCOMPAT_MMAP: u64 = 1 << 6;
/// Some log holds lost-range records (type 9): a novafs that does not
/// know them would take them for damage and free the file whose other
/// bytes `fsck --repair` kept. Set, durably, before the first.
pub const FEATURE_INCOMPAT_LOST: u64 = 1 << 7;
/// A relaxed mount (NOVA-Fortis §4.6) is in use, or crashed: a relaxed
/// mount may have left data-write intents in the journal headers, which a
/// novafs that does not know them would not reseal. Set, durably, by
/// every read-write relaxed mount before it writes anything else; cleared
/// by the clean unmount.
pub const FEATURE_INCOMPAT_RELAXED: u64 = 1 << 8;
pub const FEATURES_INCOMPAT_SUPPORTED: u64 = FEATURE_INCOMPAT_META_REPLICA
    | FEATURE_INCOMPAT_LOST
    | FEATURE_INCOMPAT_RELAXED
    | FEATURE_INCOMPAT_SNAPSHOTS
    | FEATURE_INCOMPAT_MMAP
    | FEATURE_INCOMPAT_REPLICAS_STALE
    | FEATURE_INCOMPAT_XATTR
    | FEATURE_INCOMPAT_DATA_CSUM
    | FEATURE_INCOMPAT_DATA_PARITY;
/// Superblock `consistency` values: the mode a mount takes unless told
/// otherwise (NOVA-Fortis §4.6). Images made before the field have 0.
pub const CONSISTENCY_STRICT: u64 = 0;
pub const CONSISTENCY_RELAXED: u64 = 1;
/// Default dead zone between a metadata page and its replica (Fortis §4.4).
pub const DEFAULT_DEAD_ZONE: u64 = 1 << 20;

/// Global file-system information (NOVA §4.1). Rewritten whole, with its
/// CRC, primary first and then the replica (rule R4).
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct Superblock {
    pub magic: u64,
    pub version: u32,
    pub block_size: u32,
    pub features_compat: u64,
    pub features_incompat: u64,
    pub features_ro_compat: u64,
    /// Region size at mkfs.
    pub size: u64,
    pub shards: u32,
    pub inode_size: u32,
    pub journal_headers_off: u64,
    pub journal_rings_off: u64,
    pub journal_ring_size: u64,
    pub inode_heads_off: u64,
    pub recovery_inode_off: u64,
    pub data_start: u64,
    pub data_end: u64,
    pub replica_off: u64,
    /// STATE_CLEAN after a clean unmount, STATE_MOUNTED while in use.
    pub state: u64,
    pub mount_count: u64,
    /// Current snapshot epoch (Fortis §3); stamped into every log entry.
    pub epoch: u64,
    pub created_ns: i64,
    pub mounted_ns: i64,
    pub uuid: [u8; 16],
    /// With META_REPLICA: the least distance, in pages, between a metadata
    /// page and its mirror (Fortis §4.4's dead zone).
    pub dead_zone_pages: u64,
    /// Metadata ranges rewritten from their good copy since mkfs, and
    /// objects met with no good copy, with the last of them (`health`).
    pub meta_repairs: u64,
    pub meta_losses: u64,
    pub last_loss_ino: u64,
    pub last_loss_ns: i64,
    /// With DATA_CSUM: the two areas of strip checksums (Fortis §4.3),
    /// before and after the data area; with DATA_PARITY: the parity area.
    pub csum_off: [u64; 2],
    pub parity_off: u64,
    /// Data strips rebuilt or checksum copies rewritten since mkfs.
    pub data_repairs: u64,
    /// The default consistency mode of mounts: CONSISTENCY_STRICT or
    /// CONSISTENCY_RELAXED; any other value is refused at mount.
    pub consistency: u64,
    pub reserved: [u64; 22],
    pub csum: u32,
    pub pad: u32,
}
const _: () = assert!(size_of::<Superblock>() == 440);
const _: () = assert!(std::mem::offset_of!(Superblock, consistency) == 248);
const _: () = assert!(std::mem::offset_of!(Superblock, csum) == 432);

impl Superblock {
    pub fn compute_csum(&self) -> u32 {
        crc32c::crc32c(&self.as_bytes()[..std::mem::offset_of!(Superblock, csum)])
    }
}

/// A 128-byte inode (NOVA §4.1). `state`, `log_head` and `log_tail` are
/// mutable commit words; everything from `ino` to `csum` is written once at
/// creation and covered by `csum`. Current attributes live in the log.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct Inode {
    /// INODE_FREE, INODE_LIVE ("valid bit") or INODE_KEPT, set through
    /// the journal.
    pub state: u64,
    pub log_head: u64,
    /// Commit point of every single-inode update (rules R1, R5).
    pub log_tail: u64,
    pub ino: u64,
    pub generation: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub flags: u32,
    pub nlink: u32,
    pub pad0: u32,
    pub size: u64,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    pub rdev: u64,
    pub create_epoch: u64,
    pub delete_epoch: u64,
    pub csum: u32,
    pub pad1: u32,
}
pub const INODE_SIZE: u64 = 128;
const _: () = assert!(size_of::<Inode>() == INODE_SIZE as usize);
pub const INODE_STATE_OFF: u64 = std::mem::offset_of!(Inode, state) as u64;
pub const INODE_HEAD_OFF: u64 = std::mem::offset_of!(Inode, log_head) as u64;
pub const INODE_TAIL_OFF: u64 = std::mem::offset_of!(Inode, log_tail) as u64;
const _: () = assert!(INODE_STATE_OFF == 0 && INODE_HEAD_OFF == 8 && INODE_TAIL_OFF == 16);
/// The checksummed part of an inode record: everything but the three
/// words updated in place (state, log head, log tail) and the checksum.
pub const INODE_CSUM_START: usize = std::mem::offset_of!(Inode, ino);
pub const INODE_CSUM_END: usize = std::mem::offset_of!(Inode, csum);
/// The aligned word holding `csum` (and `pad1`, always zero): a create
/// that commits through the journal replays it as an update (FORMAT.md,
/// "What a transaction publishes").
pub const INODE_CSUM_WORD_OFF: u64 = std::mem::offset_of!(Inode, csum) as u64;
const _: () = assert!(INODE_CSUM_WORD_OFF == 120 && INODE_CSUM_WORD_OFF.is_multiple_of(8));
pub const INODE_FREE: u64 = 0;
pub const INODE_LIVE: u64 = 1;
/// Deleted from the live file system (in epoch `delete_epoch`) but kept,
/// record, log and pages, for the snapshots that still see it (Fortis
/// §3.2): no live name reaches it and its slot is not free.
pub const INODE_KEPT: u64 = 2;
pub const INODE_DELETE_EPOCH_OFF: u64 = std::mem::offset_of!(Inode, delete_epoch) as u64;
const _: () = assert!(INODE_DELETE_EPOCH_OFF.is_multiple_of(8));

impl Inode {
    pub fn compute_csum(&self) -> u32 {
        crc32c::crc32c(&self.as_bytes()[INODE_CSUM_START..INODE_CSUM_END])
    }
}

/// Inode tables are linked 2 MiB chunks (NOVA §4.1); the last 128-byte slot
/// of each chunk is this footer instead of an inode.
pub const CHUNK_SIZE: u64 = 2 * 1024 * 1024;
pub const CHUNK_PAGES: u64 = CHUNK_SIZE / PAGE_SIZE;
pub const INODES_PER_CHUNK: u64 = CHUNK_SIZE / INODE_SIZE - 1;
pub const CHUNK_MAGIC: u64 = u64::from_le_bytes(*b"NVCHUNK1");

#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct ChunkFooter {
    pub magic: u64,
    /// Next chunk of this shard's table; committed with one 8-byte store.
    pub next: u64,
    pub shard: u32,
    pub index: u32,
    pub reserved: [u64; 13],
}
const _: () = assert!(size_of::<ChunkFooter>() == INODE_SIZE as usize);

impl ChunkFooter {
    /// The footer of chunk `index` of `shard`'s table, linked to `next`.
    pub fn new(shard: u32, index: u32, next: u64) -> ChunkFooter {
        ChunkFooter {
            magic: CHUNK_MAGIC,
            next,
            shard,
            index,
            reserved: [0; 13],
        }
    }
}
pub const CHUNK_FOOTER_OFF: u64 = CHUNK_SIZE - INODE_SIZE;
pub const CHUNK_NEXT_OFF: u64 = CHUNK_FOOTER_OFF + std::mem::offset_of!(ChunkFooter, next) as u64;

/// Log pages (and recovery-chain pages) end with a 64-byte footer whose last
/// word is the next-page pointer.
pub const LOG_FOOTER_SIZE: u64 = 64;
pub const LOG_USABLE: u64 = PAGE_SIZE - LOG_FOOTER_SIZE;
pub const LOG_NEXT_OFF: u64 = PAGE_SIZE - 8;

/// Log entries are whole 64-byte slots and never cross a page.
pub const SLOT: u64 = 64;

/// Log entry types. 0 marks the unused rest of a log page.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryType {
    Write = 1,
    DentryAdd = 2,
    DentryRemove = 3,
    Setattr = 4,
    LinkChange = 5,
    Mmap = 6,
    SnapshotInfo = 7,
    Xattr = 8,
    Lost = 9,
}

impl EntryType {
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::Write,
            2 => Self::DentryAdd,
            3 => Self::DentryRemove,
            4 => Self::Setattr,
            5 => Self::LinkChange,
            6 => Self::Mmap,
            7 => Self::SnapshotInfo,
            8 => Self::Xattr,
            9 => Self::Lost,
            _ => return None,
        })
    }
}

/// Common 16-byte head of every log entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct EntryHeader {
    pub etype: u8,
    /// Entry length in 64-byte slots.
    pub slots: u8,
    pub flags: u16,
    /// CRC32C of the whole entry with this field taken as zero.
    pub csum: u32,
    /// Snapshot epoch the entry was written in (Fortis §3).
    pub epoch: u64,
}
const _: () = assert!(size_of::<EntryHeader>() == 16);
pub const ENTRY_CSUM_OFF: usize = std::mem::offset_of!(EntryHeader, csum);
/// Where an entry's epoch is, from its start.
pub const ENTRY_EPOCH_OFF: u64 = std::mem::offset_of!(EntryHeader, epoch) as u64;

/// Header flag: the entry was invalidated in place (NOVA §4.6: a dentry
/// add cancelled by a later remove or replace). Set through the journal, in
/// the same transaction as the change that cancels the entry.
pub const ENTRY_INVALID: u16 = 1;
const ENTRY_FLAGS_OFF: usize = std::mem::offset_of!(EntryHeader, flags);

/// Checksum of an encoded entry, skipping the csum field itself and the
/// INVALID flag (the one bit that changes after the entry is written).
pub fn entry_csum(bytes: &[u8]) -> u32 {
    let mut head = [0u8; ENTRY_CSUM_OFF];
    head.copy_from_slice(&bytes[..ENTRY_CSUM_OFF]);
    let flags = u16::from_le_bytes([head[ENTRY_FLAGS_OFF], head[ENTRY_FLAGS_OFF + 1]]) & !ENTRY_INVALID;
    head[ENTRY_FLAGS_OFF..ENTRY_FLAGS_OFF + 2].copy_from_slice(&flags.to_le_bytes());
    let c = crc32c::crc32c(&head);
    crc32c::crc32c_append(c, &bytes[ENTRY_CSUM_OFF + 4..])
}

/// Where a write entry's and a setattr entry's mtime are (the same place),
/// and a setattr's ctime: what a relaxed overwrite changes in place.
pub const ENTRY_MTIME_OFF: usize = std::mem::offset_of!(WriteEntry, mtime);
pub const ENTRY_CTIME_OFF: usize = std::mem::offset_of!(SetattrEntry, ctime);
const _: () = assert!(ENTRY_MTIME_OFF == std::mem::offset_of!(SetattrEntry, mtime));

/// Sets a one-slot write or setattr entry's time to `time` (a setattr's
/// ctime too, as a write changes both) and recomputes its checksum.
pub fn retime_entry(slot: &mut [u8; 64], time: i64) {
    slot[ENTRY_MTIME_OFF..ENTRY_MTIME_OFF + 8].copy_from_slice(&time.to_le_bytes());
    if EntryType::from_u8(slot[0]) == Some(EntryType::Setattr) {
        slot[ENTRY_CTIME_OFF..ENTRY_CTIME_OFF + 8].copy_from_slice(&time.to_le_bytes());
    }
    let csum = entry_csum(slot);
    slot[ENTRY_CSUM_OFF..ENTRY_CSUM_OFF + 4].copy_from_slice(&csum.to_le_bytes());
}

/// What stays of an entry whatever [`retime_entry`] did to it: the
/// checksum of the slot with its times taken as `0`. Tells a slot that
/// still holds the entry an intent names from one reused since.
pub fn entry_identity(slot: &[u8; 64]) -> u32 {
    let mut s = *slot;
    retime_entry(&mut s, 0);
    u32::from_le_bytes([
        s[ENTRY_CSUM_OFF],
        s[ENTRY_CSUM_OFF + 1],
        s[ENTRY_CSUM_OFF + 2],
        s[ENTRY_CSUM_OFF + 3],
    ])
}

/// An entry's first header word with the INVALID flag set: the journal
/// record that invalidates the entry in place.
pub fn invalidated_word(word: u64) -> u64 {
    word | (u64::from(ENTRY_INVALID) << (8 * ENTRY_FLAGS_OFF))
}

/// File write (NOVA §4.4): maps `npages` file pages from `pgoff` to the
/// contiguous data pages at `block`, or unmaps them when `block` is 0 (a
/// punched hole). Carries the file size and mtime after the write.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct WriteEntry {
    pub hdr: EntryHeader,
    pub pgoff: u64,
    pub block: u64,
    pub npages: u32,
    pub pad: u32,
    pub size: u64,
    pub mtime: i64,
    pub reserved: u64,
}
const _: () = assert!(size_of::<WriteEntry>() == 64);

/// Directory entry add or remove (NOVA §4.3). Also carries the directory's
/// own link count and mtime after the change. `seq` is the readdir cookie:
/// stable for the life of the entry, increasing within a directory.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct DentryHead {
    pub hdr: EntryHeader,
    pub ino: u64,
    pub seq: u64,
    pub dir_mtime: i64,
    pub dir_nlink: u32,
    pub name_len: u8,
    pub ftype: u8,
    pub pad: u16,
}
pub const DENTRY_HEAD_SIZE: usize = 48;
const _: () = assert!(size_of::<DentryHead>() == DENTRY_HEAD_SIZE);
pub const NAME_MAX: usize = 255;

/// Inode update (chmod/chown/utimens/truncate): the full attribute set.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct SetattrEntry {
    pub hdr: EntryHeader,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// chattr flags ([`INODE_FLAGS`]; 0 in images made before they were
    /// kept).
    pub flags: u32,
    pub size: u64,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
}
const _: () = assert!(size_of::<SetattrEntry>() == 64);

/// chattr's immutable flag (FS_IMMUTABLE_FL): nothing about the inode
/// changes but its flags; no name of it goes or comes.
pub const FLAG_IMMUTABLE: u32 = 0x10;
/// chattr's append-only flag (FS_APPEND_FL): data is only appended, the
/// attributes stay, no name of it goes.
pub const FLAG_APPEND: u32 = 0x20;
/// chattr's no-dump flag (FS_NODUMP_FL): kept for backup tools.
pub const FLAG_NODUMP: u32 = 0x40;
/// The chattr flags novafs keeps.
pub const INODE_FLAGS: u32 = FLAG_IMMUTABLE | FLAG_APPEND | FLAG_NODUMP;

/// Link count change (link, unlink of one of several names, rename victim).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct LinkChangeEntry {
    pub hdr: EntryHeader,
    pub nlink: u32,
    pub pad: u32,
    pub ctime: i64,
    pub reserved: [u64; 4],
}
const _: () = assert!(size_of::<LinkChangeEntry>() == 64);

/// Extended attribute set or removal (FORMAT.md "Extended attributes").
/// The fixed head is followed by the name, then, from the next 8-byte
/// boundary, either the value itself (`npages` 0: an inline value) or the
/// offsets of the `npages` data pages that hold it, as u64s. The latest
/// entry for a name supersedes every earlier one; a removal stays until
/// thorough GC drops it with the entries it cancels.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct XattrHead {
    pub hdr: EntryHeader,
    /// The inode's ctime after the change.
    pub ctime: i64,
    pub value_len: u32,
    /// CRC32C of the value, checked on every read of value pages.
    pub value_crc: u32,
    pub name_len: u8,
    /// [`XATTR_SET`] or [`XATTR_REMOVE`].
    pub op: u8,
    /// Data pages holding the value; 0 when the value is inline.
    pub npages: u8,
    pub pad: [u8; 5],
    pub reserved: u64,
}
pub const XATTR_HEAD_SIZE: usize = 48;
const _: () = assert!(size_of::<XattrHead>() == XATTR_HEAD_SIZE);
pub const XATTR_SET: u8 = 1;
pub const XATTR_REMOVE: u8 = 2;
/// Longest attribute name, prefix included (Linux XATTR_NAME_MAX).
pub const XATTR_NAME_MAX: usize = 255;
/// Largest value (Linux XATTR_SIZE_MAX).
pub const XATTR_SIZE_MAX: usize = 65536;
/// Largest sum of a listing: every name and its NUL (Linux XATTR_LIST_MAX).
pub const XATTR_LIST_MAX: usize = 65536;
/// Largest xattr entry with its value inline; larger values go to pages.
pub const XATTR_INLINE_MAX: usize = 1024;

/// Where an xattr entry's value or page list starts: after the name, at
/// the next 8-byte boundary.
pub fn xattr_payload_off(name_len: usize) -> usize {
    (XATTR_HEAD_SIZE + name_len).next_multiple_of(8)
}

/// DAX mmap record (NOVA-Fortis §3.4, caveat DAXor). [`MMAP_UNPROTECT`]:
/// file page `pgoff` (`npages` 1) is mapped writable, so its data page may
/// change without its checksums and parity; it is durable before the page
/// becomes writable. [`MMAP_PROTECT`]: the data pages of file pages
/// `pgoff..pgoff + npages` have their checksums and parity again. A write
/// entry over a page, or a truncation below it, protects it too (its data
/// page is then new, or gone).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct MmapEntry {
    pub hdr: EntryHeader,
    pub pgoff: u64,
    pub npages: u64,
    pub prot: u64,
    pub reserved: [u64; 3],
}
const _: () = assert!(size_of::<MmapEntry>() == 64);
pub const MMAP_UNPROTECT: u64 = 1;
pub const MMAP_PROTECT: u64 = 2;

/// Lost range: file pages `pgoff..pgoff + npages` hold bytes no copy on
/// the media can give back (`fsck --repair` put it in place of a write
/// entry damaged in both copies, whose range is unknown). Replay unmaps
/// them and marks them lost: they read EIO until a write or a hole over a
/// whole page, or a truncation below it, replaces them. Written with the
/// same slot count as the entry it replaces (the rest zero).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct LostEntry {
    pub hdr: EntryHeader,
    pub pgoff: u64,
    pub npages: u64,
    pub reserved: [u64; 4],
}
const _: () = assert!(size_of::<LostEntry>() == 64);

/// A snapshot record in the snapshot list's log (reserved slot
/// [`SNAPSHOT_LIST_OFF`]; Fortis §3.1): [`SNAPSHOT_TAKE`] names snapshot
/// `epoch`, [`SNAPSHOT_DELETE`] ends it. The name follows the head.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct SnapshotInfoEntry {
    pub hdr: EntryHeader,
    /// The snapshot's epoch: it holds every entry of this epoch or older.
    pub epoch: u64,
    /// When it was taken (nanoseconds since the Unix epoch).
    pub created_ns: i64,
    pub op: u8,
    pub name_len: u8,
    pub pad: [u8; 6],
}
pub const SNAPSHOT_HEAD_SIZE: usize = 40;
const _: () = assert!(size_of::<SnapshotInfoEntry>() == SNAPSHOT_HEAD_SIZE);
pub const SNAPSHOT_TAKE: u8 = 1;
pub const SNAPSHOT_DELETE: u8 = 2;
/// Longest snapshot name.
pub const SNAPSHOT_NAME_MAX: usize = 255;
/// The reserved inode slot whose log lists the snapshots: only its state,
/// head and tail words are used.
pub const SNAPSHOT_LIST_OFF: u64 = RESERVED_INODES_OFF + INODE_SIZE;

/// Per-shard journal header (one cache line each). `head` is a
/// monotonically increasing byte counter, position = counter % ring size:
/// where the next transaction goes, every earlier one being checkpointed.
/// A transaction commits by its checksums, not by a tail store (journal/mod.rs).
///
/// `intent` is a relaxed-mode overwrite's commit word (journal/intent.rs):
/// the data page it changes in place (bits 12–63), a generation (bits
/// 1–11, [`INTENT_GEN_MASK`]) and [`INTENT_VALID`]; cleared, it keeps the
/// generation and names no page. The `redo_*` words say what recovery sets
/// with a pending intent: the time `redo_time` into the log entry at
/// `redo_entry` (its mtime, and a setattr's ctime, the entry's checksum
/// recomputed). `redo_check` ties them to the intent word's generation:
/// low half CRC32C of (generation bits, redo_entry, redo_time), high half
/// the entry's [`entry_identity`]. Words stored for an earlier write fail
/// the check and are ignored.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct JournalHeader {
    pub head: u64,
    pub intent: u64,
    pub redo_entry: u64,
    pub redo_time: i64,
    pub redo_check: u64,
    pub reserved: [u64; 3],
}
const _: () = assert!(size_of::<JournalHeader>() == 64);
pub const JOURNAL_HEAD_FIELD: u64 = std::mem::offset_of!(JournalHeader, head) as u64;
pub const JOURNAL_INTENT_FIELD: u64 = std::mem::offset_of!(JournalHeader, intent) as u64;
pub const JOURNAL_REDO_FIELD: u64 = std::mem::offset_of!(JournalHeader, redo_entry) as u64;
const _: () = assert!(JOURNAL_HEAD_FIELD == 0 && JOURNAL_INTENT_FIELD == 8 && JOURNAL_REDO_FIELD == 16);
const _: () = assert!(std::mem::offset_of!(JournalHeader, redo_check) == 32);
/// The low bit of a pending intent (a page address has its low 12 bits 0).
pub const INTENT_VALID: u64 = 1;
/// An intent word's generation bits: one more for every write a shard
/// takes in place, so redo words left by an earlier write never pass for
/// this one's.
pub const INTENT_GEN_MASK: u64 = 0xffe;

/// A journal record (fine-grained journaling §III-A: only the modified
/// metadata is journaled). RECORD_UPDATE: `len` new bytes for region offset
/// `addr` follow. RECORD_CHECK: the CRC32C (u32) that `len` bytes at `addr`
/// must have for the transaction to count as committed follows. Payloads
/// are padded to 8 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct JournalRecord {
    pub addr: u64,
    pub len: u32,
    pub kind: u32,
}
const _: () = assert!(size_of::<JournalRecord>() == 16);
pub const RECORD_UPDATE: u32 = 0;
pub const RECORD_CHECK: u32 = 1;

/// Closes a transaction (fine-grained journaling §III-B): `addr` is
/// TXN_MARKER so a scan tells it from a record.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct TxnInfo {
    pub marker: u64,
    pub count: u32,
    pub magic: u32,
    pub txn_id: u64,
    /// CRC32C of every record of the transaction.
    pub csum: u32,
    pub pad: u32,
}
const _: () = assert!(size_of::<TxnInfo>() == 32);
pub const TXN_MARKER: u64 = u64::MAX;
pub const TXN_MAGIC: u32 = u32::from_le_bytes(*b"TXN1");

/// Header of the allocator state that a clean unmount writes to the
/// recovery inode's page chain (NOVA §4.7). Followed by `page_ranges` then
/// `ino_ranges` (start, len) pairs of u64, then `kept_items`
/// [`SavedKept`]s: the snapshots' manifests (Fortis §3.2).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct AllocStateHeader {
    pub magic: u64,
    pub page_ranges: u64,
    pub ino_ranges: u64,
    pub mount_count: u64,
    /// CRC32C of everything after this header.
    pub csum: u32,
    /// Manifest items; always 0 under the older magic
    /// [`ALLOC_STATE_MAGIC_V1`], which saved no manifests.
    pub kept_items: u32,
}
const _: () = assert!(size_of::<AllocStateHeader>() == 40);
pub const ALLOC_STATE_MAGIC: u64 = u64::from_le_bytes(*b"NVALLOC2");
/// Written before manifests were saved: trusted only without snapshots.
pub const ALLOC_STATE_MAGIC_V1: u64 = u64::from_le_bytes(*b"NVALLOC1");

/// One manifest item in the saved state: what snapshot `snapshot` alone
/// keeps (`snapshot::Kept`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct SavedKept {
    pub snapshot: u64,
    pub birth: u64,
    /// [`KEPT_DATA`] or [`KEPT_INODE`].
    pub kind: u64,
    /// The first data page, or the kept inode's record.
    pub off: u64,
    pub pages: u64,
    /// The kept inode's number; 0 for data.
    pub ino: u64,
}
const _: () = assert!(size_of::<SavedKept>() == 48);
pub const KEPT_DATA: u64 = 1;
pub const KEPT_INODE: u64 = 2;

/// Reads a plain-old-data structure out of a byte slice taken from media.
pub fn decode<T: FromBytes + KnownLayout + Immutable + Copy>(bytes: &[u8]) -> Result<T> {
    T::read_from_prefix(bytes)
        .map(|(v, _)| v)
        .map_err(|_| corrupt!(Other, "short structure ({} bytes)", bytes.len()))
}

/// File types as stored in dentries (the S_IFMT bits >> 12).
pub fn ftype_of_mode(mode: u32) -> u8 {
    ((mode & libc::S_IFMT) >> 12) as u8
}

/// Where the checksums and parity of the data area live (Fortis §4.3,
/// `strips`); a zero offset means the image keeps no such area.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Strips {
    pub data_start: u64,
    pub data_end: u64,
    /// The two checksum copies, by data page index.
    pub csum: [u64; 2],
    pub parity: u64,
}

/// The data area, for validating pointers read from media, and where
/// metadata replicas live (Fortis §4.2, §4.4: FORMAT.md "Metadata
/// replicas"). With replicas, every metadata byte at `off` in the data
/// area has a copy at [`Bounds::mirror`]: the same offset within the page
/// reflected about the middle of the data area, so a primary in the low
/// half has its replica in the high half, and the fixed area's page of
/// reserved inodes and inode-table heads has its copy just past the data
/// area.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub data_start: u64,
    pub data_end: u64,
    pub replicas: bool,
    /// With replicas: the least distance in pages between a metadata page
    /// and its mirror (Fortis §4.4's dead zone).
    pub dead_zone_pages: u64,
    /// The replicas keep their places but are behind their primaries (a
    /// mount without metadata protection): nothing reads them, nothing
    /// writes them, until a protected mount rewrites them all.
    pub stale: bool,
}

impl Bounds {
    /// The replica of the metadata byte at `off`, or None when the image
    /// keeps no replicas or `off` has none (superblock, journal).
    pub fn mirror(&self, off: u64) -> Option<u64> {
        if !self.replicas {
            return None;
        }
        let in_page = off % PAGE_SIZE;
        if off >= self.data_start && off < self.data_end {
            let page = (off - self.data_start) / PAGE_SIZE;
            let pages = (self.data_end - self.data_start) / PAGE_SIZE;
            return Some(self.data_start + (pages - 1 - page) * PAGE_SIZE + in_page);
        }
        (off - in_page == RESERVED_INODES_OFF).then_some(self.data_end + in_page)
    }

    /// The copy of `off` to read, or repair from, when the primary fails:
    /// its mirror, unless the replicas are stale.
    pub fn replica(&self, off: u64) -> Option<u64> {
        self.mirror(off).filter(|_| !self.stale)
    }

    /// Whether metadata writes must reach the replicas too.
    pub fn live_replicas(&self) -> bool {
        self.replicas && !self.stale
    }

    /// `off` and, with replicas, its mirror: the pages a metadata page
    /// occupies.
    pub fn copies(&self, off: u64) -> impl Iterator<Item = u64> {
        std::iter::once(off).chain(self.mirror(off))
    }

    /// True when `off` is a page that may hold metadata (a log page, an
    /// inode-table page): inside the data area and, with replicas, a
    /// primary, whose mirror lies at least the dead zone above it.
    pub fn is_meta_page(&self, off: u64) -> bool {
        if !self.is_page(off) {
            return false;
        }
        match self.mirror(off) {
            Some(m) => m >= off + self.dead_zone_pages.max(1) * PAGE_SIZE,
            None => true,
        }
    }

    /// True when `off` is a page inside the data area.
    pub fn is_page(&self, off: u64) -> bool {
        off.is_multiple_of(PAGE_SIZE) && off >= self.data_start && off < self.data_end
    }

    /// True when `npages` pages at `off` lie inside the data area.
    pub fn is_extent(&self, off: u64, npages: u64) -> bool {
        self.is_page(off)
            && npages
                .checked_mul(PAGE_SIZE)
                .and_then(|b| b.checked_add(off))
                .is_some_and(|end| end <= self.data_end)
    }

    /// Upper bound on the pages any chain can have (cycle detection).
    pub fn max_pages(&self) -> u64 {
        (self.data_end - self.data_start) / PAGE_SIZE
    }
}
