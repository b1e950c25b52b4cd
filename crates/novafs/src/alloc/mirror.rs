//! Metadata replicas' placement (Fortis §4.4): every metadata page's mirror,
//! the dead zone between them, and taking and freeing pairs of pages.

use super::pool::{extent, take_singles, Pool};
use super::proof::Extent;
use super::ranges::{Overlap, RangeSet};

/// Where each page of the data area `[first, last)` has its mirror when
/// metadata is replicated: `m(p) = first + last - 1 - p`, the reflection
/// about the middle of the area.
///
/// A metadata primary `p` must be at least the dead zone below its mirror,
/// `m(p) - p >= dead zone`: the primaries are the low zone `[first,
/// lo_end)`, their mirrors the high zone `[hi_start, last)`, and the pages
/// between them, the dead zone, hold data only.
#[derive(Clone, Copy, Debug)]
pub(super) struct Mirror {
    pub(super) first: u64,
    pub(super) last: u64,
    pub(super) lo_end: u64,
    pub(super) hi_start: u64,
}

/// Which zone a page is in when metadata is replicated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Zone {
    /// A possible metadata primary.
    Low,
    /// Data only.
    Dead,
    /// A possible metadata mirror.
    High,
}

impl Mirror {
    pub(super) fn new(first: u64, last: u64, dead_zone_pages: u64) -> Self {
        // p < m(p) always (distance at least 1), so the centre page of an
        // odd area is never paired.
        let dead = dead_zone_pages.max(1);
        let n = last.saturating_sub(first);
        // m(p) - p = first + last - 1 - 2p >= dead, with p >= first.
        let lo_end = if n == 0 || n - 1 < dead {
            first
        } else {
            (first + last - 1 - dead) / 2 + 1
        };
        Mirror {
            first,
            last,
            lo_end,
            hi_start: first + last - lo_end,
        }
    }

    /// The mirror of a page of the data area.
    pub(super) fn of(&self, page: u64) -> u64 {
        self.first + self.last - 1 - page
    }

    /// The lower of a page and its mirror: pools own pairs of pages.
    pub(super) fn key(&self, page: u64) -> u64 {
        page.min(self.of(page))
    }

    /// The mirror image of the pages `[a, b)`: `[m(b - 1), m(a) + 1)`.
    pub(super) fn range(&self, a: u64, b: u64) -> (u64, u64) {
        (self.first + self.last - b, self.first + self.last - a)
    }

    pub(super) fn contains(&self, page: u64) -> bool {
        page >= self.first && page < self.last
    }
}

/// Pairs broken at once for data (the primaries' run and the mirrors' run
/// become singles): a file written a page at a time then gets runs of
/// contiguous pages, which reads copy in one go, instead of pages that
/// alternate between a pair's two far-apart halves.
pub(super) const DATA_BATCH_PAIRS: u64 = 32;

/// Data pages when replication is on: singles, lowest first; when none
/// are left, a batch of pairs from the dead zone outward becomes singles.
pub(super) fn take_data(m: &Mirror, p: &mut Pool, need: u64, got: &mut Vec<Extent>) -> u64 {
    let mut need = take_singles(p, need, got);
    while need > 0 {
        let Some((start, n)) = p.pairs.take_last(need.div_ceil(2).max(DATA_BATCH_PAIRS)) else {
            break;
        };
        let (ma, mb) = m.range(start, start + n);
        let primaries = p.single.insert(start, n).is_ok();
        let mirrors = p.single.insert(ma, mb - ma).is_ok();
        debug_assert!(primaries && mirrors, "a free pair's pages were also single");
        need = take_singles(p, need, got);
    }
    need
}

/// Makes free pairs again of free single primaries whose mirrors are free
/// singles too (what a data batch broke and did not use).
pub(super) fn pair_singles(m: &Mirror, p: &mut Pool) {
    let lows: Vec<(u64, u64)> = p
        .single
        .iter()
        .map(|(s, n)| (s, (s + n).min(m.lo_end)))
        .filter(|&(s, e)| s < e)
        .collect();
    for (a, b) in lows {
        let (ma, mb) = m.range(a, b);
        for (ms, mn) in p.single.take_within(ma, mb) {
            let (pa, pb) = m.range(ms, ms + mn);
            let primaries = p.single.take_within(pa, pb);
            debug_assert_eq!(primaries, vec![(pa, pb - pa)], "the primaries of free mirrors");
            let ok = p.pairs.insert(pa, pb - pa).is_ok();
            debug_assert!(ok, "a free single was also a free pair");
        }
    }
}

/// Metadata pairs from the outer edge inward: returns what is still needed.
pub(super) fn take_pairs(m: &Mirror, p: &mut Pool, mut need: u64, got: &mut Vec<Extent>) -> u64 {
    if p.pairs.total() < need {
        pair_singles(m, p);
    }
    while need > 0 {
        let Some((start, n)) = p.pairs.take_first(need) else {
            break;
        };
        got.push(extent(start, n));
        need -= n;
    }
    need
}

/// Frees `[a, b)`, pages of one pool in one zone, pairing each with its
/// mirror when that is free (a single). Checks first: an overlap with free
/// pages changes nothing.
pub(super) fn free_cell(m: &Mirror, p: &mut Pool, zone: Zone, a: u64, b: u64) -> std::result::Result<(), Overlap> {
    let (ma, mb) = m.range(a, b);
    match zone {
        Zone::Dead => p.single.insert(a, b - a),
        Zone::Low => {
            if p.single.overlaps(a, b) || p.pairs.overlaps(a, b) {
                return Err(Overlap);
            }
            // Free mirrors ascending: their primaries, descending.
            let mut paired: Vec<(u64, u64)> = p
                .single
                .take_within(ma, mb)
                .into_iter()
                .map(|(s, n)| m.range(s, s + n))
                .collect();
            paired.reverse();
            for &(s, e) in &paired {
                let ok = p.pairs.insert(s, e - s).is_ok();
                debug_assert!(ok, "checked above");
            }
            insert_gaps(&mut p.single, a, b, &paired);
            Ok(())
        }
        Zone::High => {
            if p.single.overlaps(a, b) || p.pairs.overlaps(ma, mb) {
                return Err(Overlap);
            }
            // Free primaries ascending: their mirrors, descending.
            let mut paired = Vec::new();
            for (s, n) in p.single.take_within(ma, mb) {
                let ok = p.pairs.insert(s, n).is_ok();
                debug_assert!(ok, "checked above");
                paired.push(m.range(s, s + n));
            }
            paired.reverse();
            insert_gaps(&mut p.single, a, b, &paired);
            Ok(())
        }
    }
}

/// Adds to `set` the parts of `[a, b)` outside the ascending, disjoint
/// `[start, end)` runs `taken` (all within it).
pub(super) fn insert_gaps(set: &mut RangeSet, a: u64, b: u64, taken: &[(u64, u64)]) {
    let mut from = a;
    for &(s, e) in taken.iter().chain(std::iter::once(&(b, b))) {
        if from < s {
            let ok = set.insert(from, s - from).is_ok();
            debug_assert!(ok, "checked by the caller");
        }
        from = e;
    }
}

/// Frees the metadata primaries `[a, b)` (one pool, low zone) and their
/// mirrors, as free pairs. Checks first: an overlap with free pages changes
/// nothing.
pub(super) fn free_pair_cell(m: &Mirror, p: &mut Pool, a: u64, b: u64) -> std::result::Result<(), Overlap> {
    let (ma, mb) = m.range(a, b);
    if p.single.overlaps(a, b) || p.single.overlaps(ma, mb) || p.pairs.overlaps(a, b) {
        return Err(Overlap);
    }
    p.pairs.insert(a, b - a)
}
