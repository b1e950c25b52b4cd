//! Scrubbing (NOVA-Fortis §4.2, §4.3): reads everything redundancy
//! protects and repairs what it can while the file system stays in use.
//! For every live inode: its record and log are loaded through their
//! replicas (repairing a damaged primary), its replicas are then rewritten
//! from the verified primaries, and every data page it maps is read strip
//! by strip against the checksums, a bad strip rebuilt from parity. Then
//! the metadata no live inode covers: the inode tables' heads, chunk
//! footers and free slots, and the reserved records of page 2 (the
//! superblock's two copies are `Fs::scrub`'s). What cannot be repaired is
//! reported (and counted as lost); nothing else is touched.
//!
//! Locking: an inode's write lock is held only while its replicas are
//! rewritten (a writer would otherwise race the copy); its data pages are
//! checked under the read lock, a batch at a time, so a page cannot be
//! freed and reused while it is checked and writers wait at most one batch.
//! A shard's free-slot lock is held while its table is checked, so no slot
//! is claimed or released and no chunk added meanwhile.

use std::time::{Duration, Instant};

use crate::cache::{alive, Cache};
use crate::commit::Ctx;
use crate::error::{Error, Result};
use crate::inode::{Body, Ino};
use crate::itable::Slot;
use crate::layout::{
    decode, ChunkFooter, Inode, CHUNK_FOOTER_OFF, INODES_PER_CHUNK, INODE_LIVE, INODE_SIZE, PAGE_SIZE, RESERVED_INODES,
    RESERVED_INODES_OFF,
};
use crate::replica::{readable, sync};
use zerocopy::IntoBytes;

/// How to scrub.
#[derive(Clone, Copy, Debug, Default)]
pub struct ScrubOptions {
    /// Most bytes of file data checked per second (None: as fast as it goes).
    pub rate: Option<u64>,
}

/// What a scrub found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScrubReport {
    pub inodes: u64,
    /// Data pages checked.
    pub pages: u64,
    /// Metadata ranges repaired from their replica while loading.
    pub metadata_repaired: u64,
    /// Replica pages rewritten from their (verified) primary.
    pub replicas_rewritten: u64,
    /// Data strips rebuilt and checksum copies rewritten.
    pub data_repaired: u64,
    /// Objects that could not be repaired, and why.
    pub damaged: Vec<(Ino, String)>,
    /// Stopped before the end because `progress` said so.
    pub stopped: bool,
}

/// Pages checked under one hold of an inode's read lock.
const BATCH: u64 = 64;

/// Scrubs every live inode; `progress(done, total)` counts inodes and
/// returns false to stop (the report says so).
pub fn run(ctx: &Ctx, cache: &Cache, opts: ScrubOptions, progress: &dyn Fn(u64, u64) -> bool) -> Result<ScrubReport> {
    let mut rep = ScrubReport::default();
    let before = ctx.health.counts();
    let total = ctx.tables.capacity() - ctx.tables.free_count();
    let start = Instant::now();
    let mut checked_bytes = 0u64;
    for shard in 0..ctx.tables.shard_count() as usize {
        let mut live = Vec::new();
        ctx.tables.scan_shard(ctx.region(), shard, |slot| {
            // A slot DRAM holds free is not an inode, whatever its
            // primary says (scribbled, it is scrubbed as a free slot).
            if let Slot::Live { ino, .. } = slot {
                if !ctx.tables.is_free(ino) {
                    live.push(ino);
                }
            }
            Ok(())
        })?;
        for ino in live {
            match scrub_inode(ctx, cache, ino, &mut rep, &mut |bytes| {
                checked_bytes += bytes;
                pace(opts.rate, start, checked_bytes);
            }) {
                Ok(()) | Err(Error::NotFound) => {} // freed meanwhile
                Err(e @ (Error::Corrupt(_) | Error::Pm(_))) => {
                    ctx.health.lost(ino, &e);
                    rep.damaged.push((ino, e.to_string()));
                }
                Err(e) => return Err(e),
            }
            rep.inodes += 1;
            if !progress(rep.inodes, total.max(rep.inodes)) {
                rep.stopped = true;
                break;
            }
        }
        if rep.stopped {
            break;
        }
    }
    if !rep.stopped && ctx.bounds.live_replicas() && !ctx.read_only {
        scrub_tables(ctx, &mut rep)?;
    }
    let after = ctx.health.counts();
    rep.metadata_repaired = after.repairs - before.repairs;
    rep.data_repaired = after.data_repairs - before.data_repairs;
    Ok(rep)
}

/// Sleeps as long as `done` bytes since `start` run ahead of `rate`.
fn pace(rate: Option<u64>, start: Instant, done: u64) {
    if let Some(rate) = rate.filter(|&r| r > 0) {
        let due = Duration::from_secs_f64(done as f64 / rate as f64);
        if let Some(ahead) = due.checked_sub(start.elapsed()) {
            std::thread::sleep(ahead);
        }
    }
}

fn scrub_inode(ctx: &Ctx, cache: &Cache, ino: Ino, rep: &mut ScrubReport, paced: &mut dyn FnMut(u64)) -> Result<()> {
    // Loading verifies the record and every committed entry, repairing a
    // damaged primary from its replica (`Ctx::live_record`, `load_inode`).
    let cell = cache.get(ctx, ino)?;
    if ctx.bounds.live_replicas() && !ctx.read_only {
        let st = cell.state.write();
        alive(&st)?;
        // The primaries are whole now: they are the copies to keep.
        for &p in st.log.pages() {
            rep.replicas_rewritten += sync(ctx.data(), ctx.bounds, p, PAGE_SIZE, true)?;
        }
        rep.replicas_rewritten += sync(ctx.data(), ctx.bounds, st.off, INODE_SIZE, true)?;
        ctx.data().fence(); // The rewritten replicas are durable before the lock goes.
    }
    let mut page = vec![0u8; PAGE_SIZE as usize];
    {
        // Extended attribute values in data pages (at most 16 a name).
        let st = cell.state.read();
        alive(&st)?;
        let mut checked_pages = 0;
        for block in st.meta.xattrs.blocks() {
            scrub_block(ctx, block, &mut page)?;
            checked_pages += 1;
        }
        drop(st);
        rep.pages += checked_pages;
        paced(checked_pages * PAGE_SIZE);
    }
    let mut from = 0u64;
    loop {
        let st = cell.state.read();
        alive(&st)?;
        let Body::File(map) = &st.meta.body else {
            return Ok(());
        };
        let mut next = map.next_mapped(from);
        let mut checked_pages = 0;
        while let Some(pg) = next.filter(|_| checked_pages < BATCH) {
            if let Some(block) = map.lookup(pg) {
                scrub_block(ctx, block, &mut page)?;
                checked_pages += 1;
            }
            next = map.next_mapped(pg + 1);
        }
        drop(st);
        rep.pages += checked_pages;
        paced(checked_pages * PAGE_SIZE);
        match next {
            Some(pg) => from = pg,
            None => return Ok(()),
        }
    }
}

/// Checks data page `block` against its checksums and parity, repairing
/// what it can (Fortis §4.3), counted in `health`.
fn scrub_block(ctx: &Ctx, block: u64, page: &mut [u8]) -> Result<()> {
    let checked = ctx.strips.scrub_page(ctx.data(), block, page, !ctx.read_only)?;
    ctx.health.data_repaired(checked.repaired);
    Ok(())
}

/// The inode tables' redundancy no live inode covers (Fortis §4.2). Each
/// shard's head and chunk footers are made to match, in both copies, the
/// chain DRAM holds. A free slot's record is kept from a copy that reads
/// as free, primary first. The reserved records of page 2 are kept from
/// the primary: the only one in use, the recovery record, is rewritten
/// whole at every clean unmount before it is read again.
fn scrub_tables(ctx: &Ctx, rep: &mut ScrubReport) -> Result<()> {
    for shard in 0..ctx.tables.shard_count() as usize {
        ctx.tables.with_quiet_shard(shard, |chunks, free| -> Result<()> {
            let head = chunks.first().copied().unwrap_or(0);
            restore(ctx, ctx.tables.head_off(shard), &head.to_le_bytes(), rep)?;
            for (i, &chunk) in chunks.iter().enumerate() {
                let next = chunks.get(i + 1).copied().unwrap_or(0);
                let footer = ChunkFooter::new(shard as u32, i as u32, next);
                restore(ctx, chunk + CHUNK_FOOTER_OFF, footer.as_bytes(), rep)?;
            }
            for &(first, n) in free {
                for local in first..first + n {
                    if let Some(chunk) = chunks.get((local / INODES_PER_CHUNK) as usize) {
                        free_slot(ctx, chunk + local % INODES_PER_CHUNK * INODE_SIZE, rep)?;
                    }
                }
            }
            Ok(())
        })?;
    }
    let reserved = sync(
        ctx.data(),
        ctx.bounds,
        RESERVED_INODES_OFF,
        RESERVED_INODES * INODE_SIZE,
        true,
    )?;
    rep.replicas_rewritten += reserved;
    Ok(())
}

/// Makes both copies of the metadata at `off` hold `want`.
fn restore(ctx: &Ctx, off: u64, want: &[u8], rep: &mut ScrubReport) -> Result<()> {
    let mut have = vec![0u8; want.len()];
    for (at, replica) in std::iter::once((off, false)).chain(ctx.bounds.replica(off).map(|m| (m, true))) {
        if !readable(ctx.data().read(at, &mut have))? || have != want {
            rewrite(ctx, at, want, replica, rep)?;
        }
    }
    Ok(())
}

/// The record of the free slot at `off`: a copy that reads as free is
/// copied over the other; when neither does, both are zeroed, as a new
/// chunk's slots are (DRAM holds the slot free: no inode lives there).
fn free_slot(ctx: &Ctx, off: u64, rep: &mut ScrubReport) -> Result<()> {
    let Some(m) = ctx.bounds.replica(off) else {
        return Ok(());
    };
    let copy = |at| -> Result<Option<[u8; INODE_SIZE as usize]>> {
        let mut b = [0u8; INODE_SIZE as usize];
        Ok(readable(ctx.data().read(at, &mut b))?.then_some(b))
    };
    let free = |b: &[u8; INODE_SIZE as usize]| decode::<Inode>(b).is_ok_and(|rec| rec.state != INODE_LIVE);
    let (primary, replica) = (copy(off)?, copy(m)?);
    match (primary.filter(free), replica.filter(free)) {
        (Some(p), _) if replica == Some(p) => {}
        (Some(p), _) => rewrite(ctx, m, &p, true, rep)?,
        (None, Some(r)) => rewrite(ctx, off, &r, false, rep)?,
        (None, None) => {
            rewrite(ctx, off, Inode::default().as_bytes(), false, rep)?;
            rewrite(ctx, m, Inode::default().as_bytes(), true, rep)?;
        }
    }
    Ok(())
}

/// Writes one copy of a piece of metadata, durable before anything else
/// is written (R4: a primary before its replica), and counts it: a
/// primary as a repair, a replica as rewritten.
fn rewrite(ctx: &Ctx, at: u64, bytes: &[u8], replica: bool, rep: &mut ScrubReport) -> Result<()> {
    ctx.data().write(at, bytes)?;
    ctx.data().persist(at, bytes.len() as u64)?;
    if replica {
        rep.replicas_rewritten += 1;
    } else {
        ctx.health.repaired(1);
    }
    Ok(())
}
