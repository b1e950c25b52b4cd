//! Format, mount and unmount (NOVA §4.7). A clean unmount saves the page
//! and inode allocators to the recovery inode's page chain and marks the
//! superblock clean, so the next mount restores them without scanning. After
//! a crash the mount replays the journals, then scans every shard's inode
//! table in parallel (one thread per shard), rebuilding the allocators from
//! the pages the live logs reference and reclaiming unlinked-but-open inodes.
//! Recovery only rewrites what it derives, so a crash during it is just
//! another crash.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pm::Region;
use zerocopy::IntoBytes;

use crate::alloc::{Budget, PageAllocator};
use crate::ctx::Ctx;
use crate::dir::{dentry, DentrySpec};
use crate::error::{corrupt, Error, Result};
use crate::inode::{record_of_attr, Attr, FileType, InodeState, InodeTables, ROOT_INO};
use crate::journal::Journal;
use crate::layout::{
    decode, ftype_of_mode, AllocStateHeader, Inode, Superblock, ALLOC_STATE_MAGIC, CHUNK_PAGES, CHUNK_SIZE,
    FEATURES_INCOMPAT_SUPPORTED, INODES_PER_CHUNK, INODE_HEADS_OFF, INODE_LIVE, INODE_SIZE, INODE_STATE_OFF,
    JOURNAL_HEADERS_OFF, JOURNAL_RINGS_OFF, JOURNAL_RING_SIZE, LOG_NEXT_OFF, MAGIC, MAX_SHARDS, PAGE_SHIFT, PAGE_SIZE,
    RECOVERY_INODE_OFF, STATE_CLEAN, STATE_MOUNTED, VERSION,
};
use crate::log::{Bounds, Pending};
use crate::time::now_ns;

/// How to lay out a new file system.
#[derive(Clone, Debug, Default)]
pub struct FormatOptions {
    /// Number of shards ("CPUs"); default: the CPUs of this machine.
    pub shards: Option<u32>,
    /// Owner of the root directory.
    pub uid: u32,
    pub gid: u32,
}

/// What happened while mounting, for `info`, logs and tests.
#[derive(Clone, Debug, Default)]
pub struct MountReport {
    /// The previous unmount was clean and its allocator state was used.
    pub clean: bool,
    pub journal_replayed: u64,
    /// Live inodes visited by the crash scan (0 after a clean unmount).
    pub scanned_inodes: u64,
    pub orphans_reclaimed: u64,
    pub superblock_repaired: bool,
    pub elapsed: Duration,
}

/// Bytes needed besides the inode tables: headers, journals and some room.
fn min_size(shards: u64) -> u64 {
    JOURNAL_RINGS_OFF + shards * JOURNAL_RING_SIZE + shards * CHUNK_SIZE + 2 * 1024 * 1024 + PAGE_SIZE
}

/// Smallest region `format` accepts with `shards` shards.
pub fn minimum_size(shards: u32) -> u64 {
    min_size(u64::from(shards)).next_multiple_of(1024 * 1024)
}

/// The default shard count: this machine's CPUs.
pub fn default_shards() -> u32 {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get() as u32)
        .clamp(1, MAX_SHARDS)
}

fn bounds_of(sb: &Superblock) -> Bounds {
    Bounds {
        data_start: sb.data_start,
        data_end: sb.data_end,
    }
}

/// Writes the superblock, primary first, then the replica (rule R4).
pub fn write_superblock(region: &dyn Region, sb: &mut Superblock) -> Result<()> {
    sb.csum = sb.compute_csum();
    region.write(0, sb.as_bytes())?;
    region.persist(0, size_of::<Superblock>() as u64)?;
    region.write(sb.replica_off, sb.as_bytes())?;
    region.persist(sb.replica_off, size_of::<Superblock>() as u64)?;
    Ok(())
}

fn read_sb_at(region: &dyn Region, off: u64) -> Result<Superblock> {
    let mut buf = vec![0u8; size_of::<Superblock>()];
    region.read(off, &mut buf)?;
    decode(&buf)
}

/// Checks one superblock copy against the region it was read from.
fn check_superblock(sb: &Superblock, region_len: u64) -> Result<()> {
    if sb.magic != MAGIC {
        return Err(Error::NotNovafs("no novafs magic number".into()));
    }
    if sb.csum != sb.compute_csum() {
        return Err(corrupt!("superblock checksum mismatch"));
    }
    if sb.version > VERSION {
        return Err(Error::TooNew {
            found: sb.version,
            supported: VERSION,
        });
    }
    // Format 1 committed journal transactions with a tail store; its journal
    // is empty after a clean unmount, and only then can this version take
    // the image over (the next read-write mount stamps it format 2).
    if sb.version < VERSION && sb.state != STATE_CLEAN {
        return Err(Error::NotSupported(
            "a format 1 image that was not cleanly unmounted: mount it once with the novafs that wrote it",
        ));
    }
    if sb.features_incompat & !FEATURES_INCOMPAT_SUPPORTED != 0 {
        return Err(Error::TooNew {
            found: sb.version,
            supported: VERSION,
        });
    }
    let sane = sb.block_size as u64 == PAGE_SIZE
        && sb.inode_size as u64 == INODE_SIZE
        && (1..=MAX_SHARDS).contains(&sb.shards)
        && sb.size <= region_len
        && sb.journal_headers_off == JOURNAL_HEADERS_OFF
        && sb.inode_heads_off == INODE_HEADS_OFF
        && sb.recovery_inode_off == RECOVERY_INODE_OFF
        && sb.journal_rings_off == JOURNAL_RINGS_OFF
        && sb.journal_ring_size == JOURNAL_RING_SIZE
        && sb.data_start == data_start(sb.shards)
        && sb.data_start < sb.data_end
        && sb.data_end == sb.replica_off
        && sb.replica_off + PAGE_SIZE == sb.size;
    if !sane {
        return Err(corrupt!("superblock geometry is inconsistent"));
    }
    Ok(())
}

fn data_start(shards: u32) -> u64 {
    (JOURNAL_RINGS_OFF + u64::from(shards) * JOURNAL_RING_SIZE).next_multiple_of(PAGE_SIZE)
}

/// True when the replica holds exactly the same bytes as `sb`.
pub fn replica_matches(region: &dyn Region, sb: &Superblock) -> bool {
    read_sb_at(region, sb.replica_off).is_ok_and(|rep| rep.as_bytes() == sb.as_bytes())
}

/// Reads the superblock, falling back to the replica (Fortis §4.2) when the
/// primary is damaged. Returns it and whether the primary was bad.
pub fn read_superblock(region: &dyn Region) -> Result<(Superblock, bool)> {
    if region.len() < 3 * PAGE_SIZE {
        return Err(Error::NotNovafs(format!(
            "only {} bytes, too small to hold novafs",
            region.len()
        )));
    }
    let primary = read_sb_at(region, 0).and_then(|sb| check_superblock(&sb, region.len()).map(|_| sb));
    match primary {
        Ok(sb) => Ok((sb, false)),
        Err(Error::TooNew { found, supported }) => Err(Error::TooNew { found, supported }),
        Err(first) => {
            let replica_off = region.len() - PAGE_SIZE;
            match read_sb_at(region, replica_off).and_then(|sb| check_superblock(&sb, region.len()).map(|_| sb)) {
                Ok(sb) => Ok((sb, true)),
                Err(Error::NotNovafs(_)) => Err(first),
                Err(e) => Err(e),
            }
        }
    }
}

/// Lays out an empty file system: headers, one inode-table chunk per
/// shard, the root directory, then the superblock last, so a crash during
/// mkfs leaves an image that is plainly not novafs.
pub fn format(region: Arc<dyn Region>, opts: &FormatOptions) -> Result<()> {
    let shards = opts.shards.unwrap_or_else(default_shards).clamp(1, MAX_SHARDS);
    let size = region.len() - region.len() % PAGE_SIZE;
    let min = minimum_size(shards);
    if size < min {
        return Err(Error::TooSmall { size, min });
    }
    let r = &*region;
    let start = data_start(shards);
    // Both magic words go first, durably, so an interrupted mkfs leaves an
    // image that is plainly not novafs rather than a damaged old one.
    r.store_u64(0, 0)?;
    r.store_u64(size - PAGE_SIZE, 0)?;
    r.flush(0, 8)?;
    r.flush(size - PAGE_SIZE, 8)?;
    r.fence();
    r.zero_nt(0, start)?;
    r.zero_nt(size - PAGE_SIZE, PAGE_SIZE)?;
    r.fence();
    let now = now_ns();
    let mut sb = Superblock {
        magic: MAGIC,
        version: VERSION,
        block_size: PAGE_SIZE as u32,
        features_compat: 0,
        features_incompat: 0,
        features_ro_compat: 0,
        size,
        shards,
        inode_size: INODE_SIZE as u32,
        journal_headers_off: JOURNAL_HEADERS_OFF,
        journal_rings_off: JOURNAL_RINGS_OFF,
        journal_ring_size: JOURNAL_RING_SIZE,
        inode_heads_off: INODE_HEADS_OFF,
        recovery_inode_off: RECOVERY_INODE_OFF,
        data_start: start,
        data_end: size - PAGE_SIZE,
        replica_off: size - PAGE_SIZE,
        state: STATE_MOUNTED,
        mount_count: 0,
        epoch: 0,
        created_ns: now,
        mounted_ns: now,
        uuid: uuid(now),
        reserved: [0; 32],
        csum: 0,
        pad: 0,
    };
    let bounds = bounds_of(&sb);
    let alloc = PageAllocator::new(sb.data_start, sb.data_end, shards as usize);
    alloc.free(sb.data_start, (sb.data_end - sb.data_start) >> PAGE_SHIFT);
    let tables = InodeTables::create(r, &alloc, shards)?;
    let journal = Journal::open(r, &sb)?;
    let ctx = Ctx {
        region: region.clone(),
        alloc,
        tables,
        journal,
        bounds,
        epoch: 0,
    };
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
        region.persist(off, bytes.len() as u64)?;
    }
    region.commit_u64(0, sb.magic)?;
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
    let (ino, off) = ctx.tables.claim_in(ctx.region(), &ctx.alloc, 0)?;
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
    };
    let mut st = InodeState::new(attr, off);
    let spec = DentrySpec {
        ino,
        seq: 0,
        ftype: ftype_of_mode(libc::S_IFDIR),
        dir_nlink: 2,
        dir_mtime: now,
    };
    let entries = [dentry(0, true, b"..", &spec)];
    let p: Pending = st.log.append(ctx.region(), &ctx.alloc, Budget::Normal, &entries)?;
    let mut rec = record_of_attr(&attr, 0);
    rec.state = INODE_LIVE;
    rec.log_head = p.new_head.unwrap_or(0);
    rec.log_tail = p.tail;
    ctx.region().write(off, rec.as_bytes())?;
    ctx.region().persist(off, INODE_SIZE)?;
    Ok(())
}

/// Mounts: superblock (replica fallback), journal replay, then the saved
/// allocator state or a parallel scan. Returns the context and superblock.
pub(crate) fn mount(region: Arc<dyn Region>, read_only: bool) -> Result<(Ctx, Superblock, MountReport)> {
    let t0 = Instant::now();
    let r = &*region;
    let (mut sb, repaired) = read_superblock(r)?;
    let mut report = MountReport {
        superblock_repaired: repaired,
        ..MountReport::default()
    };
    // Rule R4 keeps one good copy only if both copies agree before every
    // update: a replica torn or left stale by a crash is rewritten now,
    // before this mount changes the primary.
    if (repaired || !replica_matches(r, &sb)) && !read_only {
        if repaired {
            tracing::warn!("primary superblock damaged; restored from the replica");
        }
        write_superblock(r, &mut sb)?;
    }
    // NOVA §4.7 step 1. Replay also runs for read-only mounts: the committed
    // transactions are part of the file system's state.
    report.journal_replayed = Journal::recover(r, &sb)?;
    let bounds = bounds_of(&sb);
    let tables = InodeTables::load(r, &sb, bounds)?;
    let alloc = PageAllocator::new(sb.data_start, sb.data_end, sb.shards as usize);
    let journal = Journal::open(r, &sb)?;
    let ctx = Ctx {
        region: region.clone(),
        alloc,
        tables,
        journal,
        bounds,
        epoch: sb.epoch,
    };
    report.clean = sb.state == STATE_CLEAN && report.journal_replayed == 0 && load_saved_state(&ctx, &sb).is_ok();
    if !report.clean {
        let ctx_fresh = Ctx {
            alloc: PageAllocator::new(sb.data_start, sb.data_end, sb.shards as usize),
            tables: InodeTables::load(r, &sb, bounds)?,
            ..ctx
        };
        let scan = scan(&ctx_fresh, !read_only)?;
        report.scanned_inodes = scan.live;
        report.orphans_reclaimed = scan.orphans;
        if !read_only {
            sb.state = STATE_MOUNTED;
        }
        return finish(ctx_fresh, sb, report, read_only, t0);
    }
    finish(ctx, sb, report, read_only, t0)
}

fn finish(
    ctx: Ctx,
    mut sb: Superblock,
    mut report: MountReport,
    read_only: bool,
    t0: Instant,
) -> Result<(Ctx, Superblock, MountReport)> {
    if !read_only {
        sb.state = STATE_MOUNTED;
        sb.version = VERSION;
        sb.mount_count += 1;
        sb.mounted_ns = now_ns();
        write_superblock(ctx.region(), &mut sb)?;
    }
    report.elapsed = t0.elapsed();
    tracing::info!(?report, "mounted");
    Ok((ctx, sb, report))
}

/// Reads the allocator state a clean unmount left in the recovery chain.
pub(crate) fn load_saved_state(ctx: &Ctx, sb: &Superblock) -> Result<()> {
    let r = ctx.region();
    let mut rbuf = [0u8; INODE_SIZE as usize];
    r.read(RECOVERY_INODE_OFF, &mut rbuf)?;
    let rec: Inode = decode(&rbuf)?;
    if rec.state != INODE_LIVE {
        return Err(corrupt!("no saved allocator state"));
    }
    let blob = read_chain(r, ctx.bounds, rec.log_head, rec.log_tail)?;
    let hdr: AllocStateHeader = decode(&blob)?;
    let body = &blob[size_of::<AllocStateHeader>()..];
    let n = (hdr.page_ranges + hdr.ino_ranges) as usize;
    if hdr.magic != ALLOC_STATE_MAGIC
        || hdr.mount_count != sb.mount_count
        || body.len() != n * 16
        || crc32c::crc32c(body) != hdr.csum
    {
        return Err(corrupt!("saved allocator state is damaged or stale"));
    }
    let pairs: Vec<(u64, u64)> = body
        .chunks_exact(16)
        .map(|c| {
            (
                u64::from_le_bytes(c[..8].try_into().unwrap_or_default()),
                u64::from_le_bytes(c[8..].try_into().unwrap_or_default()),
            )
        })
        .collect();
    let (pages, inos) = pairs.split_at(hdr.page_ranges as usize);
    let first = sb.data_start >> PAGE_SHIFT;
    let last = sb.data_end >> PAGE_SHIFT;
    for &(p, n) in pages {
        if p < first || p.checked_add(n).is_none_or(|e| e > last) {
            return Err(corrupt!("saved free range {p}+{n} is outside the data area"));
        }
    }
    ctx.tables.import_free(inos)?;
    for &(p, n) in pages {
        ctx.alloc.free(p << PAGE_SHIFT, n);
    }
    Ok(())
}

/// Reads `len` bytes stored in a chain of pages (4088 payload bytes each).
fn read_chain(r: &dyn Region, bounds: Bounds, head: u64, len: u64) -> Result<Vec<u8>> {
    let pages = crate::log::chain_pages(r, bounds, head)?;
    let mut out = vec![0u8; len as usize];
    let mut done = 0usize;
    for p in pages {
        if done == out.len() {
            break;
        }
        let n = (LOG_NEXT_OFF as usize).min(out.len() - done);
        r.read(p, &mut out[done..done + n])?;
        done += n;
    }
    if done < out.len() {
        return Err(corrupt!("saved allocator state is truncated"));
    }
    Ok(out)
}

/// Clean unmount (NOVA §4.7): save the allocators to the recovery chain,
/// then mark the superblock clean (primary, then replica: R4).
pub(crate) fn save_clean(ctx: &Ctx, sb: &mut Superblock) -> Result<()> {
    save_state(ctx, sb)?;
    sb.state = STATE_CLEAN;
    write_superblock(ctx.region(), sb)
}

/// Writes the allocators to the recovery chain and makes them persistent.
fn save_state(ctx: &Ctx, sb: &Superblock) -> Result<()> {
    let r = ctx.region();
    let pages = ctx.alloc.export();
    let inos = ctx.tables.export_free();
    let mut body = Vec::with_capacity((pages.len() + inos.len()) * 16);
    for &(s, n) in pages.iter().chain(&inos) {
        body.extend_from_slice(&s.to_le_bytes());
        body.extend_from_slice(&n.to_le_bytes());
    }
    let hdr = AllocStateHeader {
        magic: ALLOC_STATE_MAGIC,
        page_ranges: pages.len() as u64,
        ino_ranges: inos.len() as u64,
        mount_count: sb.mount_count,
        csum: crc32c::crc32c(&body),
        pad: 0,
    };
    let mut blob = hdr.as_bytes().to_vec();
    blob.extend_from_slice(&body);
    // The chain lives in pages the saved state lists as free: they are
    // free again as soon as the next mount has read them.
    let npages = (blob.len() as u64).div_ceil(LOG_NEXT_OFF);
    let extents = ctx.alloc.alloc(npages, Budget::Reserve)?;
    let chain: Vec<u64> = extents
        .iter()
        .flat_map(|e| (0..e.npages).map(move |i| e.off + i * PAGE_SIZE))
        .collect();
    for (i, (&p, part)) in chain.iter().zip(blob.chunks(LOG_NEXT_OFF as usize)).enumerate() {
        r.write(p, part)?;
        r.store_u64(p + LOG_NEXT_OFF, chain.get(i + 1).copied().unwrap_or(0))?;
        r.flush(p, PAGE_SIZE)?;
    }
    let rec = Inode {
        state: INODE_LIVE,
        log_head: chain[0],
        log_tail: blob.len() as u64,
        ..Inode::default()
    };
    r.write(RECOVERY_INODE_OFF, rec.as_bytes())?;
    r.flush(RECOVERY_INODE_OFF, INODE_SIZE)?;
    r.fence(); // The saved state is persistent before the superblock says clean.
    Ok(())
}

struct ScanResult {
    live: u64,
    orphans: u64,
}

/// Rebuilds both allocators from the live inodes (NOVA §4.7, "Recovery after
/// a failure"): one thread per shard; orphans (live, no links) are freed
/// when `reclaim` is set.
fn scan(ctx: &Ctx, reclaim: bool) -> Result<ScanResult> {
    let shards = ctx.tables.shard_count() as usize;
    let per_shard: Vec<Result<ShardScan>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..shards)
            .map(|shard| s.spawn(move || scan_shard(ctx, shard)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(corrupt!("scan thread panicked"))))
            .collect()
    });
    let mut used: Vec<u64> = ctx
        .tables
        .all_chunks()
        .iter()
        .flat_map(|&c| (0..CHUNK_PAGES).map(move |i| (c >> PAGE_SHIFT) + i))
        .collect();
    let mut result = ScanResult { live: 0, orphans: 0 };
    let mut orphans = Vec::new();
    for sc in per_shard {
        let sc = sc?;
        used.extend(sc.used);
        result.live += sc.live;
        for ino in sc.free_inos {
            ctx.tables.release(ino);
        }
        orphans.extend(sc.orphans);
    }
    if !reclaim {
        // A read-only mount leaves orphans in place, pages and all.
        for (_, _, st) in &orphans {
            used.extend(resources(st).into_iter().map(|p| p >> PAGE_SHIFT));
        }
    }
    used.sort_unstable();
    let before = used.len();
    used.dedup();
    if used.len() != before {
        tracing::error!(pages = before - used.len(), "pages referenced twice; run novafs fsck");
    }
    let mut next = ctx.bounds.data_start >> PAGE_SHIFT;
    for &p in used.iter().chain(std::iter::once(&(ctx.bounds.data_end >> PAGE_SHIFT))) {
        if p > next {
            ctx.alloc.free(next << PAGE_SHIFT, p - next);
        }
        next = next.max(p + 1);
    }
    result.orphans = orphans.len() as u64;
    if reclaim {
        for (ino, off, _) in orphans {
            // The last link went away while the file was open (NOVA keeps
            // such inodes alive until release); the process is gone now.
            // Its pages were left out of `used`, so they are free already.
            ctx.region().commit_u64(off + INODE_STATE_OFF, 0)?;
            ctx.tables.release(ino);
        }
    }
    Ok(result)
}

/// Every page an inode holds: its log pages and its data pages.
pub fn resources(st: &InodeState) -> Vec<u64> {
    let mut v: Vec<u64> = st.log.pages().to_vec();
    if let crate::inode::Body::File(map) = &st.meta.body {
        v.extend(map.blocks());
    }
    v
}

/// Frees an inode's log and data pages (after its state word is durable),
/// merged into runs so a file written sequentially costs one free. Leaves
/// `st` empty: the inode is gone.
pub(crate) fn release_resources(ctx: &Ctx, st: &mut InodeState) {
    let mut pages = st.log.take_pages();
    if let crate::inode::Body::File(map) = std::mem::replace(&mut st.meta.body, crate::inode::Body::Special) {
        pages.extend(map.into_blocks());
    }
    pages.sort_unstable();
    let mut run: Option<(u64, u64)> = None;
    for p in pages {
        run = match run {
            Some((start, n)) if start + n * PAGE_SIZE == p => Some((start, n + 1)),
            Some((start, n)) => {
                ctx.alloc.free(start, n);
                Some((p, 1))
            }
            None => Some((p, 1)),
        };
    }
    if let Some((start, n)) = run {
        ctx.alloc.free(start, n);
    }
}

struct ShardScan {
    used: Vec<u64>,
    free_inos: Vec<u64>,
    orphans: Vec<(u64, u64, InodeState)>,
    live: u64,
}

fn scan_shard(ctx: &Ctx, shard: usize) -> Result<ShardScan> {
    let r = ctx.region();
    let mut out = ShardScan {
        used: Vec::new(),
        free_inos: Vec::new(),
        orphans: Vec::new(),
        live: 0,
    };
    let mut chunk_buf = vec![0u8; CHUNK_SIZE as usize];
    for (base, chunk) in ctx.tables.slots(shard) {
        r.read(chunk, &mut chunk_buf)?;
        for slot in 0..INODES_PER_CHUNK {
            let ino = ctx.tables.ino_of(shard, base + slot);
            let at = (slot * INODE_SIZE) as usize;
            let rec: Inode = decode(&chunk_buf[at..at + INODE_SIZE as usize])?;
            if rec.state != INODE_LIVE {
                out.free_inos.push(ino);
                continue;
            }
            let off = chunk + slot * INODE_SIZE;
            match InodeState::load(r, ctx.bounds, off, &rec) {
                Ok(st) => {
                    out.live += 1;
                    if st.meta.attr.nlink == 0 && ino != ROOT_INO {
                        out.orphans.push((ino, off, st));
                    } else {
                        out.used.extend(resources(&st).into_iter().map(|p| p >> PAGE_SHIFT));
                    }
                }
                Err(e) => {
                    // Keep whatever pages it may own out of the allocator;
                    // the inode itself reads as EIO and fsck reports it.
                    tracing::error!(ino, error = %e, "inode is damaged");
                    if let Ok(pages) = crate::log::chain_pages(r, ctx.bounds, rec.log_head) {
                        out.used.extend(pages.into_iter().map(|p| p >> PAGE_SHIFT));
                    }
                }
            }
        }
    }
    Ok(out)
}

/// What `novafs info` shows about an image, read without mounting it.
#[derive(Clone, Debug)]
pub struct Inspect {
    pub superblock: Superblock,
    /// The primary superblock is damaged and the replica was used.
    pub primary_bad: bool,
    /// Free pages and free inode slots, known when the image is clean.
    pub free: Option<(u64, u64)>,
    /// Committed journal transactions awaiting replay.
    pub pending_journal: bool,
}

/// Reads an image's superblock and, after a clean unmount, its saved
/// allocator state. Writes nothing, so it is safe on a mounted image.
pub fn inspect(region: Arc<dyn Region>) -> Result<Inspect> {
    let r = &*region;
    let (sb, primary_bad) = read_superblock(r)?;
    let pending_journal = Journal::pending(r, &sb)?;
    let bounds = bounds_of(&sb);
    let mut free = None;
    if sb.state == STATE_CLEAN && !pending_journal {
        let ctx = Ctx {
            region: region.clone(),
            alloc: PageAllocator::new(sb.data_start, sb.data_end, sb.shards as usize),
            tables: InodeTables::load(r, &sb, bounds)?,
            journal: Journal::open(r, &sb)?,
            bounds,
            epoch: sb.epoch,
        };
        if load_saved_state(&ctx, &sb).is_ok() {
            free = Some((ctx.alloc.free_pages(), ctx.tables.free_count()));
        }
    }
    Ok(Inspect {
        superblock: sb,
        primary_bad,
        free,
        pending_journal,
    })
}
