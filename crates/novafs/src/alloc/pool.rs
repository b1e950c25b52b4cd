//! One shard's free pages, as free singles and free metadata pairs.

use super::proof::Extent;
use super::ranges::RangeSet;
use crate::layout::PAGE_SHIFT;

/// One shard's free pages.
#[derive(Debug, Default)]
pub(super) struct Pool {
    /// Free pages handed out one by one. Replication off: every free page.
    /// On: the free pages that cannot be half of a free metadata pair —
    /// those in the dead zone and those whose mirror is in use.
    pub(super) single: RangeSet,
    /// Replication on: the primaries `p` (all in the low zone) of the free
    /// pairs, `p` and `m(p)` both free. The mirror is implied and stored
    /// nowhere, so each free page is in exactly one of the two sets. Off:
    /// empty.
    pub(super) pairs: RangeSet,
}

impl Pool {
    pub(super) fn free(&self) -> u64 {
        self.single.total() + 2 * self.pairs.total()
    }
}

pub(super) fn extent(start: u64, n: u64) -> Extent {
    Extent {
        off: start << PAGE_SHIFT,
        npages: n,
    }
}

/// Takes up to `need` single pages from the lowest; returns what is still
/// needed.
pub(super) fn take_singles(p: &mut Pool, mut need: u64, got: &mut Vec<Extent>) -> u64 {
    while need > 0 {
        let Some((start, n)) = p.single.take_first(need) else {
            break;
        };
        got.push(extent(start, n));
        need -= n;
    }
    need
}
