//! Space management (NOVA §4.1 "NVMM space management"): per-shard pools of
//! free pages kept in DRAM as sorted, merged ranges. A pool owns a contiguous
//! slice of the data area, so frees return pages to the pool they came from
//! and merge with their neighbours; an empty pool takes from the largest one.
//! Nothing here touches the media: the state is saved to the recovery inode on
//! clean unmount (`recovery`) and rebuilt by a scan after a crash.

mod budget;
mod mirror;
mod pages;
mod pool;
pub(crate) mod proof;
mod ranges;
mod reservation;
#[cfg(test)]
mod tests;

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

pub(crate) use budget::{reserve_pages, Budget};
pub use pages::PageAllocator;
pub(crate) use proof::sealed;
pub(crate) use proof::Freed;
pub(crate) use proof::Linked;
pub use proof::{Extent, Unreferenced};
pub(crate) use ranges::RangeSet;
pub(crate) use reservation::Reserved;

/// Picks this thread's shard: a round-robin slot fixed at the thread's first
/// call, the user-space stand-in for "the current CPU" (DESIGN.md §5).
pub(crate) fn current_shard(shards: usize) -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local!(static SLOT: Cell<usize> = const { Cell::new(usize::MAX) });
    SLOT.with(|slot| {
        if slot.get() == usize::MAX {
            slot.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        slot.get() % shards.max(1)
    })
}
