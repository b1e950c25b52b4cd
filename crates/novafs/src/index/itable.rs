//! The per-shard inode tables (NOVA §4.1): linked 2 MiB chunks of 128-byte
//! records, the free slots of each shard in DRAM, and the one scan of the
//! live records that recovery and fsck share.

use crate::lock::{Mutex, Rank, RwLock};
use pm::latency::{self, Part};
use pm::Region;
use zerocopy::IntoBytes;

use crate::alloc::{current_shard, Budget, PageAllocator, RangeSet};
use crate::error::{corrupt, Error, Result};
use crate::journal::{commit_word, Update};
use crate::layout::Bounds;
use crate::layout::{
    decode, ChunkFooter, Ino, Inode, Superblock, CHUNK_FOOTER_OFF, CHUNK_MAGIC, CHUNK_NEXT_OFF, CHUNK_PAGES,
    CHUNK_SIZE, INODES_PER_CHUNK, INODE_FREE, INODE_KEPT, INODE_LIVE, INODE_SIZE, PAGE_SIZE,
};
use crate::replica::readable;

/// Proof that an inode never became live, so its pages are referenced by
/// nothing durable (R3): made only by [`InodeTables::release_unborn`].
#[derive(Debug)]
pub(crate) struct Unborn(());

impl crate::alloc::sealed::Commit for Unborn {}
impl crate::alloc::Unreferenced for Unborn {}

/// One shard's inode table: its chunk chain and free slots.
struct TableShard {
    chunks: RwLock<Vec<u64>>,
    free: Mutex<RangeSet>,
}

impl TableShard {
    fn new(chunks: Vec<u64>) -> TableShard {
        TableShard {
            chunks: RwLock::new(Rank::InodeChunks, chunks),
            free: Mutex::new(Rank::InodeSlots, RangeSet::default()),
        }
    }
}

/// The per-shard inode tables (NOVA §4.1). Inode number `ino` lives in
/// shard `(ino - 1) % shards` at local index `(ino - 1) / shards`.
pub struct InodeTables {
    shards: Vec<TableShard>,
    heads_off: u64,
    /// Where the records' replicas are, for the scan's checked reads.
    bounds: Bounds,
}

impl InodeTables {
    /// Walks every shard's chunk chain. Free slots are filled in later, from
    /// the saved allocator state or a scan.
    pub fn load(region: &dyn Region, sb: &Superblock, bounds: Bounds) -> Result<InodeTables> {
        let mut shards = Vec::new();
        for s in 0..u64::from(sb.shards) {
            // A damaged head or chunk footer: the replicas' (Fortis §4.2).
            let chunks = chunk_chain(region, sb, bounds, s, false).or_else(|e| {
                if bounds.replica(sb.inode_heads_off).is_some() {
                    tracing::warn!(shard = s, error = %e, "inode table read from its replica");
                    chunk_chain(region, sb, bounds, s, true).map_err(|_| e)
                } else {
                    Err(e)
                }
            })?;
            shards.push(TableShard::new(chunks));
        }
        Ok(InodeTables {
            shards,
            heads_off: sb.inode_heads_off,
            bounds,
        })
    }

    /// Fresh tables for mkfs: one zeroed chunk per shard.
    pub(crate) fn create(
        region: &dyn Region,
        alloc: &PageAllocator,
        shards: u32,
        bounds: Bounds,
    ) -> Result<InodeTables> {
        let t = InodeTables {
            shards: (0..shards).map(|_| TableShard::new(Vec::new())).collect(),
            heads_off: crate::layout::INODE_HEADS_OFF,
            bounds,
        };
        for s in 0..shards as usize {
            // The first chunks are the file system's own: the reserve is for later.
            t.grow(region, alloc, s, &mut t.shards[s].free.lock(), Budget::Critical)?;
        }
        Ok(t)
    }

    pub(crate) fn shard_count(&self) -> u64 {
        self.shards.len() as u64
    }

    fn split(&self, ino: Ino) -> Option<(usize, u64)> {
        let n = ino.checked_sub(1)?;
        Some(((n % self.shard_count()) as usize, n / self.shard_count()))
    }

    /// Inode number of slot `local` in `shard`.
    pub(crate) fn ino_of(&self, shard: usize, local: u64) -> Ino {
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
    pub(crate) fn slots(&self, shard: usize) -> Vec<(u64, u64)> {
        let chunks = self.shards[shard].chunks.read();
        chunks
            .iter()
            .enumerate()
            .map(|(i, &c)| (i as u64 * INODES_PER_CHUNK, c))
            .collect()
    }

    /// Every chunk of every shard (for the recovery scan and fsck).
    pub(crate) fn all_chunks(&self) -> Vec<u64> {
        self.shards.iter().flat_map(|s| s.chunks.read().clone()).collect()
    }

    /// Frees the slot of an inode whose create failed before the
    /// transaction that would have made it live: the proof that nothing
    /// durable reaches what its own commits wrote (its record's state word
    /// stayed free, and recovery reads the logs of live slots only).
    pub(crate) fn release_unborn(&self, ino: Ino) -> Unborn {
        self.release(ino);
        Unborn(())
    }

    /// Marks a slot free (recovery, fsck, unmount state).
    pub(crate) fn release(&self, ino: Ino) {
        if let Some((shard, local)) = self.split(ino) {
            if self.shards[shard].free.lock().insert(local, 1).is_err() {
                tracing::error!(ino, "inode slot freed twice");
                debug_assert!(false, "inode slot {ino} freed twice");
            }
        }
    }

    /// Claims a free slot in this thread's shard, growing the table by a
    /// 2 MiB chunk when it is full. Returns the number and record offset.
    pub(crate) fn claim(&self, region: &dyn Region, alloc: &PageAllocator) -> Result<(Ino, u64)> {
        self.claim_in(region, alloc, current_shard(self.shards.len()))
    }

    /// Claims the lowest free slot of `shard`.
    pub(crate) fn claim_in(&self, region: &dyn Region, alloc: &PageAllocator, shard: usize) -> Result<(Ino, u64)> {
        let _span = latency::enter(Part::Alloc);
        let t = &self.shards[shard];
        let mut free = t.free.lock();
        if free.total() == 0 {
            self.grow(region, alloc, shard, &mut free, Budget::Normal)?;
        }
        let (local, _) = free.take_first(1).ok_or(Error::NoSpace)?;
        drop(free);
        let ino = self.ino_of(shard, local);
        Ok((ino, self.locate(ino)?))
    }

    /// Claims the slot of inode number `ino` itself (a tree restored with
    /// its numbers: `tune`), growing its shard's table up to it; Exists
    /// when the slot is taken.
    pub(crate) fn claim_exact(&self, region: &dyn Region, alloc: &PageAllocator, ino: Ino) -> Result<u64> {
        let _span = latency::enter(Part::Alloc);
        let (shard, local) = self.split(ino).ok_or(Error::Invalid("inode number 0"))?;
        let mut free = self.shards[shard].free.lock();
        while (self.shards[shard].chunks.read().len() as u64) * INODES_PER_CHUNK <= local {
            self.grow(region, alloc, shard, &mut free, Budget::Normal)?;
        }
        if free.take_within(local, local + 1).is_empty() {
            return Err(Error::Exists);
        }
        drop(free);
        self.locate(ino)
    }

    fn grow(
        &self,
        region: &dyn Region,
        alloc: &PageAllocator,
        shard: usize,
        free: &mut RangeSet,
        budget: Budget,
    ) -> Result<()> {
        let t = &self.shards[shard];
        let index = t.chunks.read().len() as u64;
        // Dropped on an error below, the reservation gives the chunk back.
        let reserved = alloc.reserve_contiguous_meta(CHUNK_PAGES, budget)?;
        let chunk = reserved.meta_extents()[0].off;
        let footer = ChunkFooter::new(shard as u32, index as u32, 0);
        region.zero_nt(chunk, CHUNK_SIZE)?;
        region.write(chunk + CHUNK_FOOTER_OFF, footer.as_bytes())?;
        region.flush(chunk + CHUNK_FOOTER_OFF, INODE_SIZE)?;
        let link = match t.chunks.read().last() {
            Some(&last) => last + CHUNK_NEXT_OFF,
            None => self.head_off(shard),
        };
        // R1: the chunk is initialised (fenced) before the link; R5: the
        // link is one 8-byte store, which makes the chunk the table's.
        let linked = commit_word(region, &Update::word(link, chunk))?;
        reserved.keep(&linked);
        t.chunks.write().push(chunk);
        let _ = free.insert(index * INODES_PER_CHUNK, INODES_PER_CHUNK);
        Ok(())
    }

    /// Runs `f` with shard `shard`'s chunks and free slots (as `(first
    /// local index, count)` ranges) while no slot of it can be claimed or
    /// released and no chunk added (its free-slot lock is held): the
    /// records of its free slots and its chunk footers and head stay as
    /// they are meanwhile (scrub).
    pub(crate) fn with_quiet_shard<T>(&self, shard: usize, f: impl FnOnce(&[u64], &[(u64, u64)]) -> T) -> T {
        let t = &self.shards[shard];
        let free = t.free.lock();
        let chunks = t.chunks.read().clone();
        f(&chunks, &free.iter().collect::<Vec<_>>())
    }

    /// Whether inode number `ino`'s slot is free (or past the tables).
    pub(crate) fn is_free(&self, ino: Ino) -> bool {
        self.split(ino).is_none_or(|(shard, local)| {
            let t = &self.shards[shard];
            local >= t.chunks.read().len() as u64 * INODES_PER_CHUNK || t.free.lock().contains(local)
        })
    }

    /// Rewrites the primary copies of shard `shard`'s head and chunk
    /// footers where they differ from the chain DRAM holds (read from the
    /// replicas when the primaries were damaged: [`InodeTables::load`]),
    /// so that a resync copying primaries over replicas keeps the chain.
    /// Returns how many it rewrote.
    pub(crate) fn restore_chain(&self, data: &dyn Region, shard: usize) -> Result<u64> {
        let chunks = self.shards[shard].chunks.read().clone();
        let mut want = vec![(
            self.head_off(shard),
            chunks.first().copied().unwrap_or(0).to_le_bytes().to_vec(),
        )];
        for (i, &c) in chunks.iter().enumerate() {
            let next = chunks.get(i + 1).copied().unwrap_or(0);
            let footer = ChunkFooter::new(shard as u32, i as u32, next);
            want.push((c + CHUNK_FOOTER_OFF, footer.as_bytes().to_vec()));
        }
        let mut rewritten = 0;
        for (off, bytes) in want {
            let mut have = vec![0u8; bytes.len()];
            if !readable(data.read(off, &mut have))? || have != bytes {
                tracing::warn!(off, shard, "inode table link repaired from the chain its replica holds");
                data.write(off, &bytes)?;
                data.flush(off, bytes.len() as u64)?;
                rewritten += 1;
            }
        }
        if rewritten > 0 {
            data.fence(); // The repaired links are durable before a resync copies them.
        }
        Ok(rewritten)
    }

    /// Where shard `shard`'s head (its first chunk) is kept.
    pub(crate) fn head_off(&self, shard: usize) -> u64 {
        self.heads_off + 8 * shard as u64
    }

    /// Free slots as `(shard << 48 | local, len)` for the saved state.
    pub(crate) fn export_free(&self) -> Vec<(u64, u64)> {
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
    pub(crate) fn import_free(&self, ranges: &[(u64, u64)]) -> Result<()> {
        for &(key, n) in ranges {
            let (s, l) = ((key >> 48) as usize, key & ((1 << 48) - 1));
            let t = self
                .shards
                .get(s)
                .ok_or_else(|| corrupt!(AllocatorState, "saved inode range for missing shard {s}"))?;
            let slots = t.chunks.read().len() as u64 * INODES_PER_CHUNK;
            if n == 0 || l.checked_add(n).is_none_or(|end| end > slots) {
                return Err(corrupt!(
                    AllocatorState,
                    "saved inode range {l}+{n} of shard {s} is past its table"
                ));
            }
            t.free
                .lock()
                .insert(l, n)
                .map_err(|_| corrupt!(AllocatorState, "saved inode ranges overlap"))?;
        }
        Ok(())
    }

    /// Inode slots in all tables, used or not.
    pub(crate) fn capacity(&self) -> u64 {
        self.shards
            .iter()
            .map(|t| t.chunks.read().len() as u64 * INODES_PER_CHUNK)
            .sum()
    }

    /// Free inode slots in all tables.
    pub(crate) fn free_count(&self) -> u64 {
        self.shards.iter().map(|t| t.free.lock().total()).sum()
    }
}

/// The chunks of shard `s`'s table, following its head and chunk links
/// in the primary copies or, with `replica`, in the replicas.
fn chunk_chain(region: &dyn Region, sb: &Superblock, bounds: Bounds, s: u64, replica: bool) -> Result<Vec<u64>> {
    let at = |off: u64| {
        if replica {
            bounds.replica(off).unwrap_or(off)
        } else {
            off
        }
    };
    let mut chunks = Vec::new();
    let mut c = region.load_u64(at(sb.inode_heads_off + 8 * s))?;
    while c != 0 {
        let last_page = c.saturating_add((CHUNK_PAGES - 1) * PAGE_SIZE);
        let placed = bounds.is_extent(c, CHUNK_PAGES) && bounds.is_meta_page(c) && bounds.is_meta_page(last_page);
        if !placed || chunks.len() as u64 > bounds.max_pages() / CHUNK_PAGES {
            return Err(corrupt!(
                InodeTable,
                at = c,
                "inode table chunk pointer {c:#x} of shard {s} is invalid"
            ));
        }
        let mut buf = [0u8; INODE_SIZE as usize];
        region.read(at(c + CHUNK_FOOTER_OFF), &mut buf)?;
        let f: ChunkFooter = decode(&buf)?;
        // The footer names its place, so a scribbled link cannot splice
        // another shard's chunk (or an earlier one) in.
        if f.magic != CHUNK_MAGIC || u64::from(f.shard) != s || f.index as usize != chunks.len() {
            return Err(corrupt!(
                InodeTable,
                at = c,
                "inode table chunk at {c:#x} of shard {s} has a bad footer"
            ));
        }
        chunks.push(c);
        c = f.next;
    }
    if chunks.is_empty() {
        return Err(corrupt!(InodeTable, "inode table of shard {s} is missing"));
    }
    Ok(chunks)
}

/// One slot of an inode table, as [`InodeTables::scan_shard`] finds it.
/// `replica` says the slot was judged by its replica record, the primary
/// being damaged: a writable mount copies the replica back.
pub(crate) enum Slot {
    Free {
        ino: Ino,
        off: u64,
        replica: bool,
    },
    Live {
        ino: Ino,
        off: u64,
        rec: Inode,
        replica: bool,
    },
    /// Deleted but kept for snapshots (`INODE_KEPT`).
    Kept {
        ino: Ino,
        off: u64,
        rec: Inode,
        replica: bool,
    },
    /// Every slot of one more chunk has been visited (for progress).
    ChunkDone,
}

impl InodeTables {
    /// Visits every slot of `shard` in order, reading each chunk once: the
    /// scan recovery (NOVA §4.7), fsck and scrub share. Each slot is
    /// judged from a checked copy of its record ([`checked_record`]),
    /// never from unchecked bytes of the primary alone.
    pub(crate) fn scan_shard(
        &self,
        region: &dyn Region,
        shard: usize,
        mut visit: impl FnMut(Slot) -> Result<()>,
    ) -> Result<()> {
        let mut buf = vec![0u8; CHUNK_SIZE as usize];
        for (base, chunk) in self.slots(shard) {
            region.read(chunk, &mut buf)?;
            for slot in 0..INODES_PER_CHUNK {
                let ino = self.ino_of(shard, base + slot);
                let at = (slot * INODE_SIZE) as usize;
                let off = chunk + slot * INODE_SIZE;
                let (rec, replica) =
                    checked_record(region, self.bounds, off, decode(&buf[at..at + INODE_SIZE as usize])?)?;
                visit(match rec.state {
                    INODE_LIVE => Slot::Live { ino, off, rec, replica },
                    INODE_KEPT => Slot::Kept { ino, off, rec, replica },
                    _ => Slot::Free { ino, off, replica },
                })?;
            }
            visit(Slot::ChunkDone)?;
        }
        Ok(())
    }
}

/// The record at `off` as a scan must judge its slot (Fortis §4.2): the
/// primary `rec` when it is whole — a free state, or a live or kept one
/// that passes its checksum — else the replica's record when that one is
/// whole, with `true` (the primary is to be repaired from it). A state
/// word that is no state at all is damage, never a crash (R5: it changes
/// by one 8-byte store), so then the replica decides whatever it says;
/// a known state is kept, since after a crash between the two copies of
/// a state change the primary is the copy to keep (`replica`). When
/// neither copy is whole the primary is returned, for the load to fail.
pub(crate) fn checked_record(region: &dyn Region, bounds: Bounds, off: u64, rec: Inode) -> Result<(Inode, bool)> {
    let known = |r: &Inode| matches!(r.state, INODE_FREE | INODE_LIVE | INODE_KEPT);
    let whole = |r: &Inode| r.state == INODE_FREE || (known(r) && r.csum == r.compute_csum());
    if whole(&rec) {
        return Ok((rec, false));
    }
    let Some(m) = bounds.replica(off) else {
        return Ok((rec, false));
    };
    let mut buf = [0u8; INODE_SIZE as usize];
    if !readable(region.read(m, &mut buf))? {
        return Ok((rec, false));
    }
    let other: Inode = decode(&buf)?;
    if whole(&other) && (!known(&rec) || other.state == rec.state) {
        tracing::warn!(off, "inode record judged by its replica");
        return Ok((other, true));
    }
    Ok((rec, false))
}

/// Reads the record at `off` and checks that it is a live inode `ino`.
pub fn read_live_record(region: &dyn Region, off: u64, ino: Ino) -> Result<Inode> {
    read_record(region, off, ino, INODE_LIVE)
}

/// Reads the record at `off` and checks that it is inode `ino` in state
/// `state` (`INODE_LIVE` or `INODE_KEPT`); NotFound in another state, and
/// Corrupt in none: a state word no commit writes is damage, and the
/// inode it held may be live (a name still leads to it), so it must read
/// as lost (EIO), not as never having existed.
pub(crate) fn read_record(region: &dyn Region, off: u64, ino: Ino, state: u64) -> Result<Inode> {
    let mut buf = [0u8; INODE_SIZE as usize];
    region.read(off, &mut buf)?;
    let rec: Inode = decode(&buf)?;
    if !matches!(rec.state, INODE_FREE | INODE_LIVE | INODE_KEPT) {
        return Err(corrupt!(
            InodeRecord,
            at = off,
            ino = ino,
            "inode {ino}'s record has a damaged state word {:#x}",
            rec.state
        ));
    }
    if rec.state != state {
        return Err(Error::NotFound);
    }
    if rec.ino != ino {
        return Err(corrupt!(
            InodeRecord,
            at = off,
            ino = ino,
            "inode slot for {ino} holds inode {}",
            rec.ino
        ));
    }
    Ok(rec)
}

/// The record of inode `ino` at `off` in state `state`, verified (Fortis
/// §4.2): from the primary, or from the replica when the primary is not
/// that inode or fails its checksum and the replica passes, with `true`
/// (the caller copies it back). Neither passing, the primary's answer.
pub(crate) fn verified_record(
    region: &dyn Region,
    data: &dyn Region,
    bounds: Bounds,
    off: u64,
    ino: Ino,
    state: u64,
) -> Result<(Inode, bool)> {
    let primary = read_record(region, off, ino, state);
    let Some(m) = bounds.replica(off) else {
        return primary.map(|rec| (rec, false));
    };
    match primary {
        Ok(rec) if rec.csum == rec.compute_csum() => Ok((rec, false)),
        damaged => match read_record(data, m, ino, state) {
            Ok(rec) if rec.csum == rec.compute_csum() => Ok((rec, true)),
            _ => damaged.map(|rec| (rec, false)),
        },
    }
}

/// The record of inode `ino` at `off` as snapshot `epoch` sees it:
/// live or kept, created at or before the snapshot and, if kept,
/// deleted after it; else NotFound. Read from the primary, or the
/// replica when the primary fails its checksum or has a state word no
/// commit writes (Corrupt when both do: a lost inode, not a free one).
pub(crate) fn record_seen_at(
    region: &dyn Region,
    data: &dyn Region,
    bounds: Bounds,
    off: u64,
    ino: Ino,
    epoch: u64,
) -> Result<Inode> {
    let read = |r: &dyn Region, at: u64| -> Result<Inode> {
        let mut buf = [0u8; INODE_SIZE as usize];
        r.read(at, &mut buf)?;
        decode(&buf)
    };
    let known = |rec: &Inode| matches!(rec.state, INODE_FREE | INODE_LIVE | INODE_KEPT);
    let mut rec = read(region, off)?;
    if rec.csum != rec.compute_csum() || !known(&rec) {
        if let Some(m) = bounds.replica(off) {
            let other = read(data, m)?;
            if known(&other) {
                rec = other;
            }
        }
    }
    let seen = match rec.state {
        INODE_LIVE => rec.create_epoch <= epoch,
        INODE_KEPT => rec.create_epoch <= epoch && epoch < rec.delete_epoch,
        INODE_FREE => false,
        bad => {
            return Err(corrupt!(
                InodeRecord,
                ino = ino,
                "inode {ino}'s record has a damaged state word {bad:#x}"
            ))
        }
    };
    if !seen || rec.ino != ino {
        return Err(Error::NotFound);
    }
    Ok(rec)
}
