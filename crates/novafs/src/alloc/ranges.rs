//! The range set every allocator keeps its free units in (pages, inode
//! slots), each range sealed by a checksum (Fortis §4.7).

use std::collections::BTreeMap;

/// A sorted set of disjoint, merged `[start, end)` ranges. Units are the
/// caller's: pages for the page allocator, inode slots for inode tables.
///
/// Fortis §4.7: the allocators are long-lived DRAM state that goes back to
/// the media (saved at unmount, handed out as pages), so each range's start
/// and end carry a checksum, verified whenever the range is used. A range
/// that fails it (a stray store into this process's heap) is dropped and
/// reported: its units leak until the next crash scan rebuilds the
/// allocator, which is better than handing out pages that are in use.
#[derive(Clone, Debug, Default)]
pub(crate) struct RangeSet {
    ranges: BTreeMap<u64, Sealed>,
    total: u64,
}

/// A range's end and the checksum of (start, end).
#[derive(Clone, Copy, Debug)]
struct Sealed {
    end: u64,
    csum: u32,
}

fn seal(start: u64, end: u64) -> Sealed {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&start.to_le_bytes());
    b[8..].copy_from_slice(&end.to_le_bytes());
    Sealed {
        end,
        csum: crc32c::crc32c(&b),
    }
}

/// A range handed to [`RangeSet::insert`] overlaps one already present: a
/// double free, which the caller reports.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Overlap;

impl RangeSet {
    /// The verified end of the range starting at `start`, or None (and the
    /// range dropped) when its checksum fails.
    pub(super) fn end_of(&mut self, start: u64) -> Option<u64> {
        let v = *self.ranges.get(&start)?;
        if v.end > start && seal(start, v.end).csum == v.csum {
            return Some(v.end);
        }
        self.ranges.remove(&start);
        // Its true length is unknown: count what the valid ranges hold.
        self.total = self.iter().map(|(_, n)| n).sum();
        tracing::error!(start, end = v.end, "free range fails its DRAM checksum; dropped");
        None
    }

    /// The last valid range starting at or before `unit`.
    pub(super) fn at_or_before(&mut self, unit: u64) -> Option<(u64, u64)> {
        loop {
            let (&s, _) = self.ranges.range(..=unit).next_back()?;
            if let Some(e) = self.end_of(s) {
                return Some((s, e));
            }
        }
    }

    /// The first valid range starting at or after `unit`.
    pub(super) fn at_or_after(&mut self, unit: u64) -> Option<(u64, u64)> {
        loop {
            let (&s, _) = self.ranges.range(unit..).next()?;
            if let Some(e) = self.end_of(s) {
                return Some((s, e));
            }
        }
    }

    pub(super) fn put(&mut self, start: u64, end: u64) {
        self.ranges.insert(start, seal(start, end));
    }

    /// Adds `[start, start + len)`, merging with adjacent ranges. O(log n).
    pub(crate) fn insert(&mut self, start: u64, len: u64) -> std::result::Result<(), Overlap> {
        if len == 0 {
            return Ok(());
        }
        let mut lo = start;
        let mut hi = start.checked_add(len).ok_or(Overlap)?;
        if let Some((ps, pe)) = self.at_or_before(start) {
            if pe > start {
                return Err(Overlap);
            }
            if pe == start {
                lo = ps;
                self.ranges.remove(&ps);
            }
        }
        if let Some((ns, ne)) = self.at_or_after(start) {
            if ns < hi {
                // Undo a merge with the predecessor before reporting.
                if lo != start {
                    self.put(lo, start);
                }
                return Err(Overlap);
            }
            if ns == hi {
                hi = ne;
                self.ranges.remove(&ns);
            }
        }
        self.put(lo, hi);
        self.total += len;
        Ok(())
    }

    /// Takes up to `max` units from the lowest range: `(start, len)`.
    pub(crate) fn take_first(&mut self, max: u64) -> Option<(u64, u64)> {
        let (s, e) = self.at_or_after(0)?;
        let n = max.min(e - s);
        self.ranges.remove(&s);
        if s + n < e {
            self.put(s + n, e);
        }
        self.total -= n;
        Some((s, n))
    }

    /// Takes `len` contiguous units from the first range large enough.
    pub(crate) fn take_contiguous(&mut self, len: u64) -> Option<u64> {
        let mut from = 0;
        let (s, e) = loop {
            let (s, e) = self.at_or_after(from)?;
            if e - s >= len {
                break (s, e);
            }
            from = e;
        };
        self.ranges.remove(&s);
        if s + len < e {
            self.put(s + len, e);
        }
        self.total -= len;
        Some(s)
    }

    /// Takes up to `max` units from the top of the highest range: `(start, len)`.
    pub(crate) fn take_last(&mut self, max: u64) -> Option<(u64, u64)> {
        let (s, e) = self.at_or_before(u64::MAX)?;
        let n = max.min(e - s);
        self.ranges.remove(&s);
        if s < e - n {
            self.put(s, e - n);
        }
        self.total -= n;
        Some((e - n, n))
    }

    /// Takes `len` contiguous units from the top of the highest range large
    /// enough.
    pub(crate) fn take_contiguous_last(&mut self, len: u64) -> Option<u64> {
        let mut below = u64::MAX;
        let (s, e) = loop {
            let (s, e) = self.at_or_before(below)?;
            if e - s >= len {
                break (s, e);
            }
            below = s.checked_sub(1)?;
        };
        self.ranges.remove(&s);
        if s < e - len {
            self.put(s, e - len);
        }
        self.total -= len;
        Some(e - len)
    }

    /// True when some unit of `[start, end)` is in the set. O(log n).
    pub(crate) fn overlaps(&mut self, start: u64, end: u64) -> bool {
        // The last range starting before `end` reaches furthest right.
        start < end && self.at_or_before(end - 1).is_some_and(|(_, e)| e > start)
    }

    /// Takes every unit of `[start, end)` that is in the set, as ascending
    /// `(start, len)` runs, splitting ranges that straddle the window's
    /// edges. O((k + 1) log n) for k runs.
    pub(crate) fn take_within(&mut self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        if start >= end {
            return out;
        }
        let mut cur = match self.at_or_before(start) {
            Some((s, e)) if e > start => Some((s, e)),
            _ => self.at_or_after(start),
        };
        while let Some((s, e)) = cur {
            if s >= end {
                break;
            }
            let (lo, hi) = (s.max(start), e.min(end));
            self.ranges.remove(&s);
            if s < lo {
                self.put(s, lo);
            }
            if hi < e {
                self.put(hi, e);
            }
            self.total -= hi - lo;
            out.push((lo, hi - lo));
            if hi == end {
                break;
            }
            cur = self.at_or_after(hi);
        }
        out
    }

    /// Total units in the set.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// True when `unit` is in the set.
    pub(crate) fn contains(&mut self, unit: u64) -> bool {
        self.at_or_before(unit).is_some_and(|(_, e)| unit < e)
    }

    /// The valid ranges as `(start, len)`, ascending (for saving: a damaged
    /// range is never written back to the media).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges
            .iter()
            .filter(|&(&s, v)| v.end > s && seal(s, v.end).csum == v.csum)
            .map(|(&s, v)| (s, v.end - s))
    }

    /// Overwrites the end of the range starting at `start` behind the
    /// checksum's back, as a stray store would (tests).
    #[cfg(test)]
    pub(super) fn scribble(&mut self, start: u64, end: u64) {
        if let Some(v) = self.ranges.get_mut(&start) {
            v.end = end;
        }
    }
}
