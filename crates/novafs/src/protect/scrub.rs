//! Scrubbing (NOVA-Fortis §4.2, §4.3): reads everything redundancy
//! protects and repairs what it can while the file system stays in use.
//! For every live inode: its record and log are loaded through their
//! replicas (repairing a damaged primary), its replicas are then rewritten
//! from the verified primaries, and every data page it maps is read strip
//! by strip against the checksums, a bad strip rebuilt from parity. Then
//! what only snapshots keep (Fortis §3.2), listed in their manifests: kept
//! inodes, scrubbed as live ones are, and kept data runs, page by page as
//! a live file's. Then the metadata no live inode covers: the inode
//! tables' heads, chunk footers and free slots, and the reserved records
//! of page 2 (the superblock's two copies are `Fs::scrub`'s). What cannot
//! be repaired is reported (and counted as lost) by path and, for file
//! data, byte range, as `zpool status -v` lists files with permanent
//! errors; nothing else is touched.
//!
//! Locking: an inode's write lock is held only while its replicas are
//! rewritten (a writer would otherwise race the copy); its data pages are
//! checked under the read lock, a batch at a time, so a page cannot be
//! freed and reused while it is checked and writers wait at most one batch.
//! Kept objects change no more, but the reclaimer frees those of a deleted
//! snapshot: each is pinned while it is checked, a batch at a time
//! ([`scrub_kept`]). A shard's free-slot lock is held while its table is
//! checked, so no slot is claimed or released and no chunk added meanwhile.

use std::ops::{Deref, Range};
use std::time::{Duration, Instant};

use crate::cache::{alive, is_loss, Cache};
use crate::commit::Ctx;
use crate::error::{corrupt, Error, Result};
use crate::inode::{Body, Ino, InodeState};
use crate::itable::Slot;
use crate::layout::{
    decode, ChunkFooter, Inode, CHUNK_FOOTER_OFF, INODES_PER_CHUNK, INODE_LIVE, INODE_SIZE, PAGE_SIZE, RESERVED_INODES,
    RESERVED_INODES_OFF,
};
use crate::paths::names;
use crate::replica::{readable, sync};
use crate::setters::setters;
use crate::snapshot::{Kept, KeptItems, KeptPin};
use zerocopy::IntoBytes;

/// How to scrub.
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub struct ScrubOptions {
    /// Most bytes of file data checked per second (None: as fast as it goes).
    pub rate: Option<u64>,
}

impl ScrubOptions {
    setters!(
        /// Sets the most bytes of file data checked per second (None: no limit).
        rate: Option<u64>,
    );
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
    /// Objects that could not be repaired.
    pub damaged: Vec<Damaged>,
    /// Stopped before the end because `progress` said so.
    pub stopped: bool,
}

/// One object scrub could not repair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damaged {
    /// Its inode; 0 for a data run only snapshots keep.
    pub ino: Ino,
    /// A path to it from the root and how many other names it has (hard
    /// links); None when no name leads to it (kept for snapshots, or
    /// below a lost directory).
    pub path: Option<(Vec<u8>, u64)>,
    /// The inode itself is lost (its record or log): every access to it
    /// answers EIO, and `fsck --repair` removes its names.
    pub lost: bool,
    /// Byte ranges of the file that read EIO until rewritten: data pages
    /// with more bad strips than parity rebuilds. The rest of it reads.
    pub ranges: Vec<Range<u64>>,
    /// What was found (the first damage, when there are several).
    pub why: String,
}

/// One line for people, e.g. "/d/f (inode 12, and 1 other name): bytes
/// 4096..8192 read EIO until rewritten (data page 0x…: …)".
impl std::fmt::Display for Damaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.path, self.ino) {
            (Some((path, others)), ino) => {
                write!(f, "{} (inode {ino}", String::from_utf8_lossy(path))?;
                match others {
                    0 => {}
                    1 => f.write_str(", and 1 other name")?,
                    n => write!(f, ", and {n} other names")?,
                }
                f.write_str(")")?;
            }
            (None, 0) => f.write_str("no inode")?,
            (None, ino) => write!(f, "inode {ino} (no name leads to it)")?,
        }
        if self.lost {
            return write!(f, ": lost, every access answers EIO ({})", self.why);
        }
        if self.ranges.is_empty() {
            return write!(f, ": {}", self.why);
        }
        f.write_str(": bytes ")?;
        for (i, r) in self.ranges.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{}..{}", r.start, r.end)?;
        }
        write!(f, " read EIO until rewritten ({})", self.why)
    }
}

/// Pages checked under one hold of an inode's read lock (or one pin of a
/// kept object).
const BATCH: u64 = 64;

/// Scrubs every live inode, then every object snapshots keep;
/// `progress(done, total)` counts inodes and returns false to stop (the
/// report says so).
pub(crate) fn run(
    ctx: &Ctx,
    cache: &Cache,
    opts: ScrubOptions,
    progress: &dyn Fn(u64, u64) -> bool,
) -> Result<ScrubReport> {
    let mut rep = ScrubReport::default();
    let before = ctx.health().counts();
    // Kept inodes hold slots too: they are counted in the total.
    let total = ctx.tables().capacity() - ctx.tables().free_count();
    let progress = |done: u64| progress(done, total.max(done));
    let mut pacer = Pacer {
        rate: opts.rate,
        start: Instant::now(),
        done: 0,
    };
    'shards: for shard in 0..ctx.tables().shard_count() as usize {
        let (mut live, mut unsure) = (Vec::new(), Vec::new());
        ctx.tables().scan_shard(ctx.region(), shard, |slot| {
            // A slot DRAM holds free is not an inode, whatever its
            // primary says (scribbled, it is scrubbed as a free slot).
            // One DRAM holds taken whose primary does not read as live
            // may be a live inode with a damaged state word: loaded too,
            // its replica repairs it, or it is reported lost (a slot a
            // create is filling, or a freed one the kernel still holds,
            // reads as free and is passed over). Kept slots are the
            // manifests' (`scrub_kept`).
            match slot {
                Slot::Live { ino, .. } if !ctx.tables().is_free(ino) => live.push(ino),
                Slot::Free { ino, .. } if !ctx.tables().is_free(ino) => unsure.push(ino),
                _ => {}
            }
            Ok(())
        })?;
        if !unsure.is_empty() {
            let kept = ctx.snapshots().kept_items();
            let kept = |i| {
                kept.items
                    .iter()
                    .any(|(_, k)| matches!(*k, Kept::Inode { ino, .. } if ino == i))
            };
            live.extend(unsure.drain(..).filter(|&i| !kept(i)));
        }
        for ino in live {
            let checked = scrub_inode(ctx, cache, ino, &mut rep, &mut pacer);
            settle(ctx, &mut rep, ino, checked, || None)?;
            rep.inodes += 1;
            if !progress(rep.inodes) {
                rep.stopped = true;
                break 'shards;
            }
        }
    }
    if !rep.stopped {
        scrub_kept(ctx, &mut rep, &mut pacer, &progress)?;
    }
    if !rep.stopped && ctx.bounds().live_replicas() && !ctx.read_only() {
        scrub_tables(ctx, &mut rep)?;
    }
    let named = names(ctx, cache, rep.damaged.iter().map(|d| d.ino).filter(|&i| i != 0));
    for d in &mut rep.damaged {
        d.path = named.get(&d.ino).cloned();
    }
    let after = ctx.health().counts();
    rep.metadata_repaired = after.repairs - before.repairs;
    rep.data_repaired = after.data_repairs - before.data_repairs;
    Ok(rep)
}

/// Keeps the file data checked under `rate` bytes per second.
struct Pacer {
    rate: Option<u64>,
    start: Instant,
    done: u64,
}

impl Pacer {
    /// `bytes` more were checked: sleeps as long as the total runs ahead
    /// of the rate.
    fn paced(&mut self, bytes: u64) {
        self.done += bytes;
        if let Some(rate) = self.rate.filter(|&r| r > 0) {
            let due = Duration::from_secs_f64(self.done as f64 / rate as f64);
            if let Some(ahead) = due.checked_sub(self.start.elapsed()) {
                std::thread::sleep(ahead);
            }
        }
    }
}

/// Data pages of one object that could not be repaired.
#[derive(Debug, Default)]
struct BadPages {
    /// File page numbers, ascending.
    pages: Vec<u64>,
    /// The file's size when they were found.
    size: u64,
    /// The first damage found (a file page's or an xattr value page's).
    first: Option<Error>,
}

impl BadPages {
    fn add(&mut self, page: Option<u64>, e: Error) {
        self.pages.extend(page);
        self.first.get_or_insert(e);
    }

    /// The pages as byte ranges of the file, runs merged, the last
    /// clipped to its size.
    fn ranges(&self) -> Vec<Range<u64>> {
        let mut out: Vec<Range<u64>> = Vec::new();
        for &pg in &self.pages {
            let (start, end) = (pg * PAGE_SIZE, (pg + 1) * PAGE_SIZE);
            // A page past the end (fallocate's KEEP_SIZE) is named whole.
            let r = start..if self.size > start { end.min(self.size) } else { end };
            match out.last_mut() {
                Some(last) if last.end == r.start => last.end = r.end,
                _ => out.push(r),
            }
        }
        out
    }
}

/// Counts what checking one object of inode `ino` came to: damage that
/// could not be repaired is reported (with `what` the object is, when it
/// is not the inode itself) and counted as lost; an object freed
/// meanwhile is passed over; any other error ends the scrub.
fn settle(
    ctx: &Ctx,
    rep: &mut ScrubReport,
    ino: Ino,
    checked: Result<BadPages>,
    what: impl FnOnce() -> Option<String>,
) -> Result<()> {
    let (bad, lost) = match checked {
        Ok(bad) => (bad, false),
        Err(Error::NotFound) => return Ok(()),
        Err(e) if is_loss(&e) => (
            BadPages {
                first: Some(e),
                ..BadPages::default()
            },
            true,
        ),
        Err(e) => return Err(e),
    };
    let Some(e) = &bad.first else {
        return Ok(());
    };
    ctx.health().lost(ino, e);
    let why = match what() {
        Some(what) => format!("{what}: {e}"),
        None => e.to_string(),
    };
    rep.damaged.push(Damaged {
        ino,
        path: None,
        lost,
        ranges: bad.ranges(),
        why,
    });
    Ok(())
}

fn scrub_inode(ctx: &Ctx, cache: &Cache, ino: Ino, rep: &mut ScrubReport, pacer: &mut Pacer) -> Result<BadPages> {
    // Loading verifies the record and every committed entry, repairing a
    // damaged primary from its replica (`Ctx::live_record`, `load_inode`).
    let cell = cache.get(ctx, ino)?;
    if rewrites_replicas(ctx) {
        let st = cell.state.write();
        alive(&st)?;
        rewrite_replicas(ctx, &st, rep)?;
    }
    scrub_pages(ctx, rep, pacer, || {
        let st = cell.state.read();
        alive(&st)?;
        Ok(st)
    })
}

/// Whether scrub rewrites replicas: the image keeps them current, and
/// the mount may write.
fn rewrites_replicas(ctx: &Ctx) -> bool {
    ctx.bounds().live_replicas() && !ctx.read_only()
}

/// Copies the primaries of inode `st`'s log pages and record, verified
/// whole by its load, over their replicas (only the holder of its write
/// lock, or of a kept inode's pin, may).
fn rewrite_replicas(ctx: &Ctx, st: &InodeState, rep: &mut ScrubReport) -> Result<()> {
    for &p in st.log.pages() {
        rep.replicas_rewritten += sync(ctx.data(), ctx.bounds(), p, PAGE_SIZE, true)?;
    }
    rep.replicas_rewritten += sync(ctx.data(), ctx.bounds(), st.off, INODE_SIZE, true)?;
    ctx.data().fence(); // The rewritten replicas are durable before the lock goes.
    Ok(())
}

/// Checks every data page of an inode, its extended attribute values'
/// and then its file's, a batch at a time, each under `hold()`: the
/// inode's state while none of its pages can be freed and reused. A page
/// past repair is noted and the rest still checked.
fn scrub_pages<G: Deref<Target = InodeState>>(
    ctx: &Ctx,
    rep: &mut ScrubReport,
    pacer: &mut Pacer,
    mut hold: impl FnMut() -> Result<G>,
) -> Result<BadPages> {
    let mut page = vec![0u8; PAGE_SIZE as usize];
    let mut bad = BadPages::default();
    let mut check = |block, pg: Option<u64>, bad: &mut BadPages| match scrub_block(ctx, block, &mut page) {
        Err(e) if is_loss(&e) => {
            let e = match pg {
                None => corrupt!(Xattr, "an extended attribute's value: {e}"),
                Some(_) => e,
            };
            bad.add(pg, e);
            Ok(())
        }
        done => done,
    };
    {
        // Extended attribute values in data pages (at most 16 a name).
        let st = hold()?;
        let mut checked_pages = 0;
        for block in st.meta.xattrs.blocks() {
            check(block, None, &mut bad)?;
            checked_pages += 1;
        }
        drop(st);
        rep.pages += checked_pages;
        pacer.paced(checked_pages * PAGE_SIZE);
    }
    let mut from = 0u64;
    loop {
        let st = hold()?;
        let Body::File(map) = &st.meta.body else {
            return Ok(bad);
        };
        bad.size = st.meta.attr.size;
        let mut next = map.next_mapped(from);
        let mut checked_pages = 0;
        while let Some(pg) = next.filter(|_| checked_pages < BATCH) {
            if let Some(block) = map.lookup(pg) {
                check(block, Some(pg), &mut bad)?;
                checked_pages += 1;
            }
            next = map.next_mapped(pg + 1);
        }
        drop(st);
        rep.pages += checked_pages;
        pacer.paced(checked_pages * PAGE_SIZE);
        match next {
            Some(pg) => from = pg,
            None => return Ok(bad),
        }
    }
}

/// What only snapshots keep (Fortis §3.2): every item of a copy of the
/// manifests taken now (items kept later wait for the next scrub), in
/// the order of their snapshots, each reported with the one it is kept
/// for.
///
/// The manifests' lock is not held meanwhile: writers take it to keep
/// what they overwrite. But the reclaimer frees the items of a snapshot
/// deleted meanwhile, whose pages and slots may then be reused (a page
/// "repaired" from a stale parity under a new writer would be damage
/// made). So each item is pinned (`Snapshots::pin`) while it is checked,
/// a batch of pages at a time: a pin is given only while some manifest
/// still lists the item, and a reclaimer waits for every pin before it
/// frees anything (`reclaim::free`); an item no longer listed is passed
/// over. The reclaimer waits at most one batch, as a writer does for a
/// live inode's read lock; deleting a snapshot (which runs with no
/// operation in flight) never waits for a scrub, nor does a writer.
///
/// Kept inodes are found here, through the manifests, not in the tables'
/// scan (`Slot::Kept`): the manifest item is what the pin holds, and a
/// kept inode whose primary state word is damaged is still found (its
/// record then read from the replica).
fn scrub_kept(ctx: &Ctx, rep: &mut ScrubReport, pacer: &mut Pacer, progress: &dyn Fn(u64) -> bool) -> Result<()> {
    let kept = ctx.snapshots().kept_items();
    let mut page = vec![0u8; PAGE_SIZE as usize];
    for (snapshot, item) in &kept.items {
        match *item {
            Kept::Data { ext, .. } => {
                let mut first = 0;
                while first < ext.npages {
                    let Some(pin) = ctx.snapshots().pin(&kept, item) else {
                        break; // freed since the copy
                    };
                    let n = BATCH.min(ext.npages - first);
                    for block in (first..first + n).map(|i| ext.off + i * PAGE_SIZE) {
                        // No inode maps it: reported as inode 0's, and
                        // the rest of the run is still checked.
                        let checked = match scrub_block(ctx, block, &mut page) {
                            Err(e) if is_loss(&e) => {
                                let mut bad = BadPages::default();
                                bad.add(None, e);
                                Ok(bad)
                            }
                            done => done.map(|()| BadPages::default()),
                        };
                        settle(ctx, rep, 0, checked, || {
                            Some(format!("data page {block:#x} kept for snapshot {snapshot}"))
                        })?;
                    }
                    drop(pin);
                    rep.pages += n;
                    pacer.paced(n * PAGE_SIZE);
                    first += n;
                }
            }
            Kept::Inode { ino, off, .. } => {
                let checked = scrub_kept_inode(ctx, &kept, item, ino, off, rep, pacer);
                settle(ctx, rep, ino, checked, || {
                    Some(format!("inode kept for snapshot {snapshot}"))
                })?;
                rep.inodes += 1;
            }
        }
        if !progress(rep.inodes) {
            rep.stopped = true;
            break;
        }
    }
    Ok(())
}

/// A kept inode's state, in place while the pin is held.
struct Pinned<'a> {
    _pin: KeptPin<'a>,
    st: &'a InodeState,
}

impl Deref for Pinned<'_> {
    type Target = InodeState;

    fn deref(&self) -> &InodeState {
        self.st
    }
}

/// Kept inode `ino` (record at `off`, manifest item `item`) as a live one
/// (`scrub_inode`): its record and log loaded through their replicas,
/// repairing a damaged primary, the replicas rewritten from the verified
/// primaries, its data pages checked. Nothing changes it any more and the
/// live file system caches no cell of it: the pin alone holds it.
fn scrub_kept_inode(
    ctx: &Ctx,
    kept: &KeptItems,
    item: &Kept,
    ino: Ino,
    off: u64,
    rep: &mut ScrubReport,
    pacer: &mut Pacer,
) -> Result<BadPages> {
    let pin = ctx.snapshots().pin(kept, item).ok_or(Error::NotFound)?;
    let st = ctx.load_inode(off, &ctx.kept_record(off, ino)?)?;
    if rewrites_replicas(ctx) {
        rewrite_replicas(ctx, &st, rep)?;
    }
    drop(pin); // Pins are not nested (`Snapshots::pin`).
    scrub_pages(ctx, rep, pacer, || {
        let pin = ctx.snapshots().pin(kept, item).ok_or(Error::NotFound)?;
        Ok(Pinned { _pin: pin, st: &st })
    })
}

/// Checks data page `block` against its checksums and parity, repairing
/// what it can (Fortis §4.3), counted in `health`.
fn scrub_block(ctx: &Ctx, block: u64, page: &mut [u8]) -> Result<()> {
    if ctx.stale().contains(block) {
        // Mapped writable: no checksums to hold it to (caveat DAXor).
        return Ok(());
    }
    let checked = ctx.strips().scrub_page(ctx.data(), block, page, !ctx.read_only())?;
    ctx.health().data_repaired(checked.repaired);
    Ok(())
}

/// The inode tables' redundancy no live inode covers (Fortis §4.2). Each
/// shard's head and chunk footers are made to match, in both copies, the
/// chain DRAM holds. A free slot's record is kept from a copy that reads
/// as free, primary first. The reserved records of page 2 are kept from
/// the primary: the only one in use, the recovery record, is rewritten
/// whole at every clean unmount before it is read again.
fn scrub_tables(ctx: &Ctx, rep: &mut ScrubReport) -> Result<()> {
    for shard in 0..ctx.tables().shard_count() as usize {
        ctx.tables().with_quiet_shard(shard, |chunks, free| -> Result<()> {
            let head = chunks.first().copied().unwrap_or(0);
            restore(ctx, ctx.tables().head_off(shard), &head.to_le_bytes(), rep)?;
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
        ctx.bounds(),
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
    for (at, replica) in std::iter::once((off, false)).chain(ctx.bounds().replica(off).map(|m| (m, true))) {
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
    let Some(m) = ctx.bounds().replica(off) else {
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
        ctx.health().repaired(1);
    }
    Ok(())
}
