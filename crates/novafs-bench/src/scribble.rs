//! Metadata bytes at risk from a scribble (NOVA-Fortis §4.4, Fig. 7),
//! computed exactly over every position of the scribble.
//!
//! A scribble of `n` bytes at byte `s` overwrites `[s, s + n)`, for every
//! `s` in `[0, size - n]`. A metadata page without a replica is destroyed
//! when the scribble touches any of its bytes; a page with one only when
//! the scribble covers both copies of one of its bytes (§4.4: then no copy
//! of that byte is left). Each destroyed page loses all its bytes (a log
//! page is scanned entry by entry: a lost byte loses the page).
//!
//! For a page whose copies start `d` bytes apart (`d = 0` without a
//! replica), covering copy bytes `a + x` and `a + d + x` needs `n > d`,
//! and then the positions that destroy it are the interval `[a + d + 1 -
//! n, a + page - 1]` (clipped to the image): `n + page - 1 - d` of them.
//! The average over positions is the sum of those counts; the maximum,
//! the deepest overlap of the intervals, by a sweep over their ends.

/// One metadata page: where its primary and its replica (if any) start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Copies {
    pub off: u64,
    pub replica: Option<u64>,
}

/// What scribbles of one size can destroy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AtRisk {
    /// Scribble size, bytes.
    pub size: u64,
    /// The most metadata bytes one scribble destroys.
    pub max_bytes: u64,
    /// Metadata bytes destroyed, averaged over every position.
    pub avg_bytes: f64,
}

impl AtRisk {
    /// The average in pages, as the paper quotes it.
    pub fn avg_pages(&self, page: u64) -> f64 {
        self.avg_bytes / page as f64
    }
}

/// The positions `[lo, hi]` at which an `n`-byte scribble destroys the
/// page `c` of `page` bytes, on an image of `size` bytes; `None` if none.
fn doomed(c: Copies, page: u64, n: u64, size: u64) -> Option<(u64, u64)> {
    let (a, b) = match c.replica {
        Some(r) => (c.off.min(r), c.off.max(r)),
        None => (c.off, c.off),
    };
    if n == 0 || n > size || n <= b - a {
        return None;
    }
    let lo = (b + 1).saturating_sub(n);
    let hi = (a + page - 1).min(size - n);
    (lo <= hi).then_some((lo, hi))
}

/// Bytes at risk from an `n`-byte scribble anywhere on an image of `size`
/// bytes whose metadata pages (`page` bytes each) are `pages`.
pub fn at_risk(pages: &[Copies], page: u64, n: u64, size: u64) -> AtRisk {
    let spans: Vec<(u64, u64)> = pages.iter().filter_map(|&c| doomed(c, page, n, size)).collect();
    let hits: u128 = spans.iter().map(|&(lo, hi)| u128::from(hi - lo + 1)).sum();
    let positions = size.saturating_sub(n) + 1;
    // Ends sort before starts at the same position: [lo, hi] and
    // [hi + 1, ..] never overlap.
    let mut events: Vec<(u64, i64)> = spans.iter().flat_map(|&(lo, hi)| [(lo, 1), (hi + 1, -1)]).collect();
    events.sort_unstable();
    let (mut depth, mut deepest) = (0i64, 0i64);
    for (_, delta) in events {
        depth += delta;
        deepest = deepest.max(depth);
    }
    AtRisk {
        size: n,
        max_bytes: deepest as u64 * page,
        avg_bytes: hits as f64 * page as f64 / positions as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 4096;
    const SIZE: u64 = 1 << 20;

    fn one(off: u64, replica: Option<u64>) -> Vec<Copies> {
        vec![Copies { off, replica }]
    }

    #[test]
    fn one_unreplicated_page_is_at_risk_from_every_scribble_that_touches_it() {
        let pages = one(10 * P, None);
        for n in [1, 8, P, 3 * P] {
            let r = at_risk(&pages, P, n, SIZE);
            assert_eq!(r.max_bytes, P, "{n}");
            // n + P - 1 of the SIZE - n + 1 positions touch it.
            let want = (n + P - 1) as f64 * P as f64 / (SIZE - n + 1) as f64;
            assert!((r.avg_bytes - want).abs() < 1e-9, "{n}: {} != {want}", r.avg_bytes);
        }
    }

    #[test]
    fn a_page_at_the_image_s_edge_counts_only_positions_inside_it() {
        // Page 0: a 2-page scribble touches it from s = 0..P-1 only.
        let r = at_risk(&one(0, None), P, 2 * P, SIZE);
        let want = P as f64 * P as f64 / (SIZE - 2 * P + 1) as f64;
        assert!((r.avg_bytes - want).abs() < 1e-9);
    }

    #[test]
    fn a_pair_d_apart_is_safe_from_scribbles_up_to_d_and_at_risk_beyond() {
        let d = 16 * P;
        let pages = one(40 * P, Some(40 * P + d));
        for n in [1, P, d - 1, d] {
            let r = at_risk(&pages, P, n, SIZE);
            assert_eq!((r.max_bytes, r.avg_bytes), (0, 0.0), "{n}");
        }
        // n = d + 1: the scribbles from byte x of the primary to byte x
        // of the replica, one per x: P positions.
        for (n, positions) in [(d + 1, P), (d + 100, P + 99), (2 * d, d + P - 1)] {
            let r = at_risk(&pages, P, n, SIZE);
            assert_eq!(r.max_bytes, P, "{n}");
            let want = positions as f64 * P as f64 / (SIZE - n + 1) as f64;
            assert!((r.avg_bytes - want).abs() < 1e-9, "{n}");
        }
    }

    #[test]
    fn the_maximum_is_the_most_pages_one_position_destroys() {
        // Three adjacent unreplicated pages and one far away: a 1-byte
        // scribble hits one page, a P + 1 byte one two neighbours, a
        // 2P + 1 byte one all three; never the far one with them.
        let pages: Vec<Copies> = [0, 1, 2, 100]
            .map(|i| Copies {
                off: (10 + i) * P,
                replica: None,
            })
            .to_vec();
        for (n, most) in [(1, 1), (2, 2), (P + 1, 2), (P + 2, 3), (2 * P + 1, 3)] {
            assert_eq!(at_risk(&pages, P, n, SIZE).max_bytes, most * P, "{n}");
        }
        // Two pages meeting at a boundary: 1 byte never spans both.
        assert_eq!(at_risk(&pages[..2], P, 1, SIZE).max_bytes, P);
    }

    #[test]
    fn the_average_adds_the_pages_positions() {
        // Two far-apart unreplicated pages and one pair 2P apart, n = 3P:
        // (3P + P - 1) each, and 3P + P - 1 - 2P for the pair.
        let n = 3 * P;
        let pages = vec![
            Copies {
                off: 10 * P,
                replica: None,
            },
            Copies {
                off: 50 * P,
                replica: None,
            },
            Copies {
                off: 100 * P,
                replica: Some(102 * P),
            },
        ];
        let r = at_risk(&pages, P, n, SIZE);
        let hits = 2 * (4 * P - 1) + (2 * P - 1);
        let want = hits as f64 * P as f64 / (SIZE - n + 1) as f64;
        assert!((r.avg_bytes - want).abs() < 1e-9);
        assert_eq!(r.max_bytes, P);
    }
}
