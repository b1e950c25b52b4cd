//! File data protection (NOVA-Fortis §4.3, Fig. 6). Each 4 KiB data page
//! is a stripe of eight 512-byte strips. Two copies of each strip's CRC32C
//! live in two checksum areas, one before the data area and one after it,
//! and a 512-byte RAID-4 parity strip (the XOR of the eight) in a parity
//! area after the data: data, checksums and parity apart.
//!
//! Data is copy-on-write, so protecting it is simple: a page is written
//! with its checksums and parity (computed in the same pass, `pm::stripe`)
//! while it is still free, all flushed, before the log commit that maps it,
//! whose R1 fence makes them durable with the data. A read checks each strip it returns against the first checksum
//! copy, then the second (repairing the first when only the second
//! matches); a strip that matches neither, or that the media cannot read,
//! is rebuilt from parity and the other seven strips and must then match a
//! checksum. Two bad strips in a page make that page EIO.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::hash::U64Set;
use crate::lock::{Mutex, Rank};
use pm::latency::{self, Part};
use pm::{PmError, Region};

use crate::error::{corrupt, Error, Result};
use crate::layout::{Strips, CSUM_BYTES, PAGE_SIZE, STRIPS_PER_PAGE, STRIP_SIZE};

const STRIP: usize = STRIP_SIZE as usize;
const PAGE: usize = PAGE_SIZE as usize;

/// What reading a range of a page found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Checked {
    /// Strips rebuilt from parity, and checksum copies rewritten.
    pub repaired: u64,
}

use pm::stripe::{page_crcs, page_sums, strip_crc};

// The strip geometry of the layout is the one `pm::stripe` computes.
const _: () = assert!(STRIP == pm::stripe::STRIP && PAGE == pm::stripe::PAGE);

/// `page` as an array: data pages are written and scrubbed whole.
fn whole(page: &[u8]) -> Result<&[u8; PAGE]> {
    page.try_into()
        .map_err(|_| Error::Invalid("a data page is written whole"))
}

fn csums_of(bytes: &[u8]) -> [u32; STRIPS_PER_PAGE] {
    let mut out = [0u32; STRIPS_PER_PAGE];
    for (c, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *c = u32::from_le_bytes(b.try_into().unwrap_or_default());
    }
    out
}

fn csum_bytes(c: &[u32; STRIPS_PER_PAGE]) -> [u8; CSUM_BYTES as usize] {
    let mut out = [0u8; CSUM_BYTES as usize];
    for (o, v) in out.chunks_exact_mut(4).zip(c) {
        o.copy_from_slice(&v.to_le_bytes());
    }
    out
}

/// Data pages whose checksums and parity may be stale: mapped writable by
/// a DAX mapping (caveat DAXor, Fortis §3.4; `mmap`). Reads return them as
/// they are, and scrub leaves them alone, until they are resealed.
#[derive(Debug)]
pub(crate) struct Stale {
    pages: Mutex<U64Set>,
    /// The set's size, read without its lock on every read of a page.
    count: AtomicUsize,
}

impl Default for Stale {
    fn default() -> Self {
        Stale {
            pages: Mutex::new(Rank::Strips, U64Set::default()),
            count: AtomicUsize::new(0),
        }
    }
}

impl Stale {
    pub(crate) fn contains(&self, page: u64) -> bool {
        self.count.load(Ordering::Acquire) != 0 && self.pages.lock().contains(&page)
    }

    pub(crate) fn insert(&self, page: u64) {
        if self.pages.lock().insert(page) {
            self.count.fetch_add(1, Ordering::Release);
        }
    }

    pub(crate) fn remove(&self, page: u64) {
        if self.pages.lock().remove(&page) {
            self.count.fetch_sub(1, Ordering::Release);
        }
    }
}

impl Strips {
    /// Whether the image keeps anything for its data.
    pub fn enabled(&self) -> bool {
        self.csum[0] != 0 || self.parity != 0
    }

    fn index(&self, page: u64) -> Result<u64> {
        if page < self.data_start || page >= self.data_end || !page.is_multiple_of(PAGE_SIZE) {
            return Err(corrupt!(
                DataPage,
                at = page,
                "data page {page:#x} is outside the data area"
            ));
        }
        Ok((page - self.data_start) / PAGE_SIZE)
    }

    /// Writes `bytes`, the new contents of the free page `page`, with its
    /// checksums and parity (computed while the page is streamed), all
    /// flushed but not fenced: the commit's R1 fence, which must follow,
    /// makes them durable together.
    pub fn write(&self, r: &dyn Region, page: u64, bytes: &[u8]) -> Result<()> {
        let bytes = whole(bytes)?;
        if !self.enabled() {
            return Ok(latency::timed(Part::DataCopy, || r.write_nt(page, bytes))?);
        }
        let _span = latency::enter(Part::DataProtect);
        let i = self.index(page)?;
        let sums = latency::timed(Part::DataCopy, || r.write_nt_summed(page, bytes))?;
        self.put_sums(r, i, &sums)
    }

    /// Recomputes `page`'s checksums and parity from what it holds now: a
    /// page a DAX mapping changed behind them (caveat DAXor, Fortis §3.4),
    /// no longer writable. Flushed, not fenced: the log entry that says the
    /// page is protected again fences first (R1).
    pub fn reseal(&self, r: &dyn Region, page: u64) -> Result<()> {
        if !self.enabled() {
            return Ok(());
        }
        let i = self.index(page)?;
        let mut buf = [0u8; PAGE];
        r.read(page, &mut buf)?;
        self.put_sums(r, i, &page_sums(&buf))
    }

    /// Relaxed mode (Fortis §4.6): bytes `at..` of data page `page` become
    /// `bytes` in place. `old` holds the strips they touch as they were
    /// (read checked, from strip `at / STRIP` on, whole strips). Writes the
    /// bytes, both checksum copies of those strips, and the parity patched
    /// by their difference (old ⊕ new), all flushed, not fenced: the
    /// caller's intent names the page first (`journal::intent`) and its
    /// commit's fence makes them durable together (R2).
    pub fn overwrite(&self, r: &dyn Region, page: u64, at: usize, bytes: &[u8], old: &[u8]) -> Result<()> {
        if !self.enabled() {
            return Ok(latency::timed(Part::DataCopy, || r.write_nt(page + at as u64, bytes))?);
        }
        let _span = latency::enter(Part::DataProtect);
        // Everything that can fail (a bad argument, an unreadable parity
        // strip) fails before the first byte changes.
        let i = self.index(page)?;
        let lo = at / STRIP;
        let mut new = old.to_vec();
        let start = at - lo * STRIP;
        new.get_mut(start..start + bytes.len())
            .filter(|_| old.len().is_multiple_of(STRIP))
            .ok_or(Error::Invalid("an in-place overwrite's old strips do not cover it"))?
            .copy_from_slice(bytes);
        let crcs: Vec<u8> = new
            .chunks_exact(STRIP)
            .flat_map(|s| strip_crc(s).to_le_bytes())
            .collect();
        let parity_at = self.parity + i * STRIP_SIZE;
        let mut parity = [0u8; STRIP];
        if self.parity != 0 {
            r.read(parity_at, &mut parity)?;
            for (o, n) in old.chunks_exact(STRIP).zip(new.chunks_exact(STRIP)) {
                for ((p, a), b) in parity.iter_mut().zip(o).zip(n) {
                    *p ^= a ^ b;
                }
            }
        }
        latency::timed(Part::DataCopy, || r.write_nt(page + at as u64, bytes))?;
        if self.csum[0] != 0 {
            for area in self.csum {
                put(r, area + i * CSUM_BYTES + 4 * lo as u64, &crcs)?;
            }
        }
        if self.parity != 0 {
            put(r, parity_at, &parity)?;
        }
        Ok(())
    }

    /// Writes (flushed, not fenced) both checksum copies and the parity of
    /// page index `i`.
    fn put_sums(&self, r: &dyn Region, i: u64, sums: &pm::stripe::PageSums) -> Result<()> {
        if self.csum[0] != 0 {
            let c = csum_bytes(&sums.crc);
            for area in self.csum {
                put(r, area + i * CSUM_BYTES, &c)?;
            }
        }
        if self.parity != 0 {
            put(r, self.parity + i * STRIP_SIZE, &sums.parity)?;
        }
        Ok(())
    }

    /// Reads `out.len()` bytes at `in_page` of data page `page`, checking
    /// every strip they touch and rebuilding a bad one; with `repair` the
    /// rebuilt strip and any wrong checksum copy are written back. An
    /// unrecoverable strip is an error naming the page. Whole strips are
    /// read straight into `out`; a range that cuts one goes through DRAM.
    pub fn read(&self, r: &dyn Region, page: u64, in_page: usize, out: &mut [u8], repair: bool) -> Result<Checked> {
        if !self.enabled() {
            latency::timed(Part::DataCopy, || r.read(page + in_page as u64, out))?;
            return Ok(Checked::default());
        }
        let _span = latency::enter(Part::DataProtect);
        let lo = in_page / STRIP;
        let hi = (in_page + out.len()).div_ceil(STRIP);
        if lo * STRIP == in_page && hi * STRIP == in_page + out.len() {
            return self.check(r, page, lo, out, repair);
        }
        let mut buf = [0u8; PAGE];
        let checked = self.check(r, page, lo, &mut buf[lo * STRIP..hi * STRIP], repair)?;
        out.copy_from_slice(&buf[in_page..in_page + out.len()]);
        Ok(checked)
    }

    /// Reads strips `lo..` of `page` into `view` (whole strips) and checks
    /// them (see [`Strips::read`]).
    fn check(&self, r: &dyn Region, page: u64, lo: usize, view: &mut [u8], repair: bool) -> Result<Checked> {
        let i = self.index(page)?;
        let hi = lo + view.len() / STRIP;
        let strip = |s: usize| (s - lo) * STRIP..(s - lo + 1) * STRIP;
        let mut bad = [false; STRIPS_PER_PAGE];
        // One read for the whole run; strip by strip only after an error.
        if latency::timed(Part::DataCopy, || r.read(page + (lo * STRIP) as u64, view)).is_err() {
            for s in lo..hi {
                bad[s] = media(r.read(page + (s * STRIP) as u64, &mut view[strip(s)]))?;
            }
        }
        let mut checked = Checked::default();
        if self.csum[0] != 0 {
            let first = self.load_csums(r, 0, i)?;
            let mut second = None;
            // A whole page is checked eight strips side by side.
            let crcs = match <&[u8; PAGE]>::try_from(&*view) {
                Ok(page) => page_crcs(page),
                Err(_) => std::array::from_fn(|s| {
                    if (lo..hi).contains(&s) {
                        strip_crc(&view[strip(s)])
                    } else {
                        0
                    }
                }),
            };
            for s in lo..hi {
                if bad[s] {
                    continue;
                }
                let crc = crcs[s];
                if first.is_some_and(|c| c[s] == crc) {
                    continue;
                }
                let other = match second {
                    Some(c) => c,
                    None => *second.insert(self.load_csums(r, 1, i)?),
                };
                if other.is_some_and(|c| c[s] == crc) {
                    // The first copy is the damaged one.
                    if repair {
                        self.put_csum(r, 0, i, s, crc)?;
                    }
                    checked.repaired += 1;
                } else {
                    bad[s] = true;
                }
            }
        }
        let bad_strips: Vec<usize> = (0..STRIPS_PER_PAGE).filter(|&s| bad[s]).collect();
        if let [s] = bad_strips[..] {
            let rebuilt = self.rebuild(r, page, i, s)?;
            if repair {
                put(r, page + (s * STRIP) as u64, &rebuilt)?;
                if self.csum[0] != 0 {
                    let crc = strip_crc(&rebuilt);
                    for copy in 0..2 {
                        if self.load_csums(r, copy, i)?.is_none_or(|c| c[s] != crc) {
                            self.put_csum(r, copy, i, s, crc)?;
                        }
                    }
                }
            }
            view[strip(s)].copy_from_slice(&rebuilt);
            checked.repaired += 1;
        } else if !bad_strips.is_empty() {
            return Err(corrupt!(
                DataPage,
                at = page,
                "data page {page:#x}: strips {bad_strips:?} are damaged and parity rebuilds only one"
            ));
        }
        if repair && checked.repaired > 0 {
            r.fence(); // The repaired copies are durable before they are relied on.
        }
        Ok(checked)
    }

    /// Scrubs a whole page: its strips are checked (and rebuilt) as a read
    /// does, then both checksum copies and the parity are compared with
    /// what the verified strips give and rewritten where they differ, so
    /// redundancy a read never needs is whole again too.
    pub fn scrub_page(&self, r: &dyn Region, page: u64, buf: &mut [u8], repair: bool) -> Result<Checked> {
        let mut checked = self.read(r, page, 0, buf, repair)?;
        if !self.enabled() {
            return Ok(checked);
        }
        let i = self.index(page)?;
        if self.csum[0] != 0 {
            let want = page_crcs(whole(buf)?);
            for copy in 0..2 {
                if self.load_csums(r, copy, i)? != Some(want) {
                    if repair {
                        put(r, self.csum[copy] + i * CSUM_BYTES, &csum_bytes(&want))?;
                    }
                    checked.repaired += 1;
                }
            }
        }
        if self.parity != 0 {
            let want = page_sums(whole(buf)?).parity;
            let mut have = [0u8; STRIP];
            let at = self.parity + i * STRIP_SIZE;
            if media(r.read(at, &mut have))? || have != want {
                if repair {
                    put(r, at, &want)?;
                }
                checked.repaired += 1;
            }
        }
        if repair && checked.repaired > 0 {
            r.fence(); // Rewritten redundancy is durable before it is relied on.
        }
        Ok(checked)
    }

    /// Strip `s` of page `page` rebuilt from the parity and the other
    /// seven strips, checked against a checksum copy when there are any.
    fn rebuild(&self, r: &dyn Region, page: u64, i: u64, s: usize) -> Result<[u8; STRIP]> {
        let lost = || {
            corrupt!(
                DataPage,
                at = page,
                "data page {page:#x}: strip {s} is damaged and cannot be rebuilt"
            )
        };
        if self.parity == 0 {
            return Err(lost());
        }
        let mut strip = [0u8; STRIP];
        r.read(self.parity + i * STRIP_SIZE, &mut strip).map_err(|_| lost())?;
        let mut other = [0u8; STRIP];
        for t in (0..STRIPS_PER_PAGE).filter(|&t| t != s) {
            r.read(page + (t * STRIP) as u64, &mut other).map_err(|_| lost())?;
            for (a, b) in strip.iter_mut().zip(other) {
                *a ^= b;
            }
        }
        if self.csum[0] != 0 {
            let crc = strip_crc(&strip);
            let matches = |copy| self.load_csums(r, copy, i).map(|c| c.is_some_and(|c| c[s] == crc));
            if !(matches(0)? || matches(1)?) {
                return Err(lost());
            }
        }
        Ok(strip)
    }

    /// Checksum copy `copy` of page index `i`; None when the media cannot
    /// read it.
    fn load_csums(&self, r: &dyn Region, copy: usize, i: u64) -> Result<Option<[u32; STRIPS_PER_PAGE]>> {
        let mut b = [0u8; CSUM_BYTES as usize];
        Ok((!media(r.read(self.csum[copy] + i * CSUM_BYTES, &mut b))?).then(|| csums_of(&b)))
    }

    fn put_csum(&self, r: &dyn Region, copy: usize, i: u64, s: usize, crc: u32) -> Result<()> {
        put(r, self.csum[copy] + i * CSUM_BYTES + 4 * s as u64, &crc.to_le_bytes())
    }
}

/// Cached stores of `bytes` at `off`, flushed; durable at the next fence.
fn put(r: &dyn Region, off: u64, bytes: &[u8]) -> Result<()> {
    r.write(off, bytes)?;
    Ok(r.flush(off, bytes.len() as u64)?)
}

/// True for a media error (the bytes are lost, not the operation).
fn media(r: std::result::Result<(), PmError>) -> Result<bool> {
    match r {
        Ok(()) => Ok(false),
        Err(PmError::Media { .. }) => Ok(true),
        Err(e) => Err(Error::Pm(e)),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use pm::MemRegion;

    use super::*;

    const DS: u64 = 4 * PAGE_SIZE;
    const PAGES: u64 = 4;

    /// A region with a 4-page data area, the checksum areas and parity
    /// after it.
    fn setup(csum: bool, parity: bool) -> (Arc<MemRegion>, Strips) {
        let mem = Arc::new(MemRegion::new(16 * PAGE_SIZE));
        let after = DS + PAGES * PAGE_SIZE;
        let strips = Strips {
            data_start: DS,
            data_end: after,
            csum: if csum { [after, after + PAGE_SIZE] } else { [0, 0] },
            parity: if parity { after + 2 * PAGE_SIZE } else { 0 },
        };
        (mem, strips)
    }

    fn page_bytes(seed: u8) -> Vec<u8> {
        (0..PAGE)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    fn sealed(csum: bool, parity: bool) -> (Arc<MemRegion>, Strips, Vec<u8>) {
        let (mem, s) = setup(csum, parity);
        let data = page_bytes(7);
        let page = DS + PAGE_SIZE;
        s.write(&*mem, page, &data).unwrap();
        mem.fence();
        (mem, s, data)
    }

    const P: u64 = DS + PAGE_SIZE;

    fn read_all(mem: &MemRegion, s: &Strips, repair: bool) -> Result<(Vec<u8>, Checked)> {
        let mut out = vec![0u8; PAGE];
        let c = s.read(mem, P, 0, &mut out, repair)?;
        Ok((out, c))
    }

    #[test]
    fn a_sealed_page_reads_back_whole_and_in_pieces() {
        let (mem, s, data) = sealed(true, true);
        assert_eq!(read_all(&mem, &s, true).unwrap(), (data.clone(), Checked::default()));
        let mut piece = vec![0u8; 1000];
        s.read(&*mem, P, 700, &mut piece, true).unwrap();
        assert_eq!(piece, data[700..1700]);
    }

    #[test]
    fn one_bad_strip_is_rebuilt_from_parity_and_written_back() {
        let (mem, s, data) = sealed(true, true);
        mem.write(P + 3 * STRIP_SIZE + 10, &[0xAA; 20]).unwrap();
        // A read-only reader gets the right bytes and leaves the media.
        let (got, c) = read_all(&mem, &s, false).unwrap();
        assert_eq!((got, c.repaired), (data.clone(), 1));
        assert_ne!(
            mem.snapshot()[(P + 3 * STRIP_SIZE) as usize..][..STRIP],
            data[3 * STRIP..4 * STRIP]
        );
        let (got, c) = read_all(&mem, &s, true).unwrap();
        assert_eq!((got, c.repaired), (data.clone(), 1));
        assert_eq!(read_all(&mem, &s, true).unwrap().1.repaired, 0, "repaired on the media");
        // Reading a piece that does not touch the bad strip finds nothing.
        mem.write(P + 6 * STRIP_SIZE, &[1]).unwrap();
        let mut piece = vec![0u8; 100];
        assert_eq!(s.read(&*mem, P, 0, &mut piece, true).unwrap().repaired, 0);
    }

    #[test]
    fn a_poisoned_strip_is_rebuilt_even_without_checksums() {
        for csum in [true, false] {
            let (mem, s, data) = sealed(csum, true);
            mem.poison(P + 5 * STRIP_SIZE + 1, 1).unwrap();
            let (got, c) = read_all(&mem, &s, false).unwrap();
            assert_eq!((got, c.repaired), (data.clone(), 1), "csum {csum}");
        }
    }

    #[test]
    fn a_damaged_checksum_copy_is_repaired_from_the_data_and_the_other_copy() {
        let (mem, s, data) = sealed(true, true);
        let i = 1;
        mem.write(s.csum[0] + i * CSUM_BYTES + 8, &[0, 0, 0, 0]).unwrap();
        let (got, c) = read_all(&mem, &s, true).unwrap();
        assert_eq!((got, c.repaired), (data.clone(), 1));
        assert_eq!(read_all(&mem, &s, true).unwrap().1.repaired, 0);
        // The second copy damaged: nothing reads it while the first matches.
        mem.write(s.csum[1] + i * CSUM_BYTES, &[9; 32]).unwrap();
        assert_eq!(read_all(&mem, &s, true).unwrap().1.repaired, 0);
    }

    #[test]
    fn two_bad_strips_or_no_parity_is_eio_for_that_page() {
        let (mem, s, _) = sealed(true, true);
        mem.write(P + 1, &[0x55]).unwrap();
        mem.write(P + 7 * STRIP_SIZE, &[0x55]).unwrap();
        let e = read_all(&mem, &s, true).unwrap_err();
        assert_eq!(e.errno(), libc::EIO);
        assert!(e.to_string().contains("strips [0, 7]"), "{e}");
        let (mem, s, _) = sealed(true, false);
        mem.write(P + 1, &[0x55]).unwrap();
        assert_eq!(read_all(&mem, &s, true).unwrap_err().errno(), libc::EIO);
        // Damaged parity is noticed only when it is needed, then EIO.
        let (mem, s, _) = sealed(true, true);
        mem.write(s.parity + STRIP_SIZE, &[1]).unwrap();
        mem.write(P + 2 * STRIP_SIZE, &[1]).unwrap();
        assert_eq!(read_all(&mem, &s, true).unwrap_err().errno(), libc::EIO);
    }

    #[test]
    fn a_scrub_rewrites_the_second_checksum_copy_and_parity_a_read_never_needs() {
        let (mem, s, data) = sealed(true, true);
        mem.write(s.csum[1] + CSUM_BYTES + 4, &[1, 2]).unwrap();
        mem.write(s.parity + STRIP_SIZE + 100, &[3]).unwrap();
        assert_eq!(read_all(&mem, &s, true).unwrap().1.repaired, 0, "a read needs neither");
        let mut buf = vec![0u8; PAGE];
        assert_eq!(s.scrub_page(&*mem, P, &mut buf, true).unwrap().repaired, 2);
        assert_eq!(buf, data);
        assert_eq!(s.scrub_page(&*mem, P, &mut buf, true).unwrap().repaired, 0);
        // Now parity rebuilds a strip again.
        mem.write(P + 4 * STRIP_SIZE, &[0x77]).unwrap();
        assert_eq!(read_all(&mem, &s, true).unwrap(), (data, Checked { repaired: 1 }));
    }

    /// Relaxed mode's in-place overwrite leaves checksums and parity as a
    /// fresh write of the new page would, in every protection setting,
    /// and a strip it touches can still be rebuilt from the patched parity.
    #[test]
    fn an_overwrite_in_place_patches_checksums_and_parity_as_a_rewrite_would() {
        for (csum, parity) in [(true, true), (true, false), (false, true), (false, false)] {
            let (mem, s, mut data) = sealed(csum, parity);
            for (at, len, seed) in [(10usize, 7usize, 1u8), (500, 40, 2), (1000, 1700, 3), (0, 512, 4)] {
                let bytes: Vec<u8> = (0..len).map(|i| (i as u8) ^ seed.wrapping_mul(77)).collect();
                let lo = at / STRIP * STRIP;
                let hi = (at + len).div_ceil(STRIP) * STRIP;
                let mut old = vec![0u8; hi - lo];
                s.read(&*mem, P, lo, &mut old, true).unwrap();
                s.overwrite(&*mem, P, at, &bytes, &old).unwrap();
                mem.fence();
                data[at..at + len].copy_from_slice(&bytes);
            }
            let (fresh, s2) = setup(csum, parity);
            s2.write(&*fresh, P, &data).unwrap();
            let tail = |m: &MemRegion| {
                let mut v = vec![0u8; (4 * PAGE_SIZE) as usize];
                m.read(DS + PAGES * PAGE_SIZE, &mut v).unwrap();
                v
            };
            assert!(
                tail(&mem) == tail(&fresh),
                "csum {csum} parity {parity}: redundancy differs"
            );
            assert!(read_all(&mem, &s, false).unwrap() == (data.clone(), Checked::default()));
            if csum && parity {
                mem.write(P + 2 * STRIP_SIZE + 5, &[0xEE; 30]).unwrap();
                let rebuilt = read_all(&mem, &s, false).unwrap();
                assert!(
                    rebuilt == (data, Checked { repaired: 1 }),
                    "the patched parity rebuilds no strip"
                );
            }
        }
    }

    #[test]
    fn without_protection_reads_are_plain() {
        let (mem, s) = setup(false, false);
        assert!(!s.enabled());
        s.write(&*mem, P, &page_bytes(1)).unwrap();
        mem.fence();
        assert_eq!(read_all(&mem, &s, true).unwrap(), (page_bytes(1), Checked::default()));
        mem.write(P, &[3; 10]).unwrap();
        let mut out = [0u8; 10];
        s.read(&*mem, P, 0, &mut out, true).unwrap();
        assert_eq!(out, [3; 10]);
    }
}
