//! The one seeded generator of novafs's tools and tests: fault injection,
//! the crash checker's workloads and sampled images, the model test, the
//! benchmarks' workloads and the bytes of every generated write. One
//! algorithm everywhere (SplitMix64: tiny, fast, every seed a good
//! stream), so that a seed printed by any of them means the same thing on
//! every machine and in every release.

#![forbid(unsafe_code)]

/// The golden-ratio increment of SplitMix64.
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// What [`SplitMix::new`] mixes into a seed, so that seed 0 is a stream
/// like any other.
const SEED_MIX: u64 = 0x6a09_e667_f3bc_c908;

/// A SplitMix64 stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix(u64);

impl SplitMix {
    /// The stream of `seed`.
    pub fn new(seed: u64) -> SplitMix {
        SplitMix(seed ^ SEED_MIX)
    }

    /// The stream whose state is `state` as it is: what older generators
    /// of the tests did, kept so their seeds still name the same cases.
    pub fn from_state(state: u64) -> SplitMix {
        SplitMix(state)
    }

    /// An independent stream for one part of a seeded run (one worker,
    /// one crash point), the same for the same `seed` and `stream`.
    pub fn derive(seed: u64, stream: u64) -> SplitMix {
        let mut r = SplitMix::new(seed.wrapping_mul(GAMMA) ^ stream);
        r.next_u64();
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform enough in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }

    /// One element of `v`, or None when it is empty.
    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> Option<&'a T> {
        v.get(self.below(v.len() as u64) as usize)
    }

    /// Fills `buf` from the stream, eight bytes per draw, little-endian.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let word = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference outputs of SplitMix64 from state 0 (Vigna's
    /// splitmix64.c): the streams every seed names must never change.
    #[test]
    fn matches_the_reference_stream() {
        let mut r = SplitMix::from_state(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(r.next_u64(), 0x06c4_5d18_8009_454f);
    }

    #[test]
    fn new_mixes_the_seed_and_derive_separates_streams() {
        assert_eq!(SplitMix::new(5), SplitMix::from_state(5 ^ SEED_MIX));
        let a: Vec<u64> = (0..4).scan(SplitMix::derive(7, 1), |r, _| Some(r.next_u64())).collect();
        let b: Vec<u64> = (0..4).scan(SplitMix::derive(7, 2), |r, _| Some(r.next_u64())).collect();
        assert_ne!(a, b);
        assert_eq!(
            a,
            (0..4)
                .scan(SplitMix::derive(7, 1), |r, _| Some(r.next_u64()))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn below_pick_and_fill() {
        let mut r = SplitMix::new(1);
        assert_eq!(r.below(0), 0);
        assert!((0..1000).all(|_| r.below(7) < 7));
        assert_eq!(r.pick::<u8>(&[]), None);
        assert_eq!(r.pick(&[9]), Some(&9));
        let mut a = [0u8; 13];
        SplitMix::new(3).fill(&mut a);
        let mut s = SplitMix::new(3);
        let (w0, w1) = (s.next_u64().to_le_bytes(), s.next_u64().to_le_bytes());
        assert_eq!(a[..8], w0);
        assert_eq!(a[8..], w1[..5]);
    }
}
