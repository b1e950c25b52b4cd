//! The shared context every operation works in ([`Ctx`]: the region, the
//! allocators, the journals and the inode tables, behind accessors) and
//! the two ways an operation commits (NOVA §4.2):
//!
//! - [`single`]: one inode's log append, committed by its tail store (R1,
//!   R5);
//! - [`Multi`]: appends to several inodes' logs plus in-place words, one
//!   journal transaction (R2).
//!
//! Both hand back proofs ([`Committed`], [`Durable`]) that only a commit
//! makes; publishing entries to the DRAM indexes ([`publish`]) and freeing
//! the pages they made unreferenced (R3) take them, so neither can run
//! before the commit it depends on. Log GC runs before either
//! (`gc::make_room`): thorough GC commits through the journal itself.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use pm::latency::{self, Part};
use pm::Region;

use crate::alloc::{Budget, Extent, Freed, PageAllocator, Reserved, Unreferenced};
use crate::consistency::Consistency;
use crate::error::{corrupt, Error, Result};
use crate::health::Health;
use crate::inode::InodeState;
use crate::itable::InodeTables;
use crate::itable::{record_seen_at, verified_record};
use crate::journal::{Check, Durable, Journal, Txn, Update};
use crate::layout::{
    decode, invalidated_word, Ino, Inode, ENTRY_EPOCH_OFF, INODE_CSUM_WORD_OFF, INODE_DELETE_EPOCH_OFF, INODE_FREE,
    INODE_HEAD_OFF, INODE_KEPT, INODE_LIVE, INODE_SIZE, INODE_STATE_OFF, INODE_TAIL_OFF,
};
use crate::layout::{Bounds, Strips};
use crate::log::{Committed, Entry, Pending};
use crate::replica::copy_back;
use crate::snapshot::{Kept, Snapshots};
use crate::strips::Stale;

pub(crate) struct Ctx {
    /// The region as metadata is written: through the mirroring view when
    /// the image keeps replicas (`replica`).
    region: Arc<dyn Region>,
    /// The region itself, for file data and other pages without a mirror.
    data: Arc<dyn Region>,
    /// Nothing may be written, not even a repair (read-only mount, fsck).
    read_only: bool,
    alloc: PageAllocator,
    tables: InodeTables,
    journal: Journal,
    bounds: Bounds,
    /// The snapshot list and the epoch new entries carry (Fortis §3).
    snapshots: Snapshots,
    /// What log GC reclaimed on this mount (NOVA Table 3).
    gc: GcCounters,
    /// What redundancy repaired and what was lost, since mkfs.
    health: Health,
    /// Where file data's checksums and parity live (Fortis §4.3).
    strips: Strips,
    /// Data pages DAX mappings leave unprotected (`mmap`).
    stale: Stale,
    /// The mount's consistency mode (NOVA-Fortis §4.6), as the mount
    /// chose it: strict until the mount says otherwise.
    consistency: Consistency,
}

/// What a context holds besides its regions, as mkfs and the mount build
/// it ([`Ctx::new`]).
pub(crate) struct Parts {
    pub alloc: PageAllocator,
    pub tables: InodeTables,
    pub journal: Journal,
    pub bounds: Bounds,
    pub snapshots: Snapshots,
    pub health: Health,
    pub strips: Strips,
}

/// Log GC activity of one mounted file system.
#[derive(Debug, Default)]
pub(crate) struct GcCounters {
    pub fast_pages: AtomicU64,
    pub thorough_pages: AtomicU64,
    pub thorough_runs: AtomicU64,
}

impl Ctx {
    /// A context writing metadata through `region` and everything else
    /// through `data`; with nothing reclaimed or mapped yet.
    pub(crate) fn new(region: Arc<dyn Region>, data: Arc<dyn Region>, read_only: bool, parts: Parts) -> Ctx {
        Ctx {
            region,
            data,
            read_only,
            alloc: parts.alloc,
            tables: parts.tables,
            journal: parts.journal,
            bounds: parts.bounds,
            snapshots: parts.snapshots,
            gc: GcCounters::default(),
            health: parts.health,
            strips: parts.strips,
            stale: Stale::default(),
            consistency: Consistency::Strict,
        }
    }

    /// The same context in `consistency` mode (the mount's choice, or the
    /// image's default).
    pub(crate) fn with_consistency(self, consistency: Consistency) -> Ctx {
        Ctx { consistency, ..self }
    }

    /// The mount's consistency mode, read-only or not.
    pub(crate) fn consistency(&self) -> Consistency {
        self.consistency
    }

    /// Writes go relaxed (NOVA-Fortis §4.6: file data overwritten in
    /// place): the mount is relaxed and read-write. The superblock's
    /// RELAXED bit is durable before any such write (`recovery::mount`).
    pub(crate) fn relaxed(&self) -> bool {
        self.consistency == Consistency::Relaxed && !self.read_only
    }

    /// The same context writing metadata through `region`, laid out as
    /// `bounds` says (the replicas were just rewritten and are trusted).
    pub(crate) fn with_meta(self, region: Arc<dyn Region>, bounds: Bounds) -> Ctx {
        Ctx { region, bounds, ..self }
    }

    /// The same context journaling whole blocks: the benchmarks'
    /// block-granular baseline (`journal::blocks`).
    pub(crate) fn with_block_journal(mut self) -> Ctx {
        self.journal.use_blocks();
        self
    }

    /// The same context collecting relaxed mode's in-place words in a
    /// running transaction of at most `limit` words (`journal::batch`).
    pub(crate) fn with_batch(mut self, limit: usize) -> Ctx {
        self.journal.use_batch(limit);
        self
    }

    /// Returns the log pages `extents` to the allocator (R3: `proof` says
    /// nothing references them). Relaxed mode's running transaction
    /// commits first: a word it changes may lie in one of them
    /// (`journal::batch`). Should that commit fail, the pages stay
    /// allocated until the next mount's scan finds them free.
    pub(crate) fn release_log(&self, proof: &impl Unreferenced, extents: &[Extent]) {
        let _span = latency::enter(Part::Free);
        if let Err(e) = self.journal.commit_running(self.region(), Journal::BEFORE_LOG_FREE) {
            tracing::error!(%e, "log pages kept: the running transaction did not commit");
            return;
        }
        self.alloc.release_meta(proof, extents);
    }

    /// Nothing may be written, not even a repair (read-only mount, fsck).
    pub(crate) fn read_only(&self) -> bool {
        self.read_only
    }

    pub(crate) fn alloc(&self) -> &PageAllocator {
        &self.alloc
    }

    pub(crate) fn tables(&self) -> &InodeTables {
        &self.tables
    }

    pub(crate) fn journal(&self) -> &Journal {
        &self.journal
    }

    pub(crate) fn bounds(&self) -> Bounds {
        self.bounds
    }

    /// The snapshot list and the epoch new entries carry (Fortis §3).
    pub(crate) fn snapshots(&self) -> &Snapshots {
        &self.snapshots
    }

    /// What log GC reclaimed on this mount (NOVA Table 3).
    pub(crate) fn gc(&self) -> &GcCounters {
        &self.gc
    }

    /// What redundancy repaired and what was lost, since mkfs.
    pub(crate) fn health(&self) -> &Health {
        &self.health
    }

    /// Where file data's checksums and parity live (Fortis §4.3).
    pub(crate) fn strips(&self) -> &Strips {
        &self.strips
    }

    /// Data pages DAX mappings leave unprotected (`mmap`).
    pub(crate) fn stale(&self) -> &Stale {
        &self.stale
    }

    /// The epoch new entries carry: stable while the operation holds the
    /// epoch gate (`snapshot`).
    pub(crate) fn epoch(&self) -> u64 {
        self.snapshots.epochs.current()
    }

    pub(crate) fn region(&self) -> &dyn Region {
        &*self.region
    }

    pub(crate) fn data(&self) -> &dyn Region {
        &*self.data
    }

    /// Reads `out.len()` bytes at `in_page` of data page `block`, each strip
    /// checked against its checksums and a bad one rebuilt from parity
    /// (Fortis §4.3; `strips`), written back unless the mount is read-only.
    pub(crate) fn read_block(&self, block: u64, in_page: usize, out: &mut [u8]) -> Result<()> {
        if self.stale.contains(block) {
            // Caveat DAXor (Fortis §3.4): a page mapped writable is read as
            // it is; its checksums come back when it is sealed.
            return Ok(latency::timed(Part::DataCopy, || {
                self.data().read(block + in_page as u64, out)
            })?);
        }
        let checked = self.strips.read(self.data(), block, in_page, out, !self.read_only)?;
        self.health.data_repaired(checked.repaired);
        Ok(())
    }

    /// Writes the whole new contents of the free page `block` with its
    /// checksums and parity: all durable with the commit's R1 fence.
    pub(crate) fn put_block(&self, block: u64, bytes: &[u8]) -> Result<()> {
        self.strips.write(self.data(), block, bytes)
    }

    /// The live record of inode `ino` at `off`, verified (Fortis §4.2): a
    /// primary that is not that live inode or fails its checksum gives way
    /// to a replica that is, and a writable mount copies the replica back.
    /// Only reached for an inode something names (a dentry, an open
    /// handle), so a replica that says live wins over a primary that says
    /// free: after a crash the recovery scan made the two agree, and
    /// nothing else frees a slot without freeing both copies.
    pub(crate) fn live_record(&self, off: u64, ino: Ino) -> Result<Inode> {
        self.record_in(off, ino, INODE_LIVE)
    }

    /// The record of inode `ino` at `off` kept for snapshots (Fortis
    /// §3.2), verified and repaired as [`Ctx::live_record`] does: reached
    /// only for an inode a manifest lists, whose slot nothing frees
    /// meanwhile (`scrub`), so a replica that says kept wins.
    pub(crate) fn kept_record(&self, off: u64, ino: Ino) -> Result<Inode> {
        self.record_in(off, ino, INODE_KEPT)
    }

    /// The record of inode `ino` at `off` in state `state`, from the
    /// primary or, when only it passes, the replica (copied back).
    fn record_in(&self, off: u64, ino: Ino, state: u64) -> Result<Inode> {
        let (rec, from_replica) = verified_record(self.region(), self.data(), self.bounds, off, ino, state)?;
        if from_replica {
            self.repair(&[(off, INODE_SIZE)])?;
        }
        Ok(rec)
    }

    /// The record of inode `ino` at `off` as snapshot `epoch` sees it
    /// (`itable::record_seen_at`; nothing is repaired).
    pub(crate) fn record_at(&self, off: u64, ino: Ino, epoch: u64) -> Result<Inode> {
        record_seen_at(self.region(), self.data(), self.bounds, off, ino, epoch)
    }

    /// Loads inode `rec` (at `off`) as snapshot `epoch` sees it (read-only:
    /// nothing is repaired).
    pub(crate) fn load_inode_at(&self, off: u64, rec: &Inode, epoch: u64) -> Result<InodeState> {
        InodeState::load_at(self.region(), self.bounds, off, rec, epoch)
    }

    /// Loads the inode whose (verified) record `rec` sits at `off`. Its
    /// log head and tail are outside the record's checksum: when the log
    /// does not load from the primary's words, the replica's are tried, and
    /// whatever the load read from replicas is copied back (writable).
    pub(crate) fn load_inode(&self, off: u64, rec: &Inode) -> Result<InodeState> {
        let err = match InodeState::load(self.region(), self.bounds, off, rec).and_then(|st| self.owned(st)) {
            Ok(st) => {
                self.repair(st.log.repairs())?;
                return Ok(st);
            }
            Err(e) => e,
        };
        let Some(m) = self.bounds.replica(off) else {
            return Err(err);
        };
        let mut buf = [0u8; INODE_SIZE as usize];
        self.data().read(m, &mut buf)?;
        let other: Inode = decode(&buf)?;
        if (other.log_head, other.log_tail) == (rec.log_head, rec.log_tail) || other.csum != other.compute_csum() {
            return Err(err);
        }
        let st = InodeState::load(self.region(), self.bounds, off, &other)
            .and_then(|st| self.owned(st))
            .map_err(|_| err)?;
        self.repair(&[(off, INODE_SIZE)])?;
        self.repair(st.log.repairs())?;
        Ok(st)
    }

    /// `st` once its log pages agree with the allocator: a page the
    /// allocator holds free cannot be this log's (a damaged link, or
    /// damaged saved state). Spare pages past the tail are dropped from
    /// there on; a free page holding committed entries fails the load.
    /// (While a scan rebuilds the allocator nothing is free yet, and every
    /// page passes.)
    fn owned(&self, mut st: InodeState) -> Result<InodeState> {
        let dropped = st.log.drop_spares_unless(|p| !self.alloc.is_free(p));
        if dropped > 0 {
            tracing::warn!(
                ino = st.meta.attr.ino,
                dropped,
                "spare log pages linked into free space; link ignored"
            );
        }
        if let Some(p) = st.log.pages().iter().find(|&&p| self.alloc.is_free(p)) {
            return Err(corrupt!(
                LogPage,
                at = *p,
                ino = st.meta.attr.ino,
                "log page {p:#x} of inode {} is free in the allocator",
                st.meta.attr.ino
            ));
        }
        Ok(st)
    }

    /// Frees the data pages a commit left unreferenced (R3: `proof`), but
    /// for those the newest snapshot still needs, which go to its manifest
    /// (Fortis §3.2): the pages born (their entry's epoch) at or before it.
    /// They die now, after every snapshot, so that rule is exact.
    pub(crate) fn release_data(&self, proof: &impl Unreferenced, freed: &Freed) -> Result<()> {
        if freed.runs().is_empty() {
            return Ok(());
        }
        let _span = latency::enter(Part::Free);
        let Some(newest) = self.snapshots.newest() else {
            self.alloc.release(proof, &freed.extents());
            return Ok(());
        };
        let mut free = Vec::new();
        for &(ext, entry) in freed.runs() {
            // The entry is still in its log: it was live until this commit.
            let birth = self.region().load_u64(entry + ENTRY_EPOCH_OFF)?;
            if birth <= newest {
                self.snapshots.keep(newest, Kept::Data { birth, ext });
            } else {
                free.push(ext);
            }
        }
        self.alloc.release(proof, &free);
        Ok(())
    }

    /// How the life of inode `st` ends, now that nothing references it:
    /// freed, or kept for the newest snapshot if it existed then (Fortis
    /// §3.2). Stable for the operation: snapshots are taken and deleted
    /// only with no operation in flight (`snapshot::Epochs`).
    pub(crate) fn ending(&self, st: &InodeState) -> Result<Ending> {
        let Some(snapshot) = self.snapshots.newest().filter(|&n| st.born <= n) else {
            return Ok(Ending {
                updates: vec![Update::word(st.off + INODE_STATE_OFF, INODE_FREE)],
                fate: Fate::Free,
            });
        };
        // The delete epoch is inside the record's checksum: both change,
        // with the state word, in the ending's transaction.
        let mut rec = self.live_record(st.off, st.meta.attr.ino)?;
        rec.delete_epoch = self.epoch();
        rec.csum = rec.compute_csum();
        Ok(Ending {
            updates: vec![
                Update::word(st.off + INODE_STATE_OFF, INODE_KEPT),
                Update::word(st.off + INODE_DELETE_EPOCH_OFF, rec.delete_epoch),
                Update::word(st.off + INODE_CSUM_WORD_OFF, u64::from(rec.csum)),
            ],
            fate: Fate::Keep { snapshot },
        })
    }

    /// Copies the replica over the damaged primary of each range a load
    /// read from the replica (Fortis §4.2), unless nothing may be written;
    /// counted in `health`.
    pub(crate) fn repair(&self, ranges: &[(u64, u64)]) -> Result<()> {
        let repaired = self.rewrite_primaries(ranges)?;
        for &(off, len) in ranges.iter().filter(|_| repaired > 0) {
            tracing::warn!(off, len, "metadata repaired from its replica");
        }
        self.health.repaired(repaired);
        Ok(())
    }

    /// Copies the replica over the primary of each range, unless nothing
    /// may be written; returns how many. Uncounted: [`Ctx::repair`] counts
    /// what is damage.
    fn rewrite_primaries(&self, ranges: &[(u64, u64)]) -> Result<u64> {
        if self.read_only || ranges.is_empty() {
            return Ok(0);
        }
        copy_back(self.data(), self.bounds, ranges)
    }
}

/// The end of an inode's life: the in-place updates its transaction
/// makes, and what becomes of its pages and slot once it is durable
/// (`cache::Cache::forget`).
pub(crate) struct Ending {
    pub updates: Vec<Update>,
    pub fate: Fate,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Its pages and slot go back to the allocators.
    Free,
    /// Kept whole, listed in snapshot `snapshot`'s manifest.
    Keep { snapshot: u64 },
}

/// A single-inode update: append `entries` to `st`'s log and commit them
/// with one tail store (R1, R5). Publish them with the proof ([`publish`]).
pub(crate) fn single(ctx: &Ctx, st: &mut InodeState, budget: Budget, entries: &[Entry]) -> Result<Committed> {
    let committed = st
        .log
        .append(ctx.region(), &ctx.alloc, budget, entries)
        .and_then(|p| st.log.commit(ctx.region(), st.off, p));
    if committed.is_err() {
        st.log.forget_unreached();
    }
    committed
}

/// [`single`], then [`publish`]: the whole of a single-inode update.
pub(crate) fn single_published(ctx: &Ctx, st: &mut InodeState, budget: Budget, entries: &[Entry]) -> Result<()> {
    single_kept(ctx, st, budget, entries, Reserved::empty(&ctx.alloc))
}

/// [`single_published`] for entries that refer to pages reserved for
/// them (`held`): the commit keeps those, a failure gives them back.
pub(crate) fn single_kept(
    ctx: &Ctx,
    st: &mut InodeState,
    budget: Budget,
    entries: &[Entry],
    held: Reserved<'_>,
) -> Result<()> {
    let proof = single(ctx, st, budget, entries)?;
    held.keep(&proof); // R1 made them persistent before the tail store (R5).
    publish(ctx, st, entries, &proof)
}

/// Publishes committed `entries` to `st`'s DRAM state and frees the data
/// pages they made unreferenced (R3: `proof` says the commit is durable).
pub(crate) fn publish(ctx: &Ctx, st: &mut InodeState, entries: &[Entry], proof: &Committed) -> Result<()> {
    let freed = latency::timed(Part::Index, || st.publish(ctx.bounds, entries, proof))?;
    ctx.release_data(proof, &freed)
}

/// A multi-inode commit being built: one journal transaction holding every
/// appended inode's new tail (and head), the words changed in place and
/// the checks of everything it publishes outside the ring (FORMAT.md,
/// "What a transaction publishes").
pub(crate) struct Multi<'c> {
    ctx: &'c Ctx,
    txn: Txn<'c>,
    updates: Vec<Update>,
}

impl<'c> Multi<'c> {
    /// Takes this thread's journal shard, before the appends: their
    /// flushes then share the transaction's R2 fence (journal::Journal::begin).
    pub(crate) fn begin(ctx: &'c Ctx) -> Multi<'c> {
        Multi {
            ctx,
            txn: ctx.journal.begin(),
            updates: Vec::with_capacity(8),
        }
    }

    /// Declares ranges written and flushed outside any log that the
    /// transaction publishes (a new inode's record).
    pub(crate) fn depends_on(&mut self, checks: &[Check]) {
        self.txn.depends_on(checks);
    }

    /// Appends `entries` to `st`'s log for this transaction. The append
    /// becomes `Committed` with the transaction's proof
    /// (`Pending::journaled`).
    pub(crate) fn append(&mut self, st: &mut InodeState, budget: Budget, entries: &[Entry]) -> Result<Pending<'c>> {
        let mut p = st.log.append(self.ctx.region(), &self.ctx.alloc, budget, entries)?;
        self.txn.depends_on(p.bind(self.txn.id()));
        if let Some(h) = p.new_head() {
            self.updates.push(Update::word(st.off + INODE_HEAD_OFF, h));
        }
        self.updates.push(Update::word(st.off + INODE_TAIL_OFF, p.tail()));
        Ok(p)
    }

    /// Invalidates, in place, the add entry that names `name` in directory
    /// `dir` (NOVA §4.6: a cancelled add can never reappear once the
    /// cancelling entry is collected), unless a snapshot may see the add
    /// (its epoch is the newest snapshot's or older): then it stays valid,
    /// for the snapshot's replay, and `gc` invalidates it before it next
    /// collects the log, which it does only once no snapshot covers it.
    /// Returns whether it invalidated. Call after every GC of `dir`: the
    /// address is taken now.
    pub(crate) fn cancel(&mut self, dir: &InodeState, name: &[u8]) -> Result<bool> {
        let d = dir.dir()?.get(name).ok_or(Error::NotFound)?;
        let word = self.ctx.region().load_u64(d.entry)?;
        let epoch = self.ctx.region().load_u64(d.entry + ENTRY_EPOCH_OFF)?;
        if self.ctx.snapshots.sees(epoch) {
            return Ok(false);
        }
        self.updates.push(Update::word(d.entry, invalidated_word(word)));
        Ok(true)
    }

    /// Adds in-place word updates (valid bits, checksum words).
    pub(crate) fn update(&mut self, updates: impl IntoIterator<Item = Update>) {
        self.updates.extend(updates);
    }

    /// Commits (journal/mod.rs steps 2–4) and returns the transaction's proof.
    pub(crate) fn commit(self) -> Result<Durable> {
        self.txn.commit(self.ctx.region(), &self.updates)
    }
}
