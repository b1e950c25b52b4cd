//! Batched commits, an option of relaxed mode (fine-grained journaling
//! §III-C1: a *running* transaction collects the modified metadata, and a
//! *committing* one writes it to the journal when the TxnInfo fills or a
//! timer fires).
//!
//! What a relaxed-mode setattr changes in place — the newest log entry's
//! words (`ops::relaxed`) — joins the running transaction instead of committing
//! at once: one record per word, a word changed again replacing its value.
//! The transaction commits (one journal transaction: ring, TxnInfo,
//! applied in place, checkpointed: the protocol of `journal`) when it
//! holds `limit` words (the TxnInfo's capacity), when the mount's timer
//! fires, at fsync, at a snapshot, at a clean unmount, and before any log
//! page is freed (a word it changes may lie in that page: it must reach
//! its page before the page can be reused).
//!
//! Until then the words are only in DRAM: the inode's state there has
//! them, and a change that reads an entry back from the media lays them
//! over what it reads ([`Batch::read`]); an overwrite in place, which
//! changes its entry on the media at once, commits them first. A crash
//! loses them — the in-place setattrs since the last commit — and nothing
//! else: each word is whole on the media in its old or its new value, and
//! so is every entry.
//!
//! Each commit of the running transaction counts its [`Cause`] (FGM
//! Fig. 14: how many commits a full TxnInfo triggered, how many the timer),
//! read back through [`Journal::batch_commits`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use pm::Region;

use crate::error::Result;
use crate::lock::{Mutex, Rank};

use super::{Durable, Journal, Update};

/// The running transaction.
#[derive(Debug, Default)]
struct Running {
    /// Word address → its new value, in address order.
    words: BTreeMap<u64, u64>,
}

/// Why the running transaction commits. Callers outside the journal name
/// a cause through [`Journal`]'s constants (this module is private).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cause {
    /// It holds its limit of words (the TxnInfo is full).
    Full,
    /// The mount's commit timer fired.
    Timer,
    /// An fsync (of any file): the whole transaction, as ext4 commits.
    Fsync,
    /// A snapshot is taken.
    Snapshot,
    /// Log pages are about to be freed.
    LogFree,
    /// A clean unmount.
    Unmount,
    /// An overwrite in place is about to change an entry the transaction
    /// holds words of (`ops::relaxed`).
    Overwrite,
}

/// How many causes there are.
const CAUSES: usize = Cause::Overwrite as usize + 1;

/// The running transaction's commits since the mount, by cause; only
/// commits with something in them count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Commits {
    /// The words a transaction holds before it commits (the limit asked
    /// for, at most what the ring holds).
    pub(crate) limit: usize,
    pub(crate) full: u64,
    pub(crate) timer: u64,
    pub(crate) fsync: u64,
    pub(crate) snapshot: u64,
    pub(crate) log_free: u64,
    pub(crate) unmount: u64,
    pub(crate) overwrite: u64,
}

/// A mount's batching of relaxed-mode metadata changes.
#[derive(Debug)]
pub(crate) struct Batch {
    limit: usize,
    running: Mutex<Running>,
    /// Commits per [`Cause`], in its order.
    commits: [AtomicU64; CAUSES],
}

impl Batch {
    pub(super) fn new(limit: usize) -> Batch {
        Batch {
            limit: limit.max(1),
            running: Mutex::new(Rank::JournalBatch, Running::default()),
            commits: Default::default(),
        }
    }

    /// Words the running transaction holds: what a crash now would lose
    /// (`Fs::running_words`, for the crash checker).
    pub(crate) fn words(&self) -> usize {
        self.running.lock().words.len()
    }

    /// Reads `buf.len()` bytes at `addr` as the running transaction has
    /// them: the media's, with its words laid over. Under its lock, which
    /// a commit holds from its first store to its last, so no commit comes
    /// between the read and the overlay (one would leave the media's new
    /// words under nothing). Returns whether any word of it waits in the
    /// transaction.
    pub(crate) fn read(&self, region: &dyn Region, addr: u64, buf: &mut [u8]) -> Result<bool> {
        let running = self.running.lock();
        region.read(addr, buf)?;
        let end = addr + buf.len() as u64;
        let mut held = false;
        for (&w, v) in running.words.range(addr..end) {
            let at = (w - addr) as usize;
            if let Some(dst) = buf.get_mut(at..at + 8) {
                dst.copy_from_slice(&v.to_le_bytes());
                held = true;
            }
        }
        Ok(held)
    }
}

impl Journal {
    /// The causes of [`Journal::commit_running`], for its callers.
    pub(crate) const ON_TIMER: Cause = Cause::Timer;
    pub(crate) const AT_FSYNC: Cause = Cause::Fsync;
    pub(crate) const AT_SNAPSHOT: Cause = Cause::Snapshot;
    pub(crate) const BEFORE_LOG_FREE: Cause = Cause::LogFree;
    pub(crate) const AT_UNMOUNT: Cause = Cause::Unmount;
    pub(crate) const BEFORE_OVERWRITE: Cause = Cause::Overwrite;

    /// Adds `updates` (aligned words) to the running transaction, or
    /// commits them at once without batching. The transaction never holds
    /// more than its limit (its TxnInfo's capacity, which the ring holds):
    /// it commits first when `updates` would take it past the limit, and
    /// again once it is full.
    pub(crate) fn batch_or_commit(&self, region: &dyn Region, updates: &[Update]) -> Result<()> {
        let Some(batch) = &self.batch else {
            let _durable: Durable = self.commit(region, updates)?;
            return Ok(());
        };
        let mut running = batch.running.lock();
        let new = updates.iter().filter(|u| !running.words.contains_key(&u.addr)).count();
        if running.words.len() + new > batch.limit {
            self.commit_held(region, batch, &mut running, Cause::Full)?;
        }
        for u in updates {
            debug_assert!(
                u.addr.is_multiple_of(8) && u.bytes.len() == 8,
                "a batched update is one word"
            );
            let v = u64::from_le_bytes(u.bytes[..8].try_into().unwrap_or_default());
            running.words.insert(u.addr, v);
        }
        if running.words.len() >= batch.limit {
            self.commit_held(region, batch, &mut running, Cause::Full)?;
        }
        Ok(())
    }

    /// Commits the running transaction, if there is one with anything in
    /// it, counting `cause`: durable when this returns.
    pub(crate) fn commit_running(&self, region: &dyn Region, cause: Cause) -> Result<()> {
        let Some(batch) = &self.batch else {
            return Ok(());
        };
        // Held through the commit: two commits of one word must reach the
        // media in the order they were taken.
        let mut running = batch.running.lock();
        self.commit_held(region, batch, &mut running, cause)
    }

    /// Commits `running` (`batch`'s, locked by the caller), if anything is
    /// in it, counting `cause`.
    fn commit_held(&self, region: &dyn Region, batch: &Batch, running: &mut Running, cause: Cause) -> Result<()> {
        if running.words.is_empty() {
            return Ok(());
        }
        let updates: Vec<Update> = running.words.iter().map(|(&a, &v)| Update::word(a, v)).collect();
        let _durable: Durable = self.commit(region, &updates)?; // R2
        running.words.clear();
        batch.commits[cause as usize].fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The running transaction's commits since the mount, when it batches.
    pub(crate) fn batch_commits(&self) -> Option<Commits> {
        let batch = self.batch.as_ref()?;
        let n = |cause: Cause| batch.commits[cause as usize].load(Ordering::Relaxed);
        Some(Commits {
            limit: batch.limit,
            full: n(Cause::Full),
            timer: n(Cause::Timer),
            fsync: n(Cause::Fsync),
            snapshot: n(Cause::Snapshot),
            log_free: n(Cause::LogFree),
            unmount: n(Cause::Unmount),
            overwrite: n(Cause::Overwrite),
        })
    }

    /// The running transaction, when the mount batches.
    pub(crate) fn batch(&self) -> Option<&Batch> {
        self.batch.as_ref()
    }
}
