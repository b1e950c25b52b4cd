//! Batched commits, an option of relaxed mode (fine-grained journaling
//! §III-C1; `journal::batch`): the mount's options and the thread that
//! commits the running transaction on a timer.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::commit::Ctx;

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

impl super::Fs {
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
                    if let Err(e) = ctx.journal().commit_running(ctx.region()) {
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
