//! Batched commits, an option of relaxed mode (fine-grained journaling
//! §III-C1: a *running* transaction collects the modified metadata, and a
//! *committing* one writes it to the journal when the TxnInfo fills or a
//! timer fires).
//!
//! What relaxed mode changes in place — the newest log entry's words
//! (`ops::relaxed`) — joins the running transaction instead of committing
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
//! over what it reads ([`Batch::overlay`]). A crash loses them — the
//! mtime of in-place overwrites and in-place setattrs since the last
//! commit — and nothing else: each word is whole on the media in its old
//! or its new value, and so is every entry.

use std::collections::BTreeMap;

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

/// A mount's batching of relaxed-mode metadata changes.
#[derive(Debug)]
pub(crate) struct Batch {
    limit: usize,
    running: Mutex<Running>,
}

impl Batch {
    pub(super) fn new(limit: usize) -> Batch {
        Batch {
            limit: limit.max(1),
            running: Mutex::new(Rank::JournalBatch, Running::default()),
        }
    }

    /// Words the running transaction holds: what a crash now would lose
    /// (`Fs::running_words`, for the crash checker).
    pub(crate) fn words(&self) -> usize {
        self.running.lock().words.len()
    }

    /// Lays the running transaction's words over `buf`, read from `addr`.
    pub(crate) fn overlay(&self, addr: u64, buf: &mut [u8]) {
        let end = addr + buf.len() as u64;
        for (&w, v) in self.running.lock().words.range(addr..end) {
            let at = (w - addr) as usize;
            if let Some(dst) = buf.get_mut(at..at + 8) {
                dst.copy_from_slice(&v.to_le_bytes());
            }
        }
    }
}

impl Journal {
    /// Adds `updates` (aligned words) to the running transaction, or
    /// commits them at once without batching; commits the running
    /// transaction when it is full.
    pub(crate) fn batch_or_commit(&self, region: &dyn Region, updates: &[Update]) -> Result<()> {
        let Some(batch) = &self.batch else {
            let _durable: Durable = self.commit(region, updates)?;
            return Ok(());
        };
        let full = {
            let mut running = batch.running.lock();
            for u in updates {
                debug_assert!(
                    u.addr.is_multiple_of(8) && u.bytes.len() == 8,
                    "a batched update is one word"
                );
                let v = u64::from_le_bytes(u.bytes[..8].try_into().unwrap_or_default());
                running.words.insert(u.addr, v);
            }
            running.words.len() >= batch.limit
        };
        if full {
            self.commit_running(region)?;
        }
        Ok(())
    }

    /// Commits the running transaction, if there is one with anything in
    /// it: durable when this returns.
    pub(crate) fn commit_running(&self, region: &dyn Region) -> Result<()> {
        let Some(batch) = &self.batch else {
            return Ok(());
        };
        // Held through the commit: two commits of one word must reach the
        // media in the order they were taken.
        let mut running = batch.running.lock();
        if running.words.is_empty() {
            return Ok(());
        }
        let updates: Vec<Update> = running.words.iter().map(|(&a, &v)| Update::word(a, v)).collect();
        let _durable: Durable = self.commit(region, &updates)?; // R2
        running.words.clear();
        Ok(())
    }

    /// The running transaction, when the mount batches.
    pub(crate) fn batch(&self) -> Option<&Batch> {
        self.batch.as_ref()
    }
}
