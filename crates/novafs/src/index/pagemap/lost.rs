//! A file's lost pages: file pages whose bytes no copy on the media can
//! give back (FORMAT.md "Logs", lost range entries). They are not holes:
//! a hole reads zeros, a lost page EIO, until a write or a hole over the
//! whole page replaces it. Kept as merged `[start, end)` runs, so a large
//! file's loss costs a few words, not one per page.

use std::collections::BTreeMap;
use std::ops::Range;

/// Disjoint, merged runs of lost file pages: start → end.
#[derive(Debug, Default)]
pub(crate) struct LostPages(BTreeMap<u64, u64>);

impl LostPages {
    /// Marks `pages` lost, merging with the runs it touches.
    pub(crate) fn insert(&mut self, pages: Range<u64>) {
        if pages.is_empty() {
            return;
        }
        let (mut start, mut end) = (pages.start, pages.end);
        let touching: Vec<(u64, u64)> = self
            .0
            .range(..=end)
            .rev()
            .take_while(|&(_, &e)| e >= start)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in touching {
            self.0.remove(&s);
            start = start.min(s);
            end = end.max(e);
        }
        self.0.insert(start, end);
    }

    /// Pages of `pages` are no longer lost (rewritten, punched or cut off).
    pub(crate) fn remove(&mut self, pages: Range<u64>) {
        if pages.is_empty() || self.0.is_empty() {
            return;
        }
        let hit: Vec<(u64, u64)> = self
            .0
            .range(..pages.end)
            .rev()
            .take_while(|&(_, &e)| e > pages.start)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in hit {
            self.0.remove(&s);
            if s < pages.start {
                self.0.insert(s, pages.start);
            }
            if e > pages.end {
                self.0.insert(pages.end, e);
            }
        }
    }

    pub(crate) fn contains(&self, pg: u64) -> bool {
        self.0.range(..=pg).next_back().is_some_and(|(_, &e)| pg < e)
    }

    /// The first lost page at or after `pg`.
    pub(crate) fn next_from(&self, pg: u64) -> Option<u64> {
        if self.contains(pg) {
            return Some(pg);
        }
        self.0.range(pg..).next().map(|(&s, _)| s)
    }

    /// One past the last page of the run holding `pg` (`pg` when it is not
    /// lost).
    pub(crate) fn run_end(&self, pg: u64) -> u64 {
        match self.0.range(..=pg).next_back() {
            Some((_, &e)) if pg < e => e,
            _ => pg,
        }
    }

    /// The runs, in order.
    pub(crate) fn runs(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.0.iter().map(|(&s, &e)| s..e)
    }
}

#[cfg(test)]
mod tests {
    use super::LostPages;

    fn runs(l: &LostPages) -> Vec<(u64, u64)> {
        l.runs().map(|r| (r.start, r.end)).collect()
    }

    #[test]
    fn runs_merge_split_and_answer_membership() {
        let mut l = LostPages::default();
        l.insert(2..4);
        l.insert(6..8);
        l.insert(4..6);
        assert_eq!(runs(&l), vec![(2, 8)]);
        l.remove(3..5);
        assert_eq!(runs(&l), vec![(2, 3), (5, 8)]);
        assert!(l.contains(2) && !l.contains(3) && !l.contains(4) && l.contains(7) && !l.contains(8));
        assert_eq!(l.next_from(3), Some(5));
        assert_eq!(l.next_from(8), None);
        assert_eq!(l.run_end(5), 8);
        assert_eq!(l.run_end(4), 4);
        l.insert(0..1);
        l.remove(0..100);
        assert_eq!(runs(&l), vec![]);
    }
}
