//! A heap-backed [`Region`] for tests.
//!
//! Owns [`MemRegion`]: zero-filled memory with the same access rules as a real
//! mapping, plus fault injection ([`MemRegion::poison`] makes reads of a range
//! fail like a media error) and whole-image snapshots for building crash
//! images. Nothing here is durable; flushes and fences only check their
//! arguments.

use std::fmt;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{check_range, check_u64};
use crate::{BadBlocks, PmError, Region, RegionKind};

/// A region in heap memory, for tests.
pub struct MemRegion {
    /// The bytes, as words: `AtomicU64` gives 8-byte alignment for
    /// `store_u64` and interior mutability, so writes through `&self` are
    /// sound. Byte accesses go through raw pointers into it.
    words: Box<[AtomicU64]>,
    len: u64,
    /// Byte ranges whose reads fail with [`PmError::Media`].
    poisoned: BadBlocks,
}

impl MemRegion {
    /// A zero-filled region of `size` bytes.
    pub fn new(size: u64) -> MemRegion {
        let words = (0..size.div_ceil(8)).map(|_| AtomicU64::new(0)).collect();
        MemRegion {
            words,
            len: size,
            poisoned: BadBlocks::new(),
        }
    }

    /// A region holding `bytes` (e.g. a crash image from [`MemRegion::snapshot`]).
    pub fn from_bytes(bytes: Vec<u8>) -> MemRegion {
        let region = MemRegion::new(bytes.len() as u64);
        // SAFETY: the region has exactly `bytes.len()` bytes and is new.
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), region.base(), bytes.len()) };
        region
    }

    /// A copy of every byte (poisoned ranges included, as last written).
    pub fn snapshot(&self) -> Vec<u8> {
        let mut bytes = vec![0u8; self.len as usize];
        // SAFETY: both sides hold `len` bytes.
        unsafe { ptr::copy_nonoverlapping(self.base(), bytes.as_mut_ptr(), bytes.len()) };
        bytes
    }

    /// Makes reads overlapping `[off, off + len)` fail with
    /// [`PmError::Media`] until [`MemRegion::unpoison`]. Writes do not clear
    /// poison (on real PM only the kernel can).
    pub fn poison(&self, off: u64, len: u64) -> Result<(), PmError> {
        self.poisoned.add(off, len, self.len)
    }

    /// Clears poison from `[off, off + len)`.
    pub fn unpoison(&self, off: u64, len: u64) -> Result<(), PmError> {
        self.poisoned.remove(off, len, self.len)
    }

    fn base(&self) -> *mut u8 {
        // Writes through this pointer are allowed: the words are `UnsafeCell`s.
        self.words.as_ptr().cast::<u8>().cast_mut()
    }
}

impl fmt::Debug for MemRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemRegion").field("len", &self.len).finish()
    }
}

impl Region for MemRegion {
    fn len(&self) -> u64 {
        self.len
    }

    fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), PmError> {
        check_range(off, buf.len() as u64, self.len)?;
        if let Some(bad) = self.poisoned.first_in(off, buf.len() as u64) {
            return Err(PmError::Media { off: bad });
        }
        // SAFETY: in bounds (checked above); `buf` is not part of the region.
        unsafe { ptr::copy_nonoverlapping(self.base().add(off as usize), buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    fn write(&self, off: u64, data: &[u8]) -> Result<(), PmError> {
        check_range(off, data.len() as u64, self.len)?;
        // SAFETY: in bounds (checked above); `data` is not part of the region.
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), self.base().add(off as usize), data.len()) };
        Ok(())
    }

    fn write_nt(&self, off: u64, data: &[u8]) -> Result<(), PmError> {
        // No cache to bypass: heap memory is never durable anyway.
        self.write(off, data)
    }

    fn zero_nt(&self, off: u64, len: u64) -> Result<(), PmError> {
        check_range(off, len, self.len)?;
        // SAFETY: in bounds (checked above).
        unsafe { ptr::write_bytes(self.base().add(off as usize), 0, len as usize) };
        Ok(())
    }

    fn flush(&self, off: u64, len: u64) -> Result<(), PmError> {
        check_range(off, len, self.len)
    }

    fn fence(&self) {}

    fn store_u64(&self, off: u64, val: u64) -> Result<(), PmError> {
        check_u64(off, self.len)?;
        self.words[(off / 8) as usize].store(val, Ordering::Release);
        Ok(())
    }

    fn load_u64(&self, off: u64) -> Result<u64, PmError> {
        check_u64(off, self.len)?;
        if let Some(bad) = self.poisoned.first_in(off, 8) {
            return Err(PmError::Media { off: bad });
        }
        Ok(self.words[(off / 8) as usize].load(Ordering::Acquire))
    }

    fn kind(&self) -> RegionKind {
        RegionKind::Memory
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_region_is_zeroed_and_round_trips() {
        let r = MemRegion::new(4096);
        assert_eq!(r.len(), 4096);
        assert!(!r.is_empty());
        assert_eq!(r.kind(), RegionKind::Memory);
        let mut buf = [1u8; 100];
        r.read(3000, &mut buf).unwrap();
        assert_eq!(buf, [0u8; 100]);
        r.write(1, b"hello").unwrap();
        r.write_nt(4090, b"tail!!").unwrap();
        let mut buf = [0u8; 5];
        r.read(1, &mut buf).unwrap();
        assert_eq!(&buf, b"hello");
        let mut buf = [0u8; 6];
        r.read(4090, &mut buf).unwrap();
        assert_eq!(&buf, b"tail!!");
        r.zero_nt(2, 3).unwrap();
        let mut buf = [0u8; 5];
        r.read(1, &mut buf).unwrap();
        assert_eq!(&buf, b"h\0\0\0o");
        r.persist(0, 4096).unwrap();
    }

    #[test]
    fn every_access_is_bounds_checked() {
        let r = MemRegion::new(4096);
        let oob = |e: PmError| matches!(e, PmError::OutOfBounds { size: 4096, .. });
        assert!(oob(r.read(4095, &mut [0; 2]).unwrap_err()));
        assert!(oob(r.write(4096, &[0]).unwrap_err()));
        assert!(oob(r.write_nt(u64::MAX, &[0]).unwrap_err()));
        assert!(oob(r.zero_nt(1, u64::MAX).unwrap_err()));
        assert!(oob(r.flush(4000, 97).unwrap_err()));
        assert!(oob(r.store_u64(4096, 1).unwrap_err()));
        assert!(oob(r.load_u64(u64::MAX - 7).unwrap_err()));
        assert!(oob(r.poison(4096, 1).unwrap_err()));
        assert!(r.read(4096, &mut []).is_ok());
    }

    #[test]
    fn u64_accesses_are_atomic_views_and_need_alignment() {
        let r = MemRegion::new(64);
        r.commit_u64(8, 0xdead_beef_0bad_f00d).unwrap();
        assert_eq!(r.load_u64(8).unwrap(), 0xdead_beef_0bad_f00d);
        let mut buf = [0u8; 8];
        r.read(8, &mut buf).unwrap();
        assert_eq!(u64::from_ne_bytes(buf), 0xdead_beef_0bad_f00d);
        assert!(matches!(r.store_u64(12, 1), Err(PmError::Misaligned { off: 12 })));
        assert!(matches!(r.load_u64(1), Err(PmError::Misaligned { off: 1 })));
    }

    #[test]
    fn poisoned_range_reads_fail_until_unpoisoned() {
        let r = MemRegion::new(8192);
        r.write(4096, &[7u8; 64]).unwrap();
        r.poison(4100, 10).unwrap();
        let mut buf = [0u8; 64];
        let err = r.read(4096, &mut buf).unwrap_err();
        assert!(matches!(err, PmError::Media { off: 4100 }));
        assert_eq!(err.errno(), libc::EIO);
        assert!(matches!(r.read(4105, &mut buf), Err(PmError::Media { off: 4105 })));
        assert!(matches!(r.load_u64(4104), Err(PmError::Media { off: 4104 })));
        // Neighbours stay readable.
        r.read(4032, &mut buf).unwrap();
        r.read(4110, &mut buf).unwrap();
        // Unpoisoning part of the range leaves the rest poisoned.
        r.unpoison(4100, 5).unwrap();
        assert!(matches!(r.read(4096, &mut buf), Err(PmError::Media { off: 4105 })));
        r.unpoison(0, 8192).unwrap();
        r.read(4096, &mut buf).unwrap();
        assert_eq!(buf, [7u8; 64]);
    }

    #[test]
    fn snapshot_and_from_bytes_round_trip() {
        let r = MemRegion::new(100);
        r.write(90, b"0123456789").unwrap();
        let image = r.snapshot();
        assert_eq!(image.len(), 100);
        assert_eq!(&image[90..], b"0123456789");
        let copy = MemRegion::from_bytes(image);
        assert_eq!(copy.len(), 100);
        let mut buf = [0u8; 10];
        copy.read(90, &mut buf).unwrap();
        assert_eq!(&buf, b"0123456789");
    }
}
