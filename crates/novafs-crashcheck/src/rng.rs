//! A small deterministic generator: the same seed gives the same workloads
//! and the same sampled crash images on every machine. It draws from the
//! stream behind the bytes of novafs's writes ([`novafs::op::SplitMix`]).

use novafs::op::SplitMix;

#[derive(Clone, Debug)]
pub struct Rng(SplitMix);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(SplitMix::new(seed))
    }

    /// A generator for one sub-stream (e.g. one crash point of one seed).
    pub fn derive(seed: u64, stream: u64) -> Rng {
        let mut r = Rng::new(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ stream);
        r.next_u64();
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }

    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> Option<&'a T> {
        if v.is_empty() {
            None
        } else {
            v.get(self.below(v.len() as u64) as usize)
        }
    }
}
