//! Mount and clean unmount (NOVA §4.7). A clean unmount saves the page
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
use crate::commit::{Ctx, Fate, Parts};
use crate::consistency::Consistency;
use crate::error::{corrupt, Error, Result};
use crate::file;
use crate::health::Health;
use crate::inode::{mmap_entry, Body, FileType, Ino, InodeState, ROOT_INO};
use crate::itable::{InodeTables, Slot};
use crate::journal::Journal;
use crate::layout::Bounds;
use crate::layout::{
    decode, AllocStateHeader, Inode, SavedKept, Superblock, ALLOC_STATE_MAGIC, ALLOC_STATE_MAGIC_V1, CHUNK_PAGES,
    CHUNK_SIZE, FEATURE_INCOMPAT_META_REPLICA, FEATURE_INCOMPAT_RELAXED, FEATURE_INCOMPAT_REPLICAS_STALE, INODE_FREE,
    INODE_LIVE, INODE_SIZE, INODE_STATE_OFF, LOG_NEXT_OFF, MMAP_PROTECT, PAGE_SHIFT, PAGE_SIZE, RECOVERY_INODE_OFF,
    RESERVED_INODES_OFF, STATE_CLEAN, STATE_MOUNTED, VERSION,
};
use crate::replica::{sync, Mirrored};
use crate::snapshot::{Kept, Snapshots};
use crate::superblock::{bounds_of, fixed_mirror_pages, read_superblock, replica_matches, strips_of, write_superblock};
use crate::time::now_ns;

use used_pages::UsedPages;

mod used_pages;

/// What happened while mounting, for `info`, logs and tests.
#[derive(Clone, Debug, Default)]
pub struct MountReport {
    /// The previous unmount was clean and its allocator state was used.
    pub clean: bool,
    pub journal_replayed: u64,
    /// Data pages a relaxed-mode write was changing in place at a crash,
    /// resealed (`journal::intent`).
    pub intents_resealed: u64,
    /// Live inodes visited by the crash scan (0 after a clean unmount).
    pub scanned_inodes: u64,
    pub orphans_reclaimed: u64,
    pub superblock_repaired: bool,
    /// Stale replicas (left by a mount without metadata protection) were
    /// all rewritten from their primaries.
    pub replicas_refreshed: bool,
    /// The crash scan's threads, one per shard in shard order (empty
    /// after a clean unmount): what each read, and how long it took.
    pub shards: Vec<ShardReport>,
    pub elapsed: Duration,
}

/// One scan thread's part of a mount after a crash (NOVA §4.7: one
/// thread per shard's inode table), for measuring the scan per thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShardReport {
    /// Live inodes the thread visited (its part of `scanned_inodes`).
    pub inodes: u64,
    /// The sizes of the live regular files among them: the file data
    /// whose logs the thread read.
    pub file_bytes: u64,
    /// The thread's wall time, from its start to its end.
    pub elapsed: Duration,
}

/// Whether a mount keeps the metadata replicas (Fortis §4.2) current.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MetaReplicas {
    /// As the image was formatted (or tuned): with replicas if it has them.
    #[default]
    AsFormatted,
    /// Refuse to mount an image without replicas.
    Required,
    /// Do not write replicas on this mount, for speed: they go stale
    /// (said in the superblock, so nothing trusts them) and the next
    /// protected read-write mount rewrites them all.
    Skipped,
}

/// Mounts: superblock (replica fallback), journal replay, then the saved
/// allocator state or a parallel scan. Returns the context, in
/// `consistency` mode (None: the image's default), and the superblock.
pub(crate) fn mount(
    region: Arc<dyn Region>,
    read_only: bool,
    replicas: MetaReplicas,
    consistency: Option<Consistency>,
) -> Result<(Ctx, Superblock, MountReport)> {
    let t0 = Instant::now();
    let r = &*region;
    let (mut sb, repaired) = read_superblock(r)?;
    // An unknown default is refused even when the mount names its mode:
    // the superblock is not what this novafs wrote.
    let default = Consistency::of(&sb)?;
    let consistency = consistency.unwrap_or(default);
    let mut report = MountReport {
        superblock_repaired: repaired,
        ..MountReport::default()
    };
    let formatted = sb.features_incompat & FEATURE_INCOMPAT_META_REPLICA != 0;
    if replicas == MetaReplicas::Required && !formatted {
        return Err(Error::NotSupported(
            "this image keeps no metadata replicas: turn them on with `novafs tune --enable meta-protection`",
        ));
    }
    let was_stale = bounds_of(&sb).stale;
    let mut as_read = sb;
    // Stale from the first write of this mount on: the flag is durable
    // (R4) before any metadata store skips its replica.
    let skip = formatted && replicas == MetaReplicas::Skipped && !read_only;
    if skip {
        sb.features_incompat |= FEATURE_INCOMPAT_REPLICAS_STALE;
    }
    // A relaxed mount may leave data-write intents in the journal headers
    // (Fortis §4.6): the bit that makes a novafs that does not know them
    // refuse the image is durable before this mount writes anything else
    // (R4, as for REPLICAS_STALE). A strict mount keeps a bit a crashed
    // relaxed one left: only a clean unmount clears it (`save_clean`).
    let mark_relaxed =
        consistency == Consistency::Relaxed && !read_only && sb.features_incompat & FEATURE_INCOMPAT_RELAXED == 0;
    if mark_relaxed {
        sb.features_incompat |= FEATURE_INCOMPAT_RELAXED;
    }
    // Rule R4 keeps one good copy only if both copies agree before every
    // update: a replica torn or left stale by a crash is rewritten now,
    // before this mount changes the primary.
    if (repaired || skip || mark_relaxed || !replica_matches(r, &sb)) && !read_only {
        if repaired {
            tracing::warn!("primary superblock damaged; restored from the replica");
        } else if (skip || mark_relaxed) && !replica_matches(r, &as_read) {
            // The primary changes now: a replica a crash left torn is
            // whole first (the primary rewritten as it stands).
            write_superblock(r, &mut as_read)?;
        }
        write_superblock(r, &mut sb)?;
    }
    // Stale replicas become current again only through the full scan,
    // which rewrites every one from its primary.
    let refresh = was_stale && !skip && !read_only;
    // NOVA §4.7 step 1. Replay also runs for read-only mounts: the committed
    // transactions are part of the file system's state.
    // Through the mirroring view: a replayed update reaches both copies.
    let replay = Journal::recover(&region, &sb)?;
    report.journal_replayed = replay.replayed;
    report.intents_resealed = replay.resealed;
    let ctx = open_ctx(region.clone(), &sb, read_only)?;
    // Snapshots' manifests come back with the saved state (Fortis §3.2);
    // after a crash the scan rebuilds them.
    report.clean =
        sb.state == STATE_CLEAN && report.journal_replayed == 0 && !refresh && load_saved_state(&ctx, &sb).is_ok();
    if !report.clean {
        // Whatever the saved state put in, start from empty allocators.
        let mut ctx_fresh = open_ctx(region.clone(), &sb, read_only)?;
        let scan = scan(&ctx_fresh, !read_only)?;
        report.scanned_inodes = scan.live;
        report.orphans_reclaimed = scan.orphans;
        report.shards = scan.shards;
        if !read_only {
            sb.state = STATE_MOUNTED;
        }
        if refresh {
            // The scan rewrote every replica of a live object and fenced
            // (R4: the copies agree before the flag that trusts them goes).
            sb.features_incompat &= !FEATURE_INCOMPAT_REPLICAS_STALE;
            report.replicas_refreshed = true;
            tracing::info!("metadata replicas rewritten from their primaries; protection is on again");
            let bounds = bounds_of(&sb);
            ctx_fresh = ctx_fresh.with_meta(Mirrored::view(region.clone(), bounds), bounds);
        }
        return finish(ctx_fresh.with_consistency(consistency), sb, report, read_only, t0);
    }
    finish(ctx.with_consistency(consistency), sb, report, read_only, t0)
}

fn finish(
    ctx: Ctx,
    mut sb: Superblock,
    mut report: MountReport,
    read_only: bool,
    t0: Instant,
) -> Result<(Ctx, Superblock, MountReport)> {
    // Fortis §4.6: no write goes relaxed before the bit that covers it.
    debug_assert!(!ctx.relaxed() || sb.features_incompat & FEATURE_INCOMPAT_RELAXED != 0);
    if !read_only {
        // A primary superblock restored from its replica is not counted:
        // damage cannot be told from a crash during its update (R4).
        ctx.health().stamp(&mut sb);
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

/// The context of the image whose superblock is `sb`, with empty
/// allocators: the saved state or the scan fills them in.
pub(crate) fn open_ctx(region: Arc<dyn Region>, sb: &Superblock, read_only: bool) -> Result<Ctx> {
    let bounds = bounds_of(sb);
    let meta = Mirrored::view(region.clone(), bounds);
    let parts = Parts {
        alloc: allocator_of(sb),
        tables: InodeTables::load(&*meta, sb, bounds)?,
        journal: Journal::open(&*meta, sb)?,
        bounds,
        snapshots: Snapshots::load(&*meta, &*region, bounds, sb.epoch)?,
        health: Health::since(sb),
        strips: strips_of(sb),
    };
    Ok(Ctx::new(meta, region, read_only, parts))
}

/// Empty allocators for the data area of `sb`: pairs of mirrored pages for
/// metadata when it keeps replicas.
pub(crate) fn allocator_of(sb: &Superblock) -> PageAllocator {
    let shards = sb.shards as usize;
    if fixed_mirror_pages(sb) == 0 {
        PageAllocator::new(sb.data_start, sb.data_end, shards)
    } else {
        PageAllocator::mirrored(sb.data_start, sb.data_end, shards, sb.dead_zone_pages)
    }
}

/// Reads the allocator state a clean unmount left in the recovery chain.
pub(crate) fn load_saved_state(ctx: &Ctx, sb: &Superblock) -> Result<()> {
    // The recovery inode, or its replica's when the primary is damaged.
    let copies = std::iter::once(RECOVERY_INODE_OFF)
        .chain(ctx.bounds().replica(RECOVERY_INODE_OFF))
        .collect::<Vec<_>>();
    let mut blob = Err(corrupt!(AllocatorState, "no saved allocator state"));
    for off in copies {
        blob = saved_blob(ctx, off);
        if blob.is_ok() {
            break;
        }
    }
    let blob = blob?;
    let hdr: AllocStateHeader = decode(&blob)?;
    let body = &blob[size_of::<AllocStateHeader>()..];
    // Every count is checked against the bytes actually read before it is
    // used: the header sits outside the body's checksum.
    let kept_bytes = u64::from(hdr.kept_items) * size_of::<SavedKept>() as u64;
    let counts_fit = hdr
        .page_ranges
        .checked_add(hdr.ino_ranges)
        .and_then(|n| n.checked_mul(16))
        .and_then(|n| n.checked_add(kept_bytes))
        .is_some_and(|n| n == body.len() as u64);
    // The older format saved no manifests: with snapshots, only the scan
    // can rebuild them.
    let manifests_saved = hdr.magic == ALLOC_STATE_MAGIC || ctx.snapshots().newest().is_none();
    if !manifests_saved || hdr.mount_count != sb.mount_count || !counts_fit || crc32c::crc32c(body) != hdr.csum {
        return Err(corrupt!(AllocatorState, "saved allocator state is damaged or stale"));
    }
    let (body, kept) = body.split_at(body.len() - kept_bytes as usize);
    let kept: Vec<SavedKept> = kept
        .chunks_exact(size_of::<SavedKept>())
        .map(decode)
        .collect::<Result<_>>()?;
    ctx.snapshots()
        .import_manifests(&kept, sb.data_start..sb.data_end, |ino| ctx.tables().locate(ino).ok())?;
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
    let mut prev_end = first;
    for &(p, n) in pages {
        // Saved in ascending order, disjoint: anything else is damage.
        if n == 0 || p < prev_end || p.checked_add(n).is_none_or(|e| e > last) {
            return Err(corrupt!(
                AllocatorState,
                "saved free range {p}+{n} is outside the data area or out of order"
            ));
        }
        prev_end = p + n;
    }
    ctx.tables().import_free(inos)?;
    for &(p, n) in pages {
        ctx.alloc().add_free(p << PAGE_SHIFT, n);
    }
    Ok(())
}

/// The saved-state blob named by the recovery inode record at `off`.
fn saved_blob(ctx: &Ctx, off: u64) -> Result<Vec<u8>> {
    let mut rbuf = [0u8; INODE_SIZE as usize];
    ctx.data().read(off, &mut rbuf)?;
    let rec: Inode = decode(&rbuf)?;
    if rec.state != INODE_LIVE {
        return Err(corrupt!(AllocatorState, at = off, "no saved allocator state"));
    }
    let blob = read_chain(ctx.data(), ctx.bounds(), rec.log_head, rec.log_tail)?;
    let hdr: AllocStateHeader = decode(&blob)?;
    if hdr.magic != ALLOC_STATE_MAGIC && hdr.magic != ALLOC_STATE_MAGIC_V1 {
        return Err(corrupt!(
            AllocatorState,
            at = off,
            "saved allocator state has a bad magic"
        ));
    }
    Ok(blob)
}

/// Reads `len` bytes stored in a chain of pages (4088 payload bytes each).
/// `len` comes from the media: it is checked against the chain before
/// anything is allocated for it.
fn read_chain(r: &dyn Region, bounds: Bounds, head: u64, len: u64) -> Result<Vec<u8>> {
    let pages = crate::log::chain_pages(r, bounds, head, false)?;
    if len.div_ceil(LOG_NEXT_OFF) > pages.len() as u64 || len < size_of::<AllocStateHeader>() as u64 {
        return Err(corrupt!(
            AllocatorState,
            at = head,
            "saved allocator state claims {len} bytes in a chain of {} pages",
            pages.len()
        ));
    }
    let mut out = vec![0u8; len as usize];
    for (p, part) in pages.iter().zip(out.chunks_mut(LOG_NEXT_OFF as usize)) {
        r.read(*p, part)?;
    }
    Ok(out)
}

/// Clean unmount (NOVA §4.7): save the allocators to the recovery chain,
/// then mark the superblock clean (primary, then replica: R4). Every write
/// is done, so no data-write intent is left (Fortis §4.6): the
/// RELAXED bit goes with the same superblock update.
pub(crate) fn save_clean(ctx: &Ctx, sb: &mut Superblock) -> Result<()> {
    save_state(ctx, sb)?;
    ctx.health().stamp(sb);
    sb.state = STATE_CLEAN;
    sb.features_incompat &= !FEATURE_INCOMPAT_RELAXED;
    write_superblock(ctx.region(), sb)
}

/// Writes the allocators to the recovery chain and makes them persistent.
pub(crate) fn save_state(ctx: &Ctx, sb: &Superblock) -> Result<()> {
    let r = ctx.region();
    let pages = ctx.alloc().export();
    let inos = ctx.tables().export_free();
    let kept = ctx.snapshots().export_manifests();
    let kept_items =
        u32::try_from(kept.len()).map_err(|_| corrupt!(SnapshotManifest, "too many manifest items to save"))?;
    let mut body = Vec::with_capacity((pages.len() + inos.len()) * 16 + kept.len() * size_of::<SavedKept>());
    for &(s, n) in pages.iter().chain(&inos) {
        body.extend_from_slice(&s.to_le_bytes());
        body.extend_from_slice(&n.to_le_bytes());
    }
    for k in &kept {
        body.extend_from_slice(k.as_bytes());
    }
    let hdr = AllocStateHeader {
        magic: ALLOC_STATE_MAGIC,
        page_ranges: pages.len() as u64,
        ino_ranges: inos.len() as u64,
        mount_count: sb.mount_count,
        csum: crc32c::crc32c(&body),
        kept_items,
    };
    let mut blob = hdr.as_bytes().to_vec();
    blob.extend_from_slice(&body);
    // The chain lives in pages the saved state lists as free: they are
    // free again as soon as the next mount has read them.
    let npages = (blob.len() as u64).div_ceil(LOG_NEXT_OFF);
    let extents = ctx.alloc().alloc(npages, Budget::Critical)?;
    let chain: Vec<u64> = extents
        .iter()
        .flat_map(|e| (0..e.npages).map(move |i| e.off + i * PAGE_SIZE))
        .collect();
    // Plain pages, no mirrors: a damaged chain only costs a scan.
    let d = ctx.data();
    for (i, (&p, part)) in chain.iter().zip(blob.chunks(LOG_NEXT_OFF as usize)).enumerate() {
        d.write(p, part)?;
        d.store_u64(p + LOG_NEXT_OFF, chain.get(i + 1).copied().unwrap_or(0))?;
        d.flush(p, PAGE_SIZE)?;
    }
    let rec = Inode {
        state: INODE_LIVE,
        log_head: chain[0],
        log_tail: blob.len() as u64,
        ..Inode::default()
    };
    r.write(RECOVERY_INODE_OFF, rec.as_bytes())?;
    r.flush(RECOVERY_INODE_OFF, INODE_SIZE)?;
    r.fence(); // R1: the saved state is persistent before the superblock says clean.
    Ok(())
}

struct ScanResult {
    live: u64,
    orphans: u64,
    shards: Vec<ShardReport>,
}

/// Rebuilds both allocators from the live inodes (NOVA §4.7, "Recovery after
/// a failure"): one thread per shard; orphans (live, no links) are freed
/// when `reclaim` is set.
fn scan(ctx: &Ctx, reclaim: bool) -> Result<ScanResult> {
    let shards = ctx.tables().shard_count() as usize;
    let per_shard: Vec<Result<ShardScan>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..shards)
            .map(|shard| s.spawn(move || scan_shard(ctx, shard)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(corrupt!(Other, "scan thread panicked")))
            })
            .collect()
    });
    let bounds = ctx.bounds();
    let mut used = UsedPages::new(bounds.data_start >> PAGE_SHIFT, bounds.data_end >> PAGE_SHIFT);
    used.mark_all(
        ctx.tables()
            .all_chunks()
            .iter()
            .flat_map(|&c| (0..CHUNK_PAGES).flat_map(move |i| bounds.copies(c + i * PAGE_SIZE)))
            .chain(ctx.snapshots().log_pages().into_iter().flat_map(|p| bounds.copies(p)))
            .map(|p| p >> PAGE_SHIFT),
    );
    let mut result = ScanResult {
        live: 0,
        orphans: 0,
        shards: Vec::with_capacity(shards),
    };
    let mut resynced = 0;
    let mut orphans = Vec::new();
    let mut unkept = Vec::new();
    let mut resealed = Vec::new();
    if reclaim {
        resynced += sync(ctx.data(), bounds, RESERVED_INODES_OFF, PAGE_SIZE, true)?;
    }
    for sc in per_shard {
        let sc = sc?;
        used.mark_all(sc.used);
        result.live += sc.live;
        result.shards.push(sc.report);
        resynced += sc.resynced;
        for ino in sc.free_inos {
            ctx.tables().release(ino);
        }
        orphans.extend(sc.orphans);
        unkept.extend(sc.unkept);
        resealed.extend(sc.resealed);
    }
    // An orphan a snapshot may still see is kept, not freed (Fortis §3.2).
    let (kept_orphans, orphans): (Vec<_>, Vec<_>) = orphans
        .into_iter()
        .partition(|(_, _, st)| ctx.snapshots().newest().is_some_and(|n| st.born <= n));
    if !reclaim {
        // A read-only mount leaves orphans in place, pages and all.
        for (_, _, st) in &orphans {
            used.mark_all(st.pages(ctx.bounds()).into_iter().map(|p| p >> PAGE_SHIFT));
        }
    }
    for (_, _, st) in &kept_orphans {
        used.mark_all(st.pages(ctx.bounds()).into_iter().map(|p| p >> PAGE_SHIFT));
    }
    if used.twice() > 0 {
        tracing::error!(pages = used.twice(), "pages referenced twice; run novafs fsck");
    }
    for (page, pages) in used.free_runs() {
        ctx.alloc().add_free(page << PAGE_SHIFT, pages);
    }
    if resynced > 0 {
        // After a crash the two copies may differ (`replica`): the primary
        // was kept. Durable before anything relies on the replicas.
        ctx.data().fence();
        tracing::info!(
            pages = resynced,
            "replicas rewritten from their primaries after a crash"
        );
    }
    result.orphans = (orphans.len() + kept_orphans.len()) as u64;
    if reclaim {
        let ended = orphans.iter().map(|&(ino, off, _)| (ino, off)).chain(unkept);
        for (ino, off) in ended {
            // The last link went away while the file was open (NOVA keeps
            // such inodes alive until release), and the process is gone
            // now; or a kept inode outlived the snapshots that needed it.
            // Its pages were left out of `used`, so they are free already.
            ctx.region().commit_u64(off + INODE_STATE_OFF, INODE_FREE)?; // R5
            ctx.tables().release(ino);
        }
        for st in resealed {
            protect_resealed(ctx, st)?;
        }
        for (ino, off, st) in kept_orphans {
            let ending = ctx.ending(&st)?;
            let _ = ctx.journal().commit(ctx.region(), &ending.updates)?;
            if let Fate::Keep { snapshot } = ending.fate {
                let pages = st.pages(ctx.bounds()).len() as u64;
                ctx.snapshots().keep(
                    snapshot,
                    Kept::Inode {
                        birth: st.born,
                        ino,
                        off,
                        pages,
                    },
                );
            }
        }
    }
    Ok(result)
}

/// Pages a DAX mapping had writable when the crash came (caveat DAXor,
/// Fortis §3.4: their MMAP_UNPROTECT entries): resealed from what they
/// hold, or on a read-only mount trusted as they are (`Stale`). True when
/// there were any.
fn reseal_unprotected(ctx: &Ctx, st: &InodeState) -> Result<bool> {
    let Body::File(map) = &st.meta.body else {
        return Ok(false);
    };
    for &pg in st.meta.unprotected.keys() {
        if let Some(block) = map.lookup(pg) {
            if ctx.read_only() {
                ctx.stale().insert(block);
            } else {
                ctx.strips().reseal(ctx.data(), block)?;
            }
        }
    }
    Ok(!st.meta.unprotected.is_empty())
}

/// Commits that the resealed pages of inode `st` (as the scan loaded it)
/// are protected again (R1: its commit fences the resealed sums first).
fn protect_resealed(ctx: &Ctx, mut st: InodeState) -> Result<()> {
    let (Some(&first), Some(&last)) = (
        st.meta.unprotected.keys().next(),
        st.meta.unprotected.keys().next_back(),
    ) else {
        return Ok(());
    };
    let e = mmap_entry(ctx.epoch(), first, last - first + 1, MMAP_PROTECT);
    file::commit_file(ctx, &mut st, Budget::Critical, &[e])
}

/// Loads the inode whose verified record `rec` is at `off`, and, when
/// there are snapshots, lists in their manifests the data runs its log
/// superseded that one of them still needs (Fortis §3.2: `birth <= s <
/// death`), returning those runs' pages: in use, like the inode's own.
pub(crate) fn load_for_snapshots(ctx: &Ctx, off: u64, rec: &Inode) -> Result<(InodeState, Vec<u64>)> {
    let st = ctx.load_inode(off, rec)?;
    if ctx.snapshots().newest().is_none() {
        return Ok((st, Vec::new()));
    }
    let (_, superseded) = InodeState::load_superseded(ctx.region(), ctx.bounds(), off, rec)?;
    let mut pages = Vec::new();
    for g in superseded {
        if let Some(s) = ctx.snapshots().needing(g.birth, g.death) {
            ctx.snapshots().keep(
                s,
                Kept::Data {
                    birth: g.birth,
                    ext: g.ext,
                },
            );
            pages.extend((0..g.ext.npages).map(|i| g.ext.off + i * PAGE_SIZE));
        }
    }
    Ok((st, pages))
}

struct ShardScan {
    used: Vec<u64>,
    /// Live inodes whose unprotected pages the scan resealed: each gets
    /// its MMAP_PROTECT entry once the allocator is whole.
    resealed: Vec<InodeState>,
    free_inos: Vec<u64>,
    /// Kept inodes no snapshot needs any more: freed by the scan.
    unkept: Vec<(Ino, u64)>,
    orphans: Vec<(u64, u64, InodeState)>,
    live: u64,
    /// Replica pages rewritten from their primary.
    resynced: u64,
    report: ShardReport,
}

fn scan_shard(ctx: &Ctx, shard: usize) -> Result<ShardScan> {
    let t0 = Instant::now();
    let r = ctx.region();
    let mut out = ShardScan {
        used: Vec::new(),
        resealed: Vec::new(),
        free_inos: Vec::new(),
        unkept: Vec::new(),
        orphans: Vec::new(),
        live: 0,
        resynced: 0,
        report: ShardReport::default(),
    };
    ctx.tables().scan_shard(r, shard, |slot| {
        // The table's scan judged the slot from a whole copy of its
        // record: a damaged primary is copied back before the chunk's
        // replica is made equal to it below.
        if let Slot::Free { off, replica: true, .. }
        | Slot::Live { off, replica: true, .. }
        | Slot::Kept { off, replica: true, .. } = slot
        {
            ctx.repair(&[(off, INODE_SIZE)])?;
        }
        let slot = match slot {
            Slot::Free { ino, .. } => match unfree(ctx, ino, &mut out.used)? {
                Some(slot) => slot,
                None => return Ok(()), // lost: counted, its number kept
            },
            slot => slot,
        };
        let (ino, off, rec, kept) = match slot {
            Slot::Live { ino, off, rec, .. } => (ino, off, rec, None),
            Slot::Kept { ino, off, rec, .. } => {
                match ctx.snapshots().needing(rec.create_epoch, rec.delete_epoch) {
                    Some(s) => (ino, off, rec, Some(s)),
                    None => {
                        // No snapshot needs it any more (one was deleted
                        // before the crash let it be freed): free now.
                        out.unkept.push((ino, off));
                        return Ok(());
                    }
                }
            }
            Slot::Free { ino, .. } => {
                out.free_inos.push(ino);
                return Ok(());
            }
            Slot::ChunkDone => return Ok(()),
        };
        match load_for_snapshots(ctx, off, &rec) {
            Ok((st, superseded)) => {
                out.live += u64::from(kept.is_none());
                if kept.is_none() && st.meta.attr.kind == FileType::RegularFile {
                    out.report.file_bytes += st.meta.attr.size;
                }
                let resealed = reseal_unprotected(ctx, &st)?;
                // The log loaded, every damaged primary piece repaired: the
                // primary is whole, and the copy to keep (`replica`).
                if !ctx.read_only() {
                    for &p in st.log.pages() {
                        out.resynced += sync(ctx.data(), ctx.bounds(), p, PAGE_SIZE, true)?;
                    }
                }
                out.used.extend(superseded.iter().map(|p| p >> PAGE_SHIFT));
                if let Some(s) = kept {
                    let item = Kept::Inode {
                        birth: st.born,
                        ino,
                        off,
                        pages: st.pages(ctx.bounds()).len() as u64,
                    };
                    ctx.snapshots().keep(s, item);
                    out.used
                        .extend(st.pages(ctx.bounds()).into_iter().map(|p| p >> PAGE_SHIFT));
                } else if st.meta.attr.nlink == 0 && ino != ROOT_INO {
                    out.orphans.push((ino, off, st));
                } else {
                    out.used
                        .extend(st.pages(ctx.bounds()).into_iter().map(|p| p >> PAGE_SHIFT));
                    if resealed {
                        out.resealed.push(st);
                    }
                }
            }
            Err(e) => lost(ctx, ino, &rec, &e, &mut out.used),
        }
        Ok(())
    })?;
    if !ctx.read_only() {
        // Every record was judged whole above, damaged primaries repaired;
        // the chain's links too, before the primaries are copied over.
        let relinked = ctx.tables().restore_chain(ctx.data(), shard)?;
        ctx.health().repaired(relinked);
        for (_, chunk) in ctx.tables().slots(shard) {
            out.resynced += sync(ctx.data(), ctx.bounds(), chunk, CHUNK_SIZE, true)?;
        }
    }
    out.report.inodes = out.live;
    out.report.elapsed = t0.elapsed();
    Ok(out)
}

/// Inode `ino` (record `rec`) has no good copy: counted, and whatever
/// pages its log may own kept out of the allocator. The inode itself
/// reads as EIO, its names stay, and fsck reports it.
fn lost(ctx: &Ctx, ino: Ino, rec: &Inode, e: &Error, used: &mut Vec<u64>) {
    ctx.health().lost(ino, e);
    if let Ok(pages) = crate::log::chain_pages(ctx.region(), ctx.bounds(), rec.log_head, true) {
        let copies = pages.into_iter().flat_map(|p| ctx.bounds().copies(p));
        used.extend(copies.map(|p| p >> PAGE_SHIFT));
    }
}

/// A slot the table scan passed as free (its primary's state word says
/// neither live nor kept): free indeed when that word, or else the
/// replica's, says free. Any other value is damage, and the inode may be
/// live: a whole replica stands in (copied back on a writable mount);
/// without one the inode is lost ([`lost`], None) and its number stays
/// taken, or a new inode there would answer to the names of the lost one.
fn unfree(ctx: &Ctx, ino: Ino, used: &mut Vec<u64>) -> Result<Option<Slot>> {
    let off = ctx.tables().locate(ino)?;
    let state = |r: &dyn Region, at: u64| r.load_u64(at + INODE_STATE_OFF).ok();
    let replica = ctx.bounds().replica(off);
    if state(ctx.region(), off) == Some(INODE_FREE) || replica.is_some_and(|m| state(ctx.data(), m) == Some(INODE_FREE))
    {
        return Ok(Some(Slot::Free {
            ino,
            off,
            replica: false,
        }));
    }
    let found = match ctx.live_record(off, ino) {
        Ok(rec) => Ok(Slot::Live {
            ino,
            off,
            rec,
            replica: false,
        }),
        Err(_) => ctx.kept_record(off, ino).map(|rec| Slot::Kept {
            ino,
            off,
            rec,
            replica: false,
        }),
    };
    match found {
        Ok(slot) => Ok(Some(slot)),
        Err(e) => {
            let mut buf = [0u8; INODE_SIZE as usize];
            let rec: Inode = ctx
                .region()
                .read(off, &mut buf)
                .map_or(Inode::default(), |()| decode(&buf).unwrap_or_default());
            lost(ctx, ino, &rec, &e, used);
            Ok(None)
        }
    }
}

/// What `novafs info` shows about an image, read without mounting it.
#[cfg(feature = "tools")]
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Inspect {
    pub geometry: crate::geometry::Geometry,
    /// The primary superblock is damaged and the replica was used.
    pub primary_bad: bool,
    /// Free pages and free inode slots, known when the image is clean and
    /// its saved allocator state is whole; else why they are unknown.
    pub free: std::result::Result<(u64, u64), String>,
    /// Committed journal transactions awaiting replay.
    pub pending_journal: bool,
    /// Pages held back from ordinary writes so that a full file system can
    /// be emptied, and the part of them kept for snapshot deletion, GC,
    /// the clean unmount and `fsck --repair` (FORMAT.md "The reserve").
    pub reserve: (u64, u64),
    /// The snapshot list (the space each holds is known once mounted);
    /// else why it cannot be read.
    pub snapshots: std::result::Result<Vec<crate::snapshot::Snapshot>, String>,
}

/// Reads an image's superblock and, after a clean unmount, its saved
/// allocator state. Writes nothing, so it is safe on a mounted image.
#[cfg(feature = "tools")]
pub fn inspect(region: Arc<dyn Region>) -> Result<Inspect> {
    let r = &*region;
    let (sb, primary_bad) = read_superblock(r)?;
    let pending_journal = Journal::pending(&region, &sb)?;
    let free = if sb.state != STATE_CLEAN || pending_journal {
        Err("not cleanly unmounted".to_string())
    } else {
        open_ctx(region.clone(), &sb, true)
            .and_then(|ctx| {
                load_saved_state(&ctx, &sb)?;
                Ok((ctx.alloc().free_pages(), ctx.tables().free_count()))
            })
            .map_err(|e| format!("{e}; the next mount rebuilds it"))
    };
    let snapshots = open_ctx(region.clone(), &sb, true)
        .map(|ctx| ctx.snapshots().list())
        .map_err(|e| e.to_string());
    Ok(Inspect {
        reserve: crate::alloc::reserve_pages((sb.data_end - sb.data_start) / PAGE_SIZE, u64::from(sb.shards)),
        geometry: crate::geometry::Geometry::of(&sb),
        primary_bad,
        free,
        pending_journal,
        snapshots,
    })
}
