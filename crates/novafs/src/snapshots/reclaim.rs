//! The background reclaimer of deleted snapshots (NOVA-Fortis §3.2, §3.4:
//! "combine the deleted snapshot's manifest with the next snapshot's
//! manifest and then perform stale data reclamation in the background").
//!
//! Deleting a snapshot records the deletion and merges its manifest
//! (`snapshot::Snapshots::delete`); what no snapshot needs any more comes
//! here, with the proof that the deletion is durable (R3), and a thread of
//! the mount frees it: data runs go back to the allocator, kept inodes are
//! ended one journal transaction each. A crash loses the queue and nothing
//! else: the next mount's scan frees kept inodes that no snapshot needs
//! and counts nothing unneeded as used. A clean unmount drains the queue
//! before it saves the allocators ([`Reclaimer::drain`]).

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Condvar;

use crate::lock::{Mutex, Rank};

use crate::commit::Ctx;
use crate::error::{corrupt, Result};
use crate::journal::Update;
use crate::layout::{decode, Ino, Inode, INODE_FREE, INODE_KEPT, INODE_SIZE, INODE_STATE_OFF};
use crate::log::Committed;
use crate::snapshot::Kept;

/// What one deletion left to free.
struct Job {
    proof: Committed,
    items: Vec<Kept>,
}

/// Jobs queued and not yet done, and the signal that they are.
struct Pending {
    jobs: Mutex<usize>,
    done: Condvar,
}

/// The mount's reclaimer thread and its queue.
pub(crate) struct Reclaimer {
    queue: Option<Sender<Job>>,
    pending: Arc<Pending>,
    thread: Option<JoinHandle<()>>,
}

impl Reclaimer {
    pub(crate) fn start(ctx: Arc<Ctx>) -> Reclaimer {
        let (queue, jobs) = mpsc::channel();
        let pending = Arc::new(Pending {
            jobs: Mutex::new(Rank::ReclaimQueue, 0),
            done: Condvar::new(),
        });
        let p = pending.clone();
        let thread = std::thread::Builder::new()
            .name("novafs-reclaim".into())
            .spawn(move || run(&ctx, &jobs, &p))
            .ok();
        Reclaimer {
            queue: thread.is_some().then_some(queue),
            pending,
            thread,
        }
    }

    /// Queues what deletion `proof` left unneeded; frees it right here
    /// when no thread could be started.
    pub(crate) fn queue(&self, ctx: &Ctx, proof: Committed, items: Vec<Kept>) {
        if items.is_empty() {
            return;
        }
        let job = Job { proof, items };
        *self.pending.jobs.lock() += 1;
        let Some(queue) = &self.queue else {
            return finish(ctx, job, &self.pending);
        };
        if let Err(mpsc::SendError(job)) = queue.send(job) {
            finish(ctx, job, &self.pending);
        }
    }

    /// Waits until everything queued so far is freed.
    pub(crate) fn drain(&self) {
        let mut jobs = self.pending.jobs.lock();
        while *jobs > 0 {
            jobs.wait(&self.pending.done);
        }
    }
}

impl Drop for Reclaimer {
    /// Stops the thread after the job it is on; the rest is lost as in a
    /// crash (module docs).
    fn drop(&mut self) {
        self.queue = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(ctx: &Ctx, jobs: &Receiver<Job>, pending: &Pending) {
    while let Ok(job) = jobs.recv() {
        finish(ctx, job, pending);
    }
}

fn finish(ctx: &Ctx, job: Job, pending: &Pending) {
    free(ctx, job);
    let mut jobs = pending.jobs.lock();
    *jobs -= 1;
    pending.done.notify_all();
}

/// Frees one deletion's unneeded items. A kept inode that cannot be ended
/// (its record damaged) stays, and is reported: fsck and the next crash
/// scan see it.
fn free(ctx: &Ctx, job: Job) {
    // Not while scrub checks an item in place: it checked the item was
    // still listed when it pinned it, so it may be one of these
    // (`Snapshots::pin`); after this, none of them is listed any more.
    let _freeing = ctx.snapshots().freeing();
    let mut data = Vec::new();
    for item in job.items {
        match item {
            Kept::Data { ext, .. } => data.push(ext),
            Kept::Inode { ino, off, .. } => {
                if let Err(e) = free_kept_inode(ctx, ino, off) {
                    tracing::error!(ino, error = %e, "a kept inode no snapshot needs could not be freed; run novafs fsck");
                }
            }
        }
    }
    ctx.alloc().release(&job.proof, &data);
}

/// Frees kept inode `ino` (record at `off`) that no snapshot needs any
/// more: its state word, then (R3) its pages and slot.
fn free_kept_inode(ctx: &Ctx, ino: Ino, off: u64) -> Result<()> {
    let mut buf = [0u8; INODE_SIZE as usize];
    ctx.region().read(off, &mut buf)?;
    let rec: Inode = decode(&buf)?;
    if rec.state != INODE_KEPT || rec.ino != ino {
        return Err(corrupt!(
            InodeRecord,
            at = off,
            ino = ino,
            "kept inode {ino} is not kept at {off:#x}"
        ));
    }
    let mut st = ctx.load_inode(off, &rec)?;
    let proof = ctx
        .journal()
        .commit(ctx.region(), &[Update::word(off + INODE_STATE_OFF, INODE_FREE)])?;
    let (log, data) = st.take_pages();
    ctx.release_log(&proof, &log);
    ctx.alloc().release(&proof, &data);
    ctx.tables().release(ino);
    Ok(())
}
