//! Dropping the kernel's cached pages of files novafs wrote, so that the
//! next read reaches novafs and updates the access time (relatime).
//!
//! Without OPEN requests (see `handler`'s module docs) a file's pages stay
//! in the kernel's page cache from one open to the next, and a read served
//! from there never reaches novafs. After a write, truncate or fallocate
//! the access time is due (it is older than the new mtime), so novafs
//! invalidates the file's pages (FUSE_NOTIFY_INVAL_INODE) and the next read
//! comes here and updates it, as Linux's relatime rule asks.
//!
//! From a thread of its own, never from the request's worker: during a
//! WRITE the kernel holds the written pages locked until the reply, and an
//! invalidation waits for those locks. Queued inodes are deduplicated: a
//! burst of writes to one file costs one invalidation after them (a write
//! queued while its file is being invalidated queues it again, so the last
//! write is always followed by one).

use std::collections::HashSet;
use std::io;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::transport::dev::Notifier;
use crate::wire::abi::FUSE_NOTIFY_INVAL_INODE;
use crate::wire::reply;

/// The invalidation thread and its queue; dropping it stops the thread.
pub(crate) struct Invalidator {
    queue: Arc<Queue>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Queue {
    state: Mutex<Pending>,
    wake: Condvar,
}

#[derive(Default)]
struct Pending {
    inodes: HashSet<u64>,
    stop: bool,
}

impl Invalidator {
    pub(crate) fn start(notifier: Notifier) -> io::Result<Invalidator> {
        let queue = Arc::new(Queue::default());
        let q = queue.clone();
        let thread = std::thread::Builder::new()
            .name("fuse-invalidate".into())
            .spawn(move || run(&q, &notifier))?;
        Ok(Invalidator {
            queue,
            thread: Some(thread),
        })
    }

    /// Drops `ino`'s cached pages soon.
    pub(crate) fn queue(&self, ino: u64) {
        let mut p = self.queue.state.lock().unwrap_or_else(|e| e.into_inner());
        if p.inodes.insert(ino) {
            self.queue.wake.notify_one();
        }
    }
}

impl Drop for Invalidator {
    fn drop(&mut self) {
        self.queue.state.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
        self.queue.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(queue: &Queue, notifier: &Notifier) {
    let mut payload = [0u8; 64];
    loop {
        let inodes = {
            let mut p = queue.state.lock().unwrap_or_else(|e| e.into_inner());
            while p.inodes.is_empty() && !p.stop {
                p = queue.wake.wait(p).unwrap_or_else(|e| e.into_inner());
            }
            if p.stop {
                return;
            }
            std::mem::take(&mut p.inodes)
        };
        for ino in inodes {
            // Offset 0, length 0: every page of the file.
            let Ok(n) = reply::notify_inval_inode(&mut payload, ino, 0, 0) else {
                continue;
            };
            match notifier.notify(FUSE_NOTIFY_INVAL_INODE, &payload[..n]) {
                // ENOENT: the kernel holds nothing of it any more.
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                // The connection is gone: the session is ending.
                Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return,
                Err(e) => tracing::warn!(ino, "cannot drop cached pages: {e}"),
            }
        }
    }
}
