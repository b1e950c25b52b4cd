//! A fast hasher for maps keyed by inode numbers and media offsets: keys
//! are trusted integers, so the DoS resistance of SipHash buys nothing and
//! costs a visible share of every lookup.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Fibonacci hashing of one u64 (other writes fold bytes in the same way).
#[derive(Default, Clone, Copy)]
pub(crate) struct U64Hasher(u64);

impl Hasher for U64Hasher {
    fn finish(&self) -> u64 {
        // The product's low bits stay zero for keys with trailing zeros
        // (page and slot offsets), and the table indexes by low bits:
        // rotate the well-mixed high bits down.
        self.0.rotate_left(26)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A HashMap keyed by u64 with [`U64Hasher`].
pub(crate) type U64Map<V> = HashMap<u64, V, BuildHasherDefault<U64Hasher>>;

/// A HashSet of u64 with [`U64Hasher`].
pub(crate) type U64Set = HashSet<u64, BuildHasherDefault<U64Hasher>>;

#[cfg(test)]
mod tests {
    use std::hash::{BuildHasher, BuildHasherDefault};

    use super::U64Hasher;

    /// Page offsets differ only above bit 12: their hashes must still
    /// differ in the low bits a hash table indexes by.
    #[test]
    fn page_offsets_spread_over_low_bits() {
        let b = BuildHasherDefault::<U64Hasher>::default();
        let mut buckets = std::collections::HashSet::new();
        for p in 0..1024u64 {
            buckets.insert(b.hash_one(p * 4096) & 1023);
        }
        assert!(buckets.len() > 600, "only {} of 1024 buckets used", buckets.len());
    }
}
