//! The pages a crash scan finds in use, from which recovery rebuilds the
//! free lists (NOVA §4.7, "Recovery after a failure"): one bit per page of
//! the data area. Marking costs the same for every page and the free runs
//! come out in order, where sorting every page number the scan listed was
//! most of a crash mount's serial part (3.1 million pages at 16 GiB:
//! BENCHMARKS "Recovery at scale"). The bitmap is a bit a page: 32 KiB a
//! GiB of data area, for the mount only.

/// Page numbers (`offset >> PAGE_SHIFT`) in use in `[first, end)`.
pub(crate) struct UsedPages {
    first: u64,
    end: u64,
    words: Vec<u64>,
    /// Pages marked more than once: two owners, for fsck to sort out.
    twice: u64,
}

impl UsedPages {
    /// None in use yet, of the pages `first..end`.
    pub(crate) fn new(first: u64, end: u64) -> UsedPages {
        let n = end.saturating_sub(first);
        UsedPages {
            first,
            end: first + n,
            words: vec![0; n.div_ceil(64) as usize],
            twice: 0,
        }
    }

    /// Marks `page` in use; a page outside the area is not the
    /// allocator's and is left out.
    pub(crate) fn mark(&mut self, page: u64) {
        if !(self.first..self.end).contains(&page) {
            return;
        }
        let i = page - self.first;
        let (word, bit) = (&mut self.words[(i / 64) as usize], 1u64 << (i % 64));
        if *word & bit != 0 {
            self.twice += 1;
        }
        *word |= bit;
    }

    pub(crate) fn mark_all(&mut self, pages: impl IntoIterator<Item = u64>) {
        for p in pages {
            self.mark(p);
        }
    }

    /// Pages marked more than once.
    pub(crate) fn twice(&self) -> u64 {
        self.twice
    }

    /// The runs of pages no one marked, in order: (first page, pages).
    pub(crate) fn free_runs(&self) -> Vec<(u64, u64)> {
        let n = self.end - self.first;
        let mut runs = Vec::new();
        let mut start = None;
        let mut i = 0;
        while i < n {
            // The bits from `i` on in its word (zeros shifted in above).
            let bits = self.words[(i / 64) as usize] >> (i % 64);
            let left = (64 - i % 64).min(n - i);
            let same = match start {
                None => u64::from(bits.trailing_ones()),
                Some(_) => u64::from(bits.trailing_zeros()),
            }
            .min(left);
            i += same;
            if same < left {
                // The state flips at `i`: a run starts or ends there.
                match start.take() {
                    None => start = Some(i),
                    Some(s) => runs.push((self.first + s, i - s)),
                }
            }
        }
        if let Some(s) = start {
            runs.push((self.first + s, n - s));
        }
        runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use novafs_rng::SplitMix;

    /// The free runs of `used` over `first..end`, one page at a time.
    fn naive(first: u64, end: u64, used: &[u64]) -> Vec<(u64, u64)> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for p in first..end {
            if used.contains(&p) {
                continue;
            }
            match runs.last_mut() {
                Some((s, n)) if *s + *n == p => *n += 1,
                _ => runs.push((p, 1)),
            }
        }
        runs
    }

    #[test]
    fn free_runs_match_a_page_by_page_count() {
        for seed in 0..300 {
            let mut rng = SplitMix::new(seed);
            let first = rng.below(100);
            let len = rng.below(300);
            let density = rng.below(100) + 1;
            let used: Vec<u64> = (first..first + len).filter(|_| rng.below(100) < density).collect();
            let mut u = UsedPages::new(first, first + len);
            u.mark_all(used.iter().copied());
            assert_eq!(u.free_runs(), naive(first, first + len, &used), "seed {seed}");
            assert_eq!(u.twice(), 0);
        }
    }

    #[test]
    fn word_edges_empty_and_full_areas() {
        let mut u = UsedPages::new(64, 64 + 192);
        assert_eq!(u.free_runs(), vec![(64, 192)]);
        u.mark_all([127, 128, 191, 192]);
        assert_eq!(u.free_runs(), vec![(64, 63), (129, 62), (193, 63)]);
        u.mark_all(64..256);
        assert_eq!(u.free_runs(), vec![]);
        assert!(UsedPages::new(5, 5).free_runs().is_empty());
    }

    #[test]
    fn pages_outside_are_left_out_and_twice_counted() {
        let mut u = UsedPages::new(10, 20);
        u.mark_all([0, 9, 20, 1000, 12, 12, 19]);
        assert_eq!(u.twice(), 1);
        assert_eq!(u.free_runs(), vec![(10, 2), (13, 6)]);
    }
}
