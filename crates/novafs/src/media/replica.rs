//! Metadata replicas (NOVA-Fortis §4.2): the region as metadata code sees
//! it when the image keeps replicas. Every store, non-temporal write and
//! flush of a metadata byte goes to its primary and to its mirror
//! ([`Bounds::mirror`]), before the same fence: the two copies never need
//! an ordering point of their own. A crash can leave them different — each
//! 8-byte commit word old in one copy and new in the other, an entry torn
//! in one — and the rules that make the primary alone consistent (R1, R2,
//! R5) make it the one to keep: recovery copies it over the replica, which
//! completes the interrupted update as Fortis's tick-tock does. The replica
//! gets the same stores in the same order before the same fences, so it
//! obeys R1, R2 and R5 alone too: where the primary is unreadable after a
//! crash, the replica holds versions the primary's lines could hold, and
//! recovery from them reaches a legal state (FORMAT.md "A crash and a
//! damaged copy"; `novafs crashcheck --media-errors`). Reads fall back
//! to the replica line by line on a media error (so each line is always
//! read from one copy); a checksum that fails in the
//! primary is repaired from the replica by the code that knows the
//! structure (`log`, `itable`).
//!
//! Only metadata goes through this view: file data has no mirror and is
//! written through the raw region (`Ctx::data`).

use std::sync::Arc;

use pm::latency::{self, Part};
use pm::{PmError, Region, RegionKind, CACHELINE};

use crate::layout::{Bounds, PAGE_SIZE};

/// The mirroring view of a region.
pub struct Mirrored {
    inner: Arc<dyn Region>,
    bounds: Bounds,
}

impl Mirrored {
    /// The metadata view of `inner`: mirrored when `bounds` says the image
    /// keeps its replicas current, else `inner` itself.
    pub fn view(inner: Arc<dyn Region>, bounds: Bounds) -> Arc<dyn Region> {
        if bounds.live_replicas() {
            Arc::new(Mirrored { inner, bounds })
        } else {
            inner
        }
    }

    /// The pieces of `[off, off + len)` that have mirrors, as
    /// `(offset in the range, length, mirror offset)`: a range is cut at
    /// page boundaries, because mirroring reverses the order of pages.
    fn pieces(&self, off: u64, len: u64) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        let end = off.saturating_add(len);
        let mut at = off;
        std::iter::from_fn(move || {
            while at < end {
                let piece_end = (at - at % PAGE_SIZE + PAGE_SIZE).min(end);
                let piece = (at - off, piece_end - at, self.bounds.mirror(at));
                at = piece_end;
                if let (rel, n, Some(m)) = piece {
                    return Some((rel, n, m));
                }
            }
            None
        })
    }

    /// Reads `buf` at `off` cache line by cache line: each line from the
    /// primary where it is readable, else from its mirror (a line without
    /// one fails). So every read takes a given line from the same copy, and
    /// the metadata code sees one fixed mix of the two copies' lines: after
    /// a crash, a legal crash image (module comment), never the primary's
    /// version of a line in one read (a journal commit checked against a
    /// whole entry) and the replica's in the next (the same entry torn).
    fn read_around(&self, off: u64, buf: &mut [u8]) -> Result<(), PmError> {
        let end = off + buf.len() as u64;
        let mut at = off;
        while at < end {
            let line_end = (at - at % CACHELINE + CACHELINE).min(end);
            let piece = &mut buf[(at - off) as usize..(line_end - off) as usize];
            match (self.inner.read(at, piece), self.bounds.mirror(at)) {
                (Err(PmError::Media { .. }), Some(m)) => self.inner.read(m, piece)?,
                (r, _) => r?,
            }
            at = line_end;
        }
        Ok(())
    }
}

/// Compares the metadata `[off, off + len)` with its replica, page by
/// page, and with `fix` copies the primary over each replica page that
/// differs (after a crash the primary is the copy to keep: module
/// comment). Returns how many pages differed. `data` is the raw region.
pub(crate) fn sync(data: &dyn Region, bounds: Bounds, off: u64, len: u64, fix: bool) -> Result<u64, PmError> {
    let mut differ = 0;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let end = off.saturating_add(len);
    let mut at = off;
    while at < end {
        let piece_end = (at - at % PAGE_SIZE + PAGE_SIZE).min(end);
        if let Some(m) = bounds.mirror(at) {
            let n = (piece_end - at) as usize;
            a.resize(n, 0);
            b.resize(n, 0);
            // A media error in either copy is a difference too; only a
            // readable primary can be copied.
            let primary = readable(data.read(at, &mut a))?;
            let replica = readable(data.read(m, &mut b))?;
            if !(primary && replica && a == b) {
                differ += 1;
                if fix && primary {
                    data.write(m, &a)?;
                    data.flush(m, n as u64)?;
                }
            }
        }
        at = piece_end;
    }
    Ok(differ)
}

/// Whether a read succeeded: a media error is a `false`, not an error.
pub(crate) fn readable(r: Result<(), PmError>) -> Result<bool, PmError> {
    match r {
        Ok(()) => Ok(true),
        Err(PmError::Media { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

impl Region for Mirrored {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), PmError> {
        match self.inner.read(off, buf) {
            Err(PmError::Media { off: bad }) => {
                tracing::warn!(off = bad, "media error in metadata; reading its replica");
                self.read_around(off, buf)
            }
            other => other,
        }
    }

    fn write(&self, off: u64, data: &[u8]) -> Result<(), PmError> {
        self.inner.write(off, data)?;
        let _span = latency::enter(Part::Replica);
        for (rel, n, m) in self.pieces(off, data.len() as u64) {
            self.inner.write(m, &data[rel as usize..(rel + n) as usize])?;
        }
        Ok(())
    }

    fn write_nt(&self, off: u64, data: &[u8]) -> Result<(), PmError> {
        self.inner.write_nt(off, data)?;
        let _span = latency::enter(Part::Replica);
        for (rel, n, m) in self.pieces(off, data.len() as u64) {
            self.inner.write_nt(m, &data[rel as usize..(rel + n) as usize])?;
        }
        Ok(())
    }

    fn zero_nt(&self, off: u64, len: u64) -> Result<(), PmError> {
        self.inner.zero_nt(off, len)?;
        let _span = latency::enter(Part::Replica);
        for (_, n, m) in self.pieces(off, len) {
            self.inner.zero_nt(m, n)?;
        }
        Ok(())
    }

    fn flush(&self, off: u64, len: u64) -> Result<(), PmError> {
        self.inner.flush(off, len)?;
        let _span = latency::enter(Part::Replica);
        for (_, n, m) in self.pieces(off, len) {
            self.inner.flush(m, n)?;
        }
        Ok(())
    }

    fn fence(&self) {
        self.inner.fence();
    }

    fn store_u64(&self, off: u64, val: u64) -> Result<(), PmError> {
        self.inner.store_u64(off, val)?;
        let _span = latency::enter(Part::Replica);
        match self.bounds.mirror(off) {
            Some(m) => self.inner.store_u64(m, val),
            None => Ok(()),
        }
    }

    fn load_u64(&self, off: u64) -> Result<u64, PmError> {
        match (self.inner.load_u64(off), self.bounds.mirror(off)) {
            (Err(PmError::Media { .. }), Some(m)) => self.inner.load_u64(m),
            (v, _) => v,
        }
    }

    fn kind(&self) -> RegionKind {
        self.inner.kind()
    }
}

/// Copies the replica over the primary of each of `ranges` (a load read
/// them from the replica, Fortis §4.2), through the raw region `data`;
/// returns how many it copied. Uncounted and quiet: the caller says
/// whether the difference was damage.
pub(crate) fn copy_back(data: &dyn Region, bounds: Bounds, ranges: &[(u64, u64)]) -> crate::error::Result<u64> {
    let mut buf = Vec::new();
    let mut repaired = 0;
    for &(off, len) in ranges {
        let Some(m) = bounds.replica(off) else { continue };
        buf.resize(len as usize, 0);
        data.read(m, &mut buf)?;
        data.write(off, &buf)?;
        data.flush(off, len)?;
        tracing::debug!(off, len, "primary rewritten from its replica");
        repaired += 1;
    }
    data.fence(); // The copied primary is durable before it is relied on.
    Ok(repaired)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pm::MemRegion;

    const DS: u64 = 4 * PAGE_SIZE;
    const DE: u64 = 20 * PAGE_SIZE;

    fn setup() -> (Arc<MemRegion>, Arc<dyn Region>, Bounds) {
        let mem = Arc::new(MemRegion::new(24 * PAGE_SIZE));
        let bounds = Bounds {
            data_start: DS,
            data_end: DE,
            replicas: true,
            stale: false,
            dead_zone_pages: 2,
        };
        let view = Mirrored::view(mem.clone(), bounds);
        (mem, view, bounds)
    }

    fn raw(mem: &MemRegion, off: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        mem.read(off, &mut b).unwrap();
        b
    }

    #[test]
    fn mirrors_reflect_pages_about_the_middle_and_keep_offsets() {
        let (_, _, b) = setup();
        assert_eq!(b.mirror(DS), Some(DE - PAGE_SIZE));
        assert_eq!(b.mirror(DS + 100), Some(DE - PAGE_SIZE + 100));
        assert_eq!(b.mirror(DE - 1), Some(DS + PAGE_SIZE - 1));
        assert_eq!(b.mirror(b.mirror(DS + 5000).unwrap()), Some(DS + 5000), "an involution");
        assert_eq!(b.mirror(crate::layout::RESERVED_INODES_OFF + 64), Some(DE + 64));
        assert_eq!(b.mirror(0), None, "the superblock has its own replica");
        assert_eq!(b.mirror(3 * PAGE_SIZE), None, "journal rings have none");
        let off = Bounds { replicas: false, ..b };
        assert_eq!(off.mirror(DS), None);
    }

    #[test]
    fn writes_stores_and_flushes_reach_both_copies_page_by_page() {
        let (mem, view, b) = setup();
        // A write across a page boundary: its two halves mirror to pages
        // in the opposite order.
        let data: Vec<u8> = (0..200u8).collect();
        let off = DS + PAGE_SIZE - 100;
        view.write(off, &data).unwrap();
        assert_eq!(raw(&mem, off, 200), data);
        assert_eq!(raw(&mem, b.mirror(off).unwrap(), 100), data[..100]);
        assert_eq!(raw(&mem, b.mirror(DS + PAGE_SIZE).unwrap(), 100), data[100..]);
        view.store_u64(DS + 8, 77).unwrap();
        assert_eq!(mem.load_u64(b.mirror(DS + 8).unwrap()).unwrap(), 77);
        view.zero_nt(off, 200).unwrap();
        assert_eq!(raw(&mem, b.mirror(off).unwrap(), 100), vec![0; 100]);
        // Outside the data area (the journal) nothing is mirrored.
        view.write(3 * PAGE_SIZE, b"ring").unwrap();
        assert_eq!(raw(&mem, 3 * PAGE_SIZE, 4), b"ring");
    }

    #[test]
    fn a_media_error_in_the_primary_reads_the_replica() {
        let (mem, view, _) = setup();
        let data = [9u8; 300];
        let off = DS + PAGE_SIZE - 150;
        view.write(off, &data).unwrap();
        mem.poison(off + 10, 1).unwrap();
        mem.poison(DS + PAGE_SIZE + 10, 1).unwrap();
        let mut buf = [0u8; 300];
        view.read(off, &mut buf).unwrap();
        assert_eq!(buf, data);
        view.store_u64(DS + 2 * PAGE_SIZE, 5).unwrap();
        mem.poison(DS + 2 * PAGE_SIZE, 8).unwrap();
        assert_eq!(view.load_u64(DS + 2 * PAGE_SIZE).unwrap(), 5);
    }

    #[test]
    fn a_media_error_reads_only_its_own_lines_from_the_replica() {
        // The copies differ (as after a crash that left one a step behind):
        // only the unreadable line comes from the replica.
        let (mem, view, b) = setup();
        let off = DS + 3 * PAGE_SIZE;
        mem.write(off, &[1u8; 192]).unwrap();
        mem.write(b.mirror(off).unwrap(), &[2u8; 192]).unwrap();
        mem.poison(off + 64 + 5, 1).unwrap();
        let mut buf = [0u8; 180];
        view.read(off + 10, &mut buf).unwrap();
        assert_eq!(buf[..54], [1u8; 54]);
        assert_eq!(buf[54..118], [2u8; 64]);
        assert_eq!(buf[118..], [1u8; 62]);
        // A line with no replica (the journal) fails as before.
        mem.poison(3 * PAGE_SIZE + 70, 1).unwrap();
        let err = view.read(3 * PAGE_SIZE, &mut [0u8; 200]).unwrap_err();
        assert!(
            matches!(err, PmError::Media { off } if off == 3 * PAGE_SIZE + 70),
            "{err}"
        );
    }
}
