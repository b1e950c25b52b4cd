//! Journal accounting: what each commit writes and how many ordered
//! persist points it issues, the quantities FGM §IV-B compares ("journal
//! writes" per operation) and whose cost FGM §II-C says grows with the
//! bytes written. A commit adds up its [`Cost`] as it issues its writes,
//! flushes and fences, then adds it to its shard's [`Counters`] once, after
//! its last fence: a locked add then has no write-back to wait for.
//!
//! Counted: what the journal's own commit path issues through the metadata
//! view — records and TxnInfo (or the block-granular baseline's blocks),
//! updates applied in place, the checkpoint store. Not counted: the log
//! entries and records a transaction checks (their owners write and flush
//! them; the commit's first fence only orders them), the second copy of a
//! mirrored range (the view writes it back beside the primary, Fortis
//! §4.2), recovery's replays, and an inode-table chunk's link, which
//! commits as a single word without the journal.

use std::sync::atomic::{AtomicU64, Ordering};

use pm::{Region, CACHELINE};

use crate::error::Result;

/// The journal's work since the mount, summed over its shards
/// (`Fs::journal_stats`). Flushes count cache lines written back
/// as issued, also on an eADR region, where the write-back is skipped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// Transactions committed through the journal.
    pub txns: u64,
    /// Single aligned words committed without the ring (R5).
    pub words: u64,
    /// Bytes written to the journal: records and TxnInfo (FGM §III-B);
    /// in the block-granular baseline, its descriptor, block copies and
    /// commit block.
    pub journal_bytes: u64,
    /// Bytes of metadata updated in place (home locations).
    pub applied_bytes: u64,
    /// Bytes the checkpoints wrote: each one 8-byte head store.
    pub checkpoint_bytes: u64,
    /// Cache lines written back.
    pub flushes: u64,
    /// Store fences: the ordered persist points.
    pub fences: u64,
}

impl JournalStats {
    /// What happened between `earlier` and this snapshot.
    pub fn since(&self, earlier: &JournalStats) -> JournalStats {
        JournalStats {
            txns: self.txns.saturating_sub(earlier.txns),
            words: self.words.saturating_sub(earlier.words),
            journal_bytes: self.journal_bytes.saturating_sub(earlier.journal_bytes),
            applied_bytes: self.applied_bytes.saturating_sub(earlier.applied_bytes),
            checkpoint_bytes: self.checkpoint_bytes.saturating_sub(earlier.checkpoint_bytes),
            flushes: self.flushes.saturating_sub(earlier.flushes),
            fences: self.fences.saturating_sub(earlier.fences),
        }
    }

    /// Every byte the commits wrote: journal, in place and checkpoints.
    pub fn bytes(&self) -> u64 {
        self.journal_bytes + self.applied_bytes + self.checkpoint_bytes
    }
}

/// One commit's work, added up as it is issued.
#[derive(Debug, Default)]
pub(crate) struct Cost {
    pub journal: u64,
    pub applied: u64,
    pub checkpoint: u64,
    pub flushes: u64,
    pub fences: u64,
}

/// Cache lines overlapping `[off, off + len)`.
fn lines(off: u64, len: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    (off + len - 1) / CACHELINE - off / CACHELINE + 1
}

impl Cost {
    /// Writes back `[off, off + len)`, counting its lines.
    pub(crate) fn flush(&mut self, region: &dyn Region, off: u64, len: u64) -> Result<()> {
        region.flush(off, len)?;
        self.flushes += lines(off, len);
        Ok(())
    }

    /// A store fence, counted.
    pub(crate) fn fence(&mut self, region: &dyn Region) {
        region.fence();
        self.fences += 1;
    }
}

/// One shard's totals. Aligned apart so that shards on different CPUs do
/// not share a line.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Counters {
    txns: AtomicU64,
    words: AtomicU64,
    journal: AtomicU64,
    applied: AtomicU64,
    checkpoint: AtomicU64,
    flushes: AtomicU64,
    fences: AtomicU64,
}

impl Counters {
    /// Adds a commit: a transaction, or a single word when `!txn`.
    pub(crate) fn add(&self, cost: &Cost, txn: bool) {
        let add = |c: &AtomicU64, n: u64| {
            if n != 0 {
                c.fetch_add(n, Ordering::Relaxed);
            }
        };
        add(if txn { &self.txns } else { &self.words }, 1);
        add(&self.journal, cost.journal);
        add(&self.applied, cost.applied);
        add(&self.checkpoint, cost.checkpoint);
        add(&self.flushes, cost.flushes);
        add(&self.fences, cost.fences);
    }
}

/// The totals of `shards`.
pub(crate) fn sum(shards: &[Counters]) -> JournalStats {
    let mut s = JournalStats::default();
    for c in shards {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        s.txns += get(&c.txns);
        s.words += get(&c.words);
        s.journal_bytes += get(&c.journal);
        s.applied_bytes += get(&c.applied);
        s.checkpoint_bytes += get(&c.checkpoint);
        s.flushes += get(&c.flushes);
        s.fences += get(&c.fences);
    }
    s
}
