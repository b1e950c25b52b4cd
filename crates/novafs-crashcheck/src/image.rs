//! [`OverlayRegion`]: a crash image as a shared base image plus the cache
//! lines that differ from it. Building one costs nothing per byte of the
//! region, so thousands of images of one crash point share one copy of its
//! durable image; everything written by recovery goes to the overlay.
//! Lines may be poisoned (a media error, NOVA-Fortis §4.2): reads of them
//! fail, as [`pm::MemRegion::poison`]'s do.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, PoisonError, RwLock};

use pm::{PmError, Region, RegionKind, CACHELINE};

const LINE: usize = CACHELINE as usize;

/// A region reading through to `base` wherever no line was overridden.
pub struct OverlayRegion {
    base: Arc<Vec<u8>>,
    /// Lines that differ from `base`, by line offset. One lock serialises
    /// writers, which also makes `store_u64` atomic for readers.
    over: RwLock<BTreeMap<u64, [u8; LINE]>>,
    /// Lines whose reads fail with [`PmError::Media`]; writes do not clear
    /// them (on real PM only the kernel can).
    poisoned: RwLock<BTreeSet<u64>>,
}

fn check(off: u64, len: u64, size: u64) -> Result<(), PmError> {
    match off.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(PmError::OutOfBounds { off, len, size }),
    }
}

impl OverlayRegion {
    /// The image `base` with `patches` (line offset, content) applied.
    pub fn new(base: Arc<Vec<u8>>, patches: impl IntoIterator<Item = (u64, [u8; LINE])>) -> OverlayRegion {
        OverlayRegion {
            base,
            over: RwLock::new(patches.into_iter().collect()),
            poisoned: RwLock::new(BTreeSet::new()),
        }
    }

    /// Makes reads of the line at `line` (a multiple of 64) fail.
    pub fn poison(&self, line: u64) {
        self.poisoned
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(line);
    }

    fn first_poisoned(&self, off: u64, len: u64) -> Option<u64> {
        let first = off - off % CACHELINE;
        let p = self.poisoned.read().unwrap_or_else(PoisonError::into_inner);
        p.range(first..off + len).next().map(|&l| l.max(off))
    }

    /// A full copy of the current content.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = self.base.to_vec();
        let over = self.over.read().unwrap_or_else(PoisonError::into_inner);
        for (&off, l) in over.iter() {
            let at = off as usize;
            let n = LINE.min(v.len() - at);
            v[at..at + n].copy_from_slice(&l[..n]);
        }
        v
    }

    fn size(&self) -> u64 {
        self.base.len() as u64
    }
}

impl Region for OverlayRegion {
    fn len(&self) -> u64 {
        self.size()
    }

    fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), PmError> {
        check(off, buf.len() as u64, self.size())?;
        if let Some(bad) = self.first_poisoned(off, buf.len() as u64) {
            return Err(PmError::Media { off: bad });
        }
        let end = off + buf.len() as u64;
        buf.copy_from_slice(&self.base[off as usize..end as usize]);
        let over = self.over.read().unwrap_or_else(PoisonError::into_inner);
        let first = off - off % CACHELINE;
        for (&l, data) in over.range(first..end) {
            let lo = l.max(off);
            let hi = (l + CACHELINE).min(end);
            buf[(lo - off) as usize..(hi - off) as usize].copy_from_slice(&data[(lo - l) as usize..(hi - l) as usize]);
        }
        Ok(())
    }

    fn write(&self, off: u64, data: &[u8]) -> Result<(), PmError> {
        check(off, data.len() as u64, self.size())?;
        let end = off + data.len() as u64;
        let mut over = self.over.write().unwrap_or_else(PoisonError::into_inner);
        let mut l = off - off % CACHELINE;
        while l < end {
            let base = &self.base;
            let line = over.entry(l).or_insert_with(|| {
                let mut b = [0u8; LINE];
                let n = LINE.min(base.len() - l as usize);
                b[..n].copy_from_slice(&base[l as usize..l as usize + n]);
                b
            });
            let lo = l.max(off);
            let hi = (l + CACHELINE).min(end);
            line[(lo - l) as usize..(hi - l) as usize].copy_from_slice(&data[(lo - off) as usize..(hi - off) as usize]);
            l += CACHELINE;
        }
        Ok(())
    }

    fn write_nt(&self, off: u64, data: &[u8]) -> Result<(), PmError> {
        self.write(off, data)
    }

    fn zero_nt(&self, off: u64, len: u64) -> Result<(), PmError> {
        check(off, len, self.size())?;
        self.write(off, &vec![0u8; len as usize])
    }

    fn flush(&self, off: u64, len: u64) -> Result<(), PmError> {
        check(off, len, self.size())
    }

    fn fence(&self) {}

    fn store_u64(&self, off: u64, val: u64) -> Result<(), PmError> {
        if !off.is_multiple_of(8) {
            return Err(PmError::Misaligned { off });
        }
        self.write(off, &val.to_ne_bytes())
    }

    fn load_u64(&self, off: u64) -> Result<u64, PmError> {
        if !off.is_multiple_of(8) {
            return Err(PmError::Misaligned { off });
        }
        let mut b = [0u8; 8];
        self.read(off, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    }

    fn kind(&self) -> RegionKind {
        RegionKind::Memory
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn reads_see_patches_and_writes_across_lines() {
        let base = Arc::new((0..=255u8).cycle().take(1024).collect::<Vec<u8>>());
        let r = OverlayRegion::new(base.clone(), [(64, [7u8; 64])]);
        let mut buf = [0u8; 130];
        r.read(0, &mut buf).unwrap();
        assert_eq!(&buf[..64], &base[..64]);
        assert_eq!(&buf[64..128], &[7u8; 64]);
        assert_eq!(&buf[128..], &base[128..130]);
        r.write(100, &[1u8; 100]).unwrap();
        let mut b2 = [0u8; 120];
        r.read(90, &mut b2).unwrap();
        assert_eq!(&b2[..10], &[7u8; 10]);
        assert_eq!(&b2[10..110], &[1u8; 100]);
        assert_eq!(&b2[110..], &base[200..210]);
        r.store_u64(512, 42).unwrap();
        assert_eq!(r.load_u64(512).unwrap(), 42);
        assert_eq!(r.to_vec()[513..520], 42u64.to_ne_bytes()[1..]);
        assert!(r.read(1000, &mut [0u8; 30]).is_err());
        assert!(matches!(r.store_u64(4, 1), Err(PmError::Misaligned { .. })));
        // A poisoned line fails every read that touches it, until healed.
        r.poison(128);
        assert!(matches!(r.read(120, &mut [0u8; 9]), Err(PmError::Media { off: 128 })));
        assert!(matches!(r.load_u64(184), Err(PmError::Media { off: 184 })));
        r.read(0, &mut [0u8; 128]).unwrap();
        r.write(128, &[5u8; 64]).unwrap();
        assert!(r.read(130, &mut [0u8; 1]).is_err(), "a write does not clear poison");
        assert_eq!(r.to_vec()[128..192], [5u8; 64]);
        // The base is never written.
        assert_eq!(&base[100..110], &(100..110).map(|x| x as u8).collect::<Vec<_>>()[..]);
    }
}
