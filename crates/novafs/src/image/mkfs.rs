//! mkfs: lays out an empty file system (NOVA §4.1, Figure 1) — headers,
//! one inode-table chunk per shard, the root directory, the saved state of
//! the empty allocators — with the superblock last, so an interrupted mkfs
//! leaves an image that is plainly not novafs.

use std::sync::Arc;

use pm::Region;
use zerocopy::IntoBytes;

use crate::alloc::Budget;
use crate::commit::{Ctx, Parts};
use crate::consistency::Consistency;
use crate::dir::{dentry, DentrySpec};
use crate::error::{Error, Result};
use crate::health::Health;
use crate::inode::{record_of_attr, Attr, FileType, InodeState, ROOT_INO};
use crate::itable::InodeTables;
use crate::journal::Journal;
use crate::layout::{
    ftype_of_mode, Superblock, CHUNK_SIZE, DEFAULT_DEAD_ZONE, FEATURE_INCOMPAT_DATA_CSUM, FEATURE_INCOMPAT_DATA_PARITY,
    FEATURE_INCOMPAT_META_REPLICA, INODE_HEADS_OFF, INODE_LIVE, INODE_SIZE, JOURNAL_HEADERS_OFF, JOURNAL_RINGS_OFF,
    JOURNAL_RING_SIZE, MAGIC, MAX_SHARDS, PAGE_SHIFT, PAGE_SIZE, RECOVERY_INODE_OFF, STATE_CLEAN, STATE_MOUNTED,
    VERSION,
};
use crate::recovery::{allocator_of, save_state};
use crate::replica::Mirrored;
use crate::setters::setters;
use crate::snapshot::Snapshots;
use crate::superblock::{bounds_of, geometry, strips_of};
use crate::time::now_ns;

/// How to lay out a new file system.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct FormatOptions {
    /// Number of shards ("CPUs"); default: the CPUs of this machine.
    pub shards: Option<u32>,
    /// Owner of the root directory.
    pub uid: u32,
    pub gid: u32,
    /// Keep a replica of every inode and log page (Fortis §4.2); on by
    /// default.
    pub meta_replicas: bool,
    /// Least distance between a metadata page and its replica, in bytes
    /// (Fortis §4.4's dead zone; default 1 MiB).
    pub dead_zone: u64,
    /// Two CRC32C copies of every 512-byte strip of file data, and a
    /// RAID-4 parity strip per data page (Fortis §4.3); both on by default.
    pub data_csum: bool,
    pub data_parity: bool,
    /// The consistency mode mounts take unless they say otherwise
    /// (NOVA-Fortis §4.6); strict by default.
    pub consistency: Consistency,
}

impl FormatOptions {
    setters!(
        /// Sets the number of shards (None: the CPUs of this machine).
        shards: Option<u32>,
        /// Sets the root directory's owner.
        uid: u32,
        /// Sets the root directory's group.
        gid: u32,
        /// Keeps metadata replicas, or not.
        meta_replicas: bool,
        /// Sets the least distance between a metadata page and its replica.
        dead_zone: u64,
        /// Keeps checksums of file data, or not.
        data_csum: bool,
        /// Keeps parity of file data, or not.
        data_parity: bool,
        /// Sets the consistency mode mounts take by default.
        consistency: Consistency,
    );

    /// The incompatible feature bits these options set.
    pub fn incompat(&self) -> u64 {
        [
            (self.meta_replicas, FEATURE_INCOMPAT_META_REPLICA),
            (self.data_csum, FEATURE_INCOMPAT_DATA_CSUM),
            (self.data_parity, FEATURE_INCOMPAT_DATA_PARITY),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .fold(0, |acc, (_, bit)| acc | bit)
    }
}

impl Default for FormatOptions {
    fn default() -> FormatOptions {
        FormatOptions {
            shards: None,
            uid: 0,
            gid: 0,
            meta_replicas: true,
            dead_zone: DEFAULT_DEAD_ZONE,
            data_csum: true,
            data_parity: true,
            consistency: Consistency::Strict,
        }
    }
}

/// Bytes needed, in whole MiB: headers, journals, a data area holding the
/// inode tables and some room (with replicas also the tables' mirrors and
/// the dead zone), and the areas the features add.
fn min_size(shards: u32, opts: &FormatOptions) -> u64 {
    const MIB: u64 = 1 << 20;
    let n = u64::from(shards);
    let replicas = if opts.meta_replicas {
        n * CHUNK_SIZE + opts.dead_zone.next_multiple_of(PAGE_SIZE)
    } else {
        0
    };
    let data = n * CHUNK_SIZE + 2 * MIB + replicas;
    let mut size = (JOURNAL_RINGS_OFF + n * JOURNAL_RING_SIZE + data + 2 * PAGE_SIZE).next_multiple_of(MIB);
    while geometry(size, shards, opts.incompat()).is_none_or(|g| g.data_end - g.data_start < data) {
        size += MIB;
    }
    size
}

/// Smallest region `format` accepts with `shards` shards and the default
/// options.
pub fn minimum_size(shards: u32) -> u64 {
    min_size(shards, &FormatOptions::default())
}

/// The default shard count: this machine's CPUs.
pub fn default_shards() -> u32 {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get() as u32)
        .clamp(1, MAX_SHARDS)
}

/// Lays out an empty file system: headers, one inode-table chunk per
/// shard, the root directory, then the superblock last, so a crash during
/// mkfs leaves an image that is plainly not novafs.
pub(crate) fn format(region: Arc<dyn Region>, opts: &FormatOptions) -> Result<()> {
    let shards = opts.shards.unwrap_or_else(default_shards).clamp(1, MAX_SHARDS);
    let size = region.len() - region.len() % PAGE_SIZE;
    let dead_zone = opts.dead_zone.next_multiple_of(PAGE_SIZE);
    let min = min_size(shards, opts);
    if size < min {
        return Err(Error::TooSmall { size, min });
    }
    let r = &*region;
    let incompat = opts.incompat();
    let g = geometry(size, shards, incompat).ok_or(Error::TooSmall { size, min })?;
    // Both magic words go first, durably, so an interrupted mkfs leaves an
    // image that is plainly not novafs rather than a damaged old one.
    r.store_u64(0, 0)?;
    r.store_u64(size - PAGE_SIZE, 0)?;
    r.flush(0, 8)?;
    r.flush(size - PAGE_SIZE, 8)?;
    r.fence(); // R5: no old superblock survives what follows.
    r.zero_nt(0, g.data_start)?;
    if opts.meta_replicas {
        r.zero_nt(g.data_end, PAGE_SIZE)?;
    }
    r.zero_nt(g.replica_off, PAGE_SIZE)?;
    r.fence(); // R1: headers and journals zeroed before anything names them.
    let now = now_ns();
    let mut sb = Superblock {
        magic: MAGIC,
        version: VERSION,
        block_size: PAGE_SIZE as u32,
        features_compat: 0,
        features_incompat: incompat,
        features_ro_compat: 0,
        size,
        shards,
        inode_size: INODE_SIZE as u32,
        journal_headers_off: JOURNAL_HEADERS_OFF,
        journal_rings_off: JOURNAL_RINGS_OFF,
        journal_ring_size: JOURNAL_RING_SIZE,
        inode_heads_off: INODE_HEADS_OFF,
        recovery_inode_off: RECOVERY_INODE_OFF,
        data_start: g.data_start,
        data_end: g.data_end,
        replica_off: g.replica_off,
        state: STATE_MOUNTED,
        mount_count: 0,
        epoch: 0,
        created_ns: now,
        mounted_ns: now,
        uuid: uuid(now),
        dead_zone_pages: if opts.meta_replicas { dead_zone / PAGE_SIZE } else { 0 },
        meta_repairs: 0,
        meta_losses: 0,
        last_loss_ino: 0,
        last_loss_ns: 0,
        csum_off: g.csum,
        parity_off: g.parity,
        data_repairs: 0,
        consistency: opts.consistency.code(),
        reserved: [0; 22],
        csum: 0,
        pad: 0,
    };
    let bounds = bounds_of(&sb);
    let alloc = allocator_of(&sb);
    alloc.add_free(sb.data_start, (sb.data_end - sb.data_start) >> PAGE_SHIFT);
    let meta = Mirrored::view(region.clone(), bounds);
    let tables = InodeTables::create(&*meta, &alloc, shards, bounds)?;
    let journal = Journal::open(&*meta, &sb)?;
    let snapshots = Snapshots::load(&*meta, &*region, bounds, 0)?;
    let parts = Parts {
        alloc,
        tables,
        journal,
        bounds,
        snapshots,
        health: Health::default(),
        strips: strips_of(&sb),
    };
    let ctx = Ctx::new(meta, region.clone(), false, parts);
    make_root(&ctx, opts, now)?;
    save_state(&ctx, &sb)?;
    sb.state = STATE_CLEAN;
    write_new_superblock(r, &mut sb)
}

/// mkfs's superblock write: both copies without their magic word first,
/// then each magic word with one 8-byte commit (R5), so a crash leaves
/// either no novafs at all or a complete superblock.
fn write_new_superblock(region: &dyn Region, sb: &mut Superblock) -> Result<()> {
    sb.csum = sb.compute_csum();
    let mut bytes = sb.as_bytes().to_vec();
    bytes[..8].fill(0);
    for off in [0, sb.replica_off] {
        region.write(off, &bytes)?;
        region.persist(off, bytes.len() as u64)?; // R1: whole before its magic word.
    }
    region.commit_u64(0, sb.magic)?; // R5, primary first (R4).
    region.commit_u64(sb.replica_off, sb.magic)?;
    Ok(())
}

fn uuid(now: i64) -> [u8; 16] {
    let a = crc32c::crc32c(&now.to_le_bytes());
    let b = crc32c::crc32c(&std::process::id().to_le_bytes());
    let mut u = [0u8; 16];
    u[..8].copy_from_slice(&now.to_le_bytes());
    u[8..12].copy_from_slice(&a.to_le_bytes());
    u[12..].copy_from_slice(&b.to_le_bytes());
    u
}

/// The root directory: inode 1, its ".." pointing at itself.
fn make_root(ctx: &Ctx, opts: &FormatOptions, now: i64) -> Result<()> {
    let (ino, off) = ctx.tables().claim_in(ctx.region(), ctx.alloc(), 0)?;
    debug_assert_eq!(ino, ROOT_INO);
    let attr = Attr {
        ino,
        kind: FileType::Directory,
        perm: 0o755,
        nlink: 2,
        uid: opts.uid,
        gid: opts.gid,
        size: 0,
        blocks: 0,
        atime: now,
        mtime: now,
        ctime: now,
        rdev: 0,
        generation: 1,
        flags: 0,
    };
    let mut st = InodeState::new(attr, off, 0);
    let spec = DentrySpec {
        ino,
        seq: 0,
        ftype: ftype_of_mode(libc::S_IFDIR),
        dir_nlink: 2,
        dir_mtime: now,
    };
    let entries = [dentry(0, true, b"..", &spec)];
    // The record, then the log's commit into it (its head and tail words,
    // outside the checksum); the superblock, written last, makes the whole
    // image valid (see `format`).
    let p = st.log.append(ctx.region(), ctx.alloc(), Budget::Normal, &entries)?;
    let mut rec = record_of_attr(&attr, 0);
    rec.state = INODE_LIVE;
    ctx.region().write(off, rec.as_bytes())?;
    ctx.region().flush(off, INODE_SIZE)?;
    // R1 and R5, before the superblock that makes the image valid: the
    // commit keeps the log's first page.
    let committed = st.log.commit(ctx.region(), off, p)?;
    st.log.committed(&committed);
    Ok(())
}
