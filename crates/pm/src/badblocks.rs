//! Emulated media errors: a list of poisoned byte ranges whose reads fail
//! with [`PmError::Media`], shared by [`crate::MemRegion`] (poison set by
//! tests) and [`crate::MmapRegion`] (poison loaded from a sidecar file).
//!
//! The sidecar stands in for the kernel's bad-block list of a PM namespace:
//! a text file `IMAGE.badblocks` next to the image, one `offset length`
//! pair per line (decimal bytes; blank lines and `#` comments are ignored).
//! `novafs inject --poison` appends to it; an [`crate::MmapRegion`] loads it
//! when the image is mapped. As on real PM, writes do not clear poison:
//! `rm IMAGE.badblocks` clears emulated poison (the next mapping of the
//! image sees none).

use std::ffi::OsString;
use std::io::{self, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{PoisonError, RwLock, RwLockWriteGuard};

use crate::error::check_range;
use crate::PmError;

/// Suffix of the sidecar file that lists an image's emulated bad blocks.
pub const SIDECAR_SUFFIX: &str = ".badblocks";

/// Poisoned byte ranges of a region.
#[derive(Debug, Default)]
pub struct BadBlocks {
    ranges: RwLock<Vec<Range<u64>>>,
    /// Set once any range was added: reads of a clean region (the normal
    /// case) skip the lock.
    any: AtomicBool,
}

impl BadBlocks {
    /// An empty list.
    pub fn new() -> BadBlocks {
        BadBlocks::default()
    }

    /// Poisons `[off, off + len)` of a region of `size` bytes.
    pub fn add(&self, off: u64, len: u64, size: u64) -> Result<(), PmError> {
        check_range(off, len, size)?;
        if len > 0 {
            self.list().push(off..off + len);
            self.any.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Clears poison from `[off, off + len)` of a region of `size` bytes.
    pub fn remove(&self, off: u64, len: u64, size: u64) -> Result<(), PmError> {
        check_range(off, len, size)?;
        let cut = off..off + len;
        let mut list = self.list();
        *list = list
            .iter()
            .flat_map(|r| [r.start..r.end.min(cut.start), r.start.max(cut.end)..r.end])
            .filter(|r| !r.is_empty())
            .collect();
        Ok(())
    }

    /// The first poisoned byte in `[off, off + len)`, if any.
    pub fn first_in(&self, off: u64, len: u64) -> Option<u64> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let end = off.saturating_add(len);
        self.ranges
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|r| r.start < end && off < r.end)
            .map(|r| r.start.max(off))
            .min()
    }

    /// Every poisoned range as `(offset, length)`, unsorted.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        self.ranges
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|r| (r.start, r.end - r.start))
            .collect()
    }

    fn list(&self) -> RwLockWriteGuard<'_, Vec<Range<u64>>> {
        // The list stays consistent even if a holder panicked.
        self.ranges.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The sidecar file of `image`: `IMAGE.badblocks`.
    pub fn sidecar(image: &Path) -> PathBuf {
        let mut name = OsString::from(image.as_os_str());
        name.push(SIDECAR_SUFFIX);
        PathBuf::from(name)
    }

    /// Loads the sidecar of `image` (a region of `size` bytes); no sidecar
    /// means no poison. A malformed line or a range outside the region is
    /// an error naming the sidecar, so a stale list is never half applied.
    pub fn load(image: &Path, size: u64) -> Result<BadBlocks, PmError> {
        let path = BadBlocks::sidecar(image);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(BadBlocks::new()),
            Err(e) => return Err(PmError::io(&path, e)),
        };
        let bad = BadBlocks::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut words = line.split_whitespace().map(str::parse::<u64>);
            let (off, len) = match (words.next(), words.next(), words.next()) {
                (Some(Ok(off)), Some(Ok(len)), None) => (off, len),
                _ => {
                    return Err(PmError::invalid(
                        &path,
                        format!(
                        "line {}: expected `offset length` in decimal bytes; remove the file to clear emulated poison",
                        i + 1
                    ),
                    ))
                }
            };
            bad.add(off, len, size).map_err(|_| {
                PmError::invalid(
                    &path,
                    format!(
                        "line {}: range {off}+{len} is outside the image ({size} bytes); remove the file to clear emulated poison",
                        i + 1
                    ),
                )
            })?;
        }
        Ok(bad)
    }

    /// Appends `[off, off + len)` to the sidecar of `image`, creating it.
    pub fn append(image: &Path, off: u64, len: u64) -> Result<(), PmError> {
        let path = BadBlocks::sidecar(image);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| PmError::io(&path, e))?;
        writeln!(f, "{off} {len}").map_err(|e| PmError::io(&path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_found_split_and_bounds_checked() {
        let b = BadBlocks::new();
        assert_eq!(b.first_in(0, u64::MAX), None);
        b.add(100, 10, 1000).unwrap();
        b.add(50, 1, 1000).unwrap();
        b.add(7, 0, 1000).unwrap(); // empty: ignored
        assert_eq!(b.first_in(0, 1000), Some(50));
        assert_eq!(b.first_in(51, 49), None);
        assert_eq!(b.first_in(51, 51), Some(100));
        assert_eq!(b.first_in(105, 1), Some(105));
        assert!(matches!(b.add(999, 2, 1000), Err(PmError::OutOfBounds { .. })));
        b.remove(100, 5, 1000).unwrap();
        assert_eq!(b.ranges(), [(105, 5), (50, 1)]);
        b.remove(0, 1000, 1000).unwrap();
        assert_eq!(b.first_in(0, 1000), None);
    }

    #[test]
    fn sidecar_round_trips_and_missing_means_clean() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("a.img");
        assert_eq!(BadBlocks::sidecar(&img), dir.path().join("a.img.badblocks"));
        assert!(BadBlocks::load(&img, 8192).unwrap().ranges().is_empty());
        BadBlocks::append(&img, 4096, 8).unwrap();
        BadBlocks::append(&img, 10, 1).unwrap();
        let b = BadBlocks::load(&img, 8192).unwrap();
        assert_eq!(b.ranges(), [(4096, 8), (10, 1)]);
        assert_eq!(
            std::fs::read_to_string(BadBlocks::sidecar(&img)).unwrap(),
            "4096 8\n10 1\n"
        );
    }

    #[test]
    fn sidecar_accepts_comments_and_rejects_bad_lines_naming_them() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("b.img");
        let side = BadBlocks::sidecar(&img);
        std::fs::write(&side, "# poisoned by hand\n\n  64 64  # a line\n").unwrap();
        assert_eq!(BadBlocks::load(&img, 4096).unwrap().ranges(), [(64, 64)]);
        for (text, what) in [
            ("1 2\n0x10 4\n", "line 2"),
            ("5\n", "line 1"),
            ("1 2 3\n", "line 1"),
            ("1 1\n4090 10\n", "outside the image"),
        ] {
            std::fs::write(&side, text).unwrap();
            let err = BadBlocks::load(&img, 4096).unwrap_err();
            assert!(matches!(err, PmError::Invalid { .. }), "{err}");
            let msg = err.to_string();
            assert!(msg.contains(what) && msg.contains("badblocks"), "{msg}");
            assert!(msg.contains("remove the file"), "{msg}");
        }
    }
}
