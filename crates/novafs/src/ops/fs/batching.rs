//! Batched commits, an option of relaxed mode (fine-grained journaling
//! §III-C1; `journal::batch`): the mount's options, the thread that
//! commits the running transaction on a timer, and what made each commit
//! ([`Fs::batch_stats`], FGM Fig. 14).

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::commit::Ctx;
use crate::journal::Journal;

use super::Fs;

/// How a relaxed mount batches its in-place metadata changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batching {
    /// Words the running transaction holds before it commits (the
    /// TxnInfo's capacity, FGM §III-B: 24 journal bytes a word); at most
    /// what the journal's ring holds.
    pub words: usize,
    /// The commit timer (FGM §III-C1; ext4's default, 5 s).
    pub interval: Duration,
}

impl Default for Batching {
    fn default() -> Batching {
        Batching {
            words: 1024,
            interval: Duration::from_secs(5),
        }
    }
}

/// The running transaction's commits since the mount, by what triggered
/// them ([`Fs::batch_stats`]); a commit with nothing in it is none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// The words a transaction holds before it commits: [`Batching::words`],
    /// or what the journal's ring holds if that is less; 0 on a mount that
    /// does not batch.
    pub capacity: usize,
    /// Commits of a full transaction (FGM: a full TxnInfo).
    pub full: u64,
    /// Commits by the timer ([`Batching::interval`]).
    pub timer: u64,
    /// Commits at [`Fs::fsync`] (of any file).
    pub fsync: u64,
    /// Commits before a snapshot is taken.
    pub snapshot: u64,
    /// Commits before log pages are freed (log GC, a deleted inode).
    pub log_free: u64,
    /// Commits at a clean unmount.
    pub unmount: u64,
    /// Commits before an overwrite in place changes an entry the
    /// transaction holds words of.
    pub overwrite: u64,
}

impl BatchStats {
    /// Every commit.
    pub fn commits(&self) -> u64 {
        self.full + self.timer + self.fsync + self.other()
    }

    /// Commits neither a full transaction, the timer nor an fsync made.
    pub fn other(&self) -> u64 {
        self.snapshot + self.log_free + self.unmount + self.overwrite
    }

    /// This reading and `other` added up (the larger capacity): the
    /// commits of several runs.
    pub fn plus(&self, other: &BatchStats) -> BatchStats {
        BatchStats {
            capacity: self.capacity.max(other.capacity),
            full: self.full + other.full,
            timer: self.timer + other.timer,
            fsync: self.fsync + other.fsync,
            snapshot: self.snapshot + other.snapshot,
            log_free: self.log_free + other.log_free,
            unmount: self.unmount + other.unmount,
            overwrite: self.overwrite + other.overwrite,
        }
    }

    /// What happened between `earlier` and this reading (the capacity
    /// stays).
    pub fn since(&self, earlier: &BatchStats) -> BatchStats {
        BatchStats {
            capacity: self.capacity,
            full: self.full.saturating_sub(earlier.full),
            timer: self.timer.saturating_sub(earlier.timer),
            fsync: self.fsync.saturating_sub(earlier.fsync),
            snapshot: self.snapshot.saturating_sub(earlier.snapshot),
            log_free: self.log_free.saturating_sub(earlier.log_free),
            unmount: self.unmount.saturating_sub(earlier.unmount),
            overwrite: self.overwrite.saturating_sub(earlier.overwrite),
        }
    }
}

impl Fs {
    /// How often this mount's running transaction committed, and why; all
    /// zero when it does not batch. Each of these commits is one journal
    /// transaction in [`Fs::journal_stats`].
    pub fn batch_stats(&self) -> BatchStats {
        let Some(c) = self.ctx.journal().batch_commits() else {
            return BatchStats::default();
        };
        BatchStats {
            capacity: c.limit,
            full: c.full,
            timer: c.timer,
            fsync: c.fsync,
            snapshot: c.snapshot,
            log_free: c.log_free,
            unmount: c.unmount,
            overwrite: c.overwrite,
        }
    }

    /// Words a batching mount's running transaction holds now, not yet
    /// committed (0 without batching): the crash checker tells by it where
    /// the transaction committed (when full, before a log page is freed).
    pub fn running_words(&self) -> usize {
        self.ctx.journal().batch().map_or(0, |b| b.words())
    }
}

/// The mount's commit timer.
pub(super) struct Committer {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Committer {
    /// Commits `ctx`'s running transaction every `interval`.
    pub(super) fn start(ctx: Arc<Ctx>, interval: Duration) -> Committer {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("novafs-commit".into())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                    if let Err(e) = ctx.journal().commit_running(ctx.region(), Journal::ON_TIMER) {
                        tracing::error!(%e, "the running transaction did not commit");
                    }
                }
            })
            .ok();
        Committer {
            stop: Some(stop),
            thread,
        }
    }
}

impl Drop for Committer {
    /// Stops the timer: what is still running is lost, as in a crash,
    /// unless the unmount committed it.
    fn drop(&mut self) {
        self.stop = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
