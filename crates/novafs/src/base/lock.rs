//! The core's locks and the one order they are taken in.
//!
//! Every lock of the file system core is declared with a [`Rank`]; a
//! thread may take a lock only while every lock it already holds has a
//! lower rank (or the same rank, for the ranks of which an operation takes
//! many: inodes in inode-number order, the epoch gate's shards). A cycle
//! of waits needs two threads taking two locks in opposite orders, so a
//! single order rules every deadlock between these locks out.
//!
//! Debug builds (and so every test) check it: each thread keeps the ranks
//! it holds, and taking a lock out of order panics at once, naming both
//! ranks, whether or not the other thread that would close the cycle is
//! running. Release builds keep nothing and check nothing.

use std::ops::{Deref, DerefMut};

/// Where a lock stands in the order: lower ranks are taken first. The
/// declaration order is the lock order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Rank {
    /// `fs::Fs::space_pass`: an operation that found no space compacts
    /// logs for it, taking each inode's lock and the epoch gate, and holds
    /// nothing else meanwhile.
    SpacePass,
    /// `mmap::Mmaps::faults`: held back while a snapshot write-protects
    /// every mapping (Fortis §3.3), so it comes before the epoch gate.
    MmapFaults,
    /// `snapshot::Epochs` gate shards: held by each operation that writes
    /// from reading the epoch until it has published, all of them by a
    /// snapshot's cut or deletion (Fortis §3.1).
    EpochGate,
    /// The snapshot list's log and open views (`snapshot::Snapshots`):
    /// only taken by snapshot calls, after the gate and before any inode.
    SnapshotList,
    /// `fs::Fs::rename_lock`: cross-directory renames, one at a time.
    Rename,
    /// An inode's DRAM state (`cache::Cell::state`); an operation on
    /// several takes them in inode-number order (`cache::Locked`).
    Inode,
    /// `mmap::Mmaps::making`: one new mapping at a time, so that the check
    /// that a file is mapped with one kind only holds until the mapping
    /// is registered.
    MmapMaking,
    /// An inode's atomic-mmap replicas (`mmap_atomic`): under its lock,
    /// before any DAX mapping's page state (an msync zaps DAX pages).
    MmapReplica,
    /// A mapped page's state (`mmap`): under its inode's lock.
    MmapPage,
    /// The live snapshots (`snapshot::Snapshots`): changed only under the
    /// whole epoch gate, so an operation inside the gate never waits on
    /// it (GC asks it from inside).
    SnapshotLive,
    /// The reclaimer frees what a deletion left while no manifest item is
    /// pinned in place (`snapshot::Snapshots::freeing`).
    SnapshotFreeing,
    /// The superblock copy in DRAM (`fs::Fs`).
    Superblock,
    /// What each snapshot keeps (`snapshot::Snapshots` manifests).
    Manifests,
    /// The inode cache's shards: taken under an inode's lock to evict it.
    CacheShard,
    /// The kernel's lookups of freed inodes (`cache::Cache`).
    CacheHeld,
    /// Relaxed mode's running transaction (`journal::batch`), held
    /// through its commit, so before a journal shard.
    JournalBatch,
    /// A journal shard, held from a transaction's start to its commit.
    Journal,
    /// The inode tables' free slots: a slot claimed may need a new chunk.
    InodeSlots,
    /// The inode tables' chunk list.
    InodeChunks,
    /// The page allocator's shards: a leaf, taken one at a time.
    AllocPool,
    /// Data pages whose checksums wait to be resealed (`strips`).
    Strips,
    /// Repair and loss counters (`health`).
    Health,
    /// The live mappings' list (`mmap`).
    MmapList,
    /// The reclaimer's count of queued jobs.
    ReclaimQueue,
}

impl Rank {
    /// Ranks an operation holds several locks of at once.
    #[cfg(debug_assertions)]
    fn many(self) -> bool {
        matches!(self, Rank::Inode | Rank::EpochGate)
    }
}

#[cfg(debug_assertions)]
mod check {
    use std::cell::RefCell;

    use super::Rank;

    thread_local! {
        static HELD: RefCell<Vec<Rank>> = const { RefCell::new(Vec::new()) };
    }

    /// Records that this thread holds a lock of its rank until dropped.
    pub(super) struct Held(Rank);

    /// Panics if this thread holds a lock that must come after `rank`;
    /// called before waiting, so an inversion shows even when no other
    /// thread closes the cycle.
    pub(super) fn acquire(rank: Rank) -> Held {
        HELD.with(|held| {
            let mut held = held.borrow_mut();
            if let Some(&after) = held.iter().find(|&&h| h > rank || (h == rank && !rank.many())) {
                panic!("lock order violated: taking {rank:?} while holding {after:?} (held: {held:?}; crates/novafs/src/base/lock.rs)");
            }
            held.push(rank);
        });
        Held(rank)
    }

    impl Drop for Held {
        fn drop(&mut self) {
            // During a thread's teardown the list may be gone already.
            let _ = HELD.try_with(|held| {
                let mut held = held.borrow_mut();
                if let Some(i) = held.iter().rposition(|&h| h == self.0) {
                    held.remove(i);
                }
            });
        }
    }
}

#[cfg(not(debug_assertions))]
mod check {
    use super::Rank;

    pub(super) struct Held;

    #[inline(always)]
    pub(super) fn acquire(_: Rank) -> Held {
        Held
    }
}

use check::{acquire, Held};

/// A mutex with a rank.
#[derive(Debug)]
pub(crate) struct Mutex<T> {
    rank: Rank,
    inner: parking_lot::Mutex<T>,
}

pub(crate) struct MutexGuard<'a, T> {
    guard: parking_lot::MutexGuard<'a, T>,
    _held: Held,
}

impl<T> Mutex<T> {
    pub(crate) fn new(rank: Rank, value: T) -> Self {
        Mutex {
            rank,
            inner: parking_lot::Mutex::new(value),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        let held = acquire(self.rank);
        MutexGuard {
            guard: self.inner.lock(),
            _held: held,
        }
    }
}

impl<T> MutexGuard<'_, T> {
    /// Waits on `cv`, the mutex released meanwhile.
    pub(crate) fn wait(&mut self, cv: &parking_lot::Condvar) {
        cv.wait(&mut self.guard);
    }
}

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

/// A reader-writer lock with a rank.
#[derive(Debug)]
pub(crate) struct RwLock<T> {
    rank: Rank,
    inner: parking_lot::RwLock<T>,
}

pub(crate) struct RwLockReadGuard<'a, T> {
    guard: parking_lot::RwLockReadGuard<'a, T>,
    _held: Held,
}

pub(crate) struct RwLockWriteGuard<'a, T> {
    guard: parking_lot::RwLockWriteGuard<'a, T>,
    _held: Held,
}

impl<T> RwLock<T> {
    pub(crate) fn new(rank: Rank, value: T) -> Self {
        RwLock {
            rank,
            inner: parking_lot::RwLock::new(value),
        }
    }

    pub(crate) fn read(&self) -> RwLockReadGuard<'_, T> {
        let held = acquire(self.rank);
        RwLockReadGuard {
            guard: self.inner.read(),
            _held: held,
        }
    }

    /// A read lock that does not queue behind a waiting writer when this
    /// thread holds it already (parking_lot's `read_recursive`).
    pub(crate) fn read_recursive(&self) -> RwLockReadGuard<'_, T> {
        let held = acquire(self.rank);
        RwLockReadGuard {
            guard: self.inner.read_recursive(),
            _held: held,
        }
    }

    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, T> {
        let held = acquire(self.rank);
        RwLockWriteGuard {
            guard: self.inner.write(),
            _held: held,
        }
    }
}

impl<T> Deref for RwLockReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> Deref for RwLockWriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> DerefMut for RwLockWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::*;

    #[test]
    fn locks_in_rank_order_pass_and_out_of_order_panics() {
        let gate = RwLock::new(Rank::EpochGate, ());
        let inode = RwLock::new(Rank::Inode, 0u32);
        let other = RwLock::new(Rank::Inode, 1u32);
        let list = Mutex::new(Rank::SnapshotList, ());
        {
            let _g = gate.read_recursive();
            let _again = gate.read_recursive();
            let _a = inode.write();
            let _b = other.write(); // many inodes at once
        }
        // Released in any order, the thread holds nothing after.
        let l = list.lock();
        let i = inode.write();
        drop(l);
        drop(i);
        let inverted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _i = inode.write();
            let _l = list.lock();
        }));
        let msg = inverted.expect_err("an inversion panics");
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("taking SnapshotList while holding Inode"), "{msg}");
        // The panic released what it held: the right order works again.
        let _l = list.lock();
        let _i = inode.write();
    }

    #[test]
    fn one_lock_of_a_single_rank_at_a_time() {
        let a = Mutex::new(Rank::AllocPool, ());
        let b = Mutex::new(Rank::AllocPool, ());
        let _a = a.lock();
        let twice = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(b.lock())));
        assert!(twice.is_err(), "two allocator shards at once would be unordered");
    }
}
