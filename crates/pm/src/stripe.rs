//! Checksums and parity of a 4 KiB page seen as eight 512-byte strips
//! (NOVA-Fortis §4.3, Fig. 6): the CRC32C of each strip and the strips'
//! XOR (RAID-4 parity), computed in one pass over the page — while the page
//! is streamed to persistent memory, on the write path.
//!
//! With AVX-512 and VPCLMULQDQ (chosen at run time) the eight strips are
//! folded side by side, one 64-byte block of each per step, so the eight
//! carry-less-multiply chains hide each other's latency and the parity of a
//! block column falls out of the same loads. Elsewhere each strip's CRC
//! comes from crc-fast (which picks its own SIMD) and the parity from a
//! word-wide XOR the compiler vectorises, for AVX2 when the CPU has it.
//!
//! The folding (Intel, "Fast CRC Computation Using PCLMULQDQ", reflected
//! form): a 128-bit chunk `hi:lo` that lies D bits before the chunk it is
//! folded onto is congruent, modulo P, to
//! `clmul(lo, K(D + 32)) ^ clmul(hi, K(D - 32))`, where `K(n)` is
//! `x^n mod P`, bit-reflected and shifted left one bit. The last 128 bits
//! are reduced with the crc32 instruction, whose register update is exactly
//! `(crc · x^64 + v · x^32) mod P`.

/// Bytes in a strip: the unit of a checksum and of a parity rebuild.
pub const STRIP: usize = 512;
/// Strips in a page.
pub const STRIPS: usize = 8;
/// Bytes in a page.
pub const PAGE: usize = STRIP * STRIPS;

/// What protects one page: its strips' checksums and their parity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageSums {
    /// The CRC32C (Castagnoli) of each strip.
    pub crc: [u32; STRIPS],
    /// The XOR of the eight strips.
    pub parity: [u8; STRIP],
}

/// The CRC32C of one strip (or any slice).
pub fn strip_crc(strip: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(strip)
}

/// The checksums and parity of `page`.
pub fn page_sums(page: &[u8; PAGE]) -> PageSums {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        let mut parity = [0u8; STRIP];
        // SAFETY: the CPU has the kernel's features (checked above); the
        // source is a whole page and there is no destination.
        let crc = unsafe { avx512::fold_page::<true>(page.as_ptr(), std::ptr::null_mut(), &mut parity) };
        return PageSums { crc, parity };
    }
    PageSums {
        crc: portable_crcs(page),
        parity: parity(page),
    }
}

/// The checksums alone (a read checks strips; it has no use for parity).
pub fn page_crcs(page: &[u8; PAGE]) -> [u32; STRIPS] {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        // SAFETY: as in `page_sums`; without parity nothing is written to
        // the (empty) parity buffer.
        return unsafe { avx512::fold_page::<false>(page.as_ptr(), std::ptr::null_mut(), &mut [0u8; STRIP]) };
    }
    portable_crcs(page)
}

/// Copies `src` to `dst` like [`crate::Persist::write_nt`] and returns its
/// sums, in one pass where the CPU allows and `dst` is 64-aligned, else in
/// two. The caller fences before the bytes are touched again.
///
/// # Safety
///
/// `dst` must be mapped and writable for [`PAGE`] bytes, and not overlap
/// `src`.
pub(crate) unsafe fn stream_page(dst: *mut u8, src: &[u8; PAGE], persist: &crate::Persist) -> PageSums {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() && (dst as usize).is_multiple_of(64) {
        let mut parity = [0u8; STRIP];
        // SAFETY: features and alignment checked above; `dst` is as the
        // caller vouches.
        let crc = unsafe { avx512::fold_page::<true>(src.as_ptr(), dst, &mut parity) };
        persist.streamed(PAGE);
        return PageSums { crc, parity };
    }
    let sums = page_sums(src);
    // SAFETY: forwarded from the caller.
    unsafe { persist.write_nt(dst, src) };
    sums
}

fn portable_crcs(page: &[u8; PAGE]) -> [u32; STRIPS] {
    let mut crc = [0u32; STRIPS];
    for (c, s) in crc.iter_mut().zip(page.chunks_exact(STRIP)) {
        *c = strip_crc(s);
    }
    crc
}

/// The strips' XOR, 32 bytes a step with AVX2, else as wide as the
/// target's baseline allows.
fn parity(page: &[u8; PAGE]) -> [u8; STRIP] {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked above).
        return unsafe { parity_avx2(page) };
    }
    portable_parity(page)
}

/// [`portable_parity`] compiled for AVX2.
///
/// # Safety
///
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn parity_avx2(page: &[u8; PAGE]) -> [u8; STRIP] {
    portable_parity(page)
}

#[inline(always)]
fn portable_parity(page: &[u8; PAGE]) -> [u8; STRIP] {
    let mut words = [0u64; STRIP / 8];
    for strip in page.chunks_exact(STRIP) {
        for (w, b) in words.iter_mut().zip(strip.chunks_exact(8)) {
            *w ^= u64::from_ne_bytes(b.try_into().unwrap_or_default());
        }
    }
    let mut parity = [0u8; STRIP];
    for (p, w) in parity.chunks_exact_mut(8).zip(words) {
        p.copy_from_slice(&w.to_ne_bytes());
    }
    parity
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use core::arch::x86_64::*;

    use super::{PAGE, STRIP, STRIPS};

    /// Bytes folded per step: one ZMM register.
    const BLOCK: usize = 64;

    /// CRC32C's polynomial, with its x^32 term.
    const POLY: u64 = 0x1_1EDC_6F41;

    /// `K(n)` of the module comment: `x^n mod P`, bit-reflected and
    /// shifted left one bit.
    const fn k(n: u32) -> i64 {
        let mut r: u64 = 1;
        let mut i = 0;
        while i < n {
            r <<= 1;
            if r & (1 << 32) != 0 {
                r ^= POLY;
            }
            i += 1;
        }
        ((r as u32).reverse_bits() as i64) << 1
    }

    /// Per 128-bit lane, the constants that fold it onto the same lane of
    /// the next block, 512 bits on: (K(544) for the low half, K(480) for
    /// the high one).
    const FOLD_512: [i64; 8] = [k(544), k(480), k(544), k(480), k(544), k(480), k(544), k(480)];
    /// The constants that fold lanes 0, 1 and 2 of the last block onto
    /// lane 3 (384, 256 and 128 bits on); lane 3 stays as it is.
    const FOLD_LANES: [i64; 8] = [k(416), k(352), k(288), k(224), k(160), k(96), 0, 0];

    pub(super) fn available() -> bool {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("vpclmulqdq")
            && is_x86_feature_detected!("sse4.2")
    }

    /// Folds the eight strips of the page at `src` side by side and returns
    /// their CRC32Cs; with `PARITY` their XOR goes to `parity`, and when
    /// `dst` is not null every block is also streamed there.
    ///
    /// # Safety
    ///
    /// The CPU must have AVX-512F, VPCLMULQDQ and SSE4.2. `src` must be
    /// readable for [`PAGE`] bytes; a non-null `dst` must be 64-aligned,
    /// writable for [`PAGE`] bytes and not overlap `src`.
    #[target_feature(enable = "avx512f,vpclmulqdq,sse4.2")]
    pub(super) unsafe fn fold_page<const PARITY: bool>(
        src: *const u8,
        dst: *mut u8,
        parity: &mut [u8; STRIP],
    ) -> [u32; STRIPS] {
        // SAFETY: the constant arrays are 64 bytes; unaligned loads.
        let fold = unsafe { _mm512_loadu_si512(FOLD_512.as_ptr().cast()) };
        // The CRC's initial value, all ones, enters as the first four bytes
        // of each strip flipped.
        let init = _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0, 0xFFFF_FFFF);
        let mut acc = [_mm512_setzero_si512(); STRIPS];
        for block in 0..STRIP / BLOCK {
            let mut column = _mm512_setzero_si512();
            for (s, acc) in acc.iter_mut().enumerate() {
                let at = s * STRIP + block * BLOCK;
                // SAFETY: `at + BLOCK <= PAGE`, inside what the caller
                // vouches for on both sides; `dst + at` stays 64-aligned.
                let data = unsafe { _mm512_loadu_si512(src.add(at).cast()) };
                if !dst.is_null() {
                    // SAFETY: as for the load.
                    unsafe { _mm512_stream_si512(dst.add(at).cast(), data) };
                }
                *acc = if block == 0 {
                    _mm512_xor_si512(data, init)
                } else {
                    let lo = _mm512_clmulepi64_epi128(*acc, fold, 0x00);
                    let hi = _mm512_clmulepi64_epi128(*acc, fold, 0x11);
                    _mm512_ternarylogic_epi64(lo, hi, data, 0x96) // lo ^ hi ^ data
                };
                if PARITY {
                    column = _mm512_xor_si512(column, data);
                }
            }
            if PARITY {
                // SAFETY: `block * BLOCK + BLOCK <= STRIP`, inside `parity`.
                unsafe { _mm512_storeu_si512(parity.as_mut_ptr().add(block * BLOCK).cast(), column) };
            }
        }
        // SAFETY: as for `fold`.
        let lanes = unsafe { _mm512_loadu_si512(FOLD_LANES.as_ptr().cast()) };
        acc.map(|a| {
            let lo = _mm512_clmulepi64_epi128(a, lanes, 0x00);
            let hi = _mm512_clmulepi64_epi128(a, lanes, 0x11);
            let x = _mm512_ternarylogic_epi64(lo, hi, _mm512_maskz_mov_epi64(0xC0, a), 0x96);
            let y = _mm256_xor_si256(_mm512_castsi512_si256(x), _mm512_extracti64x4_epi64::<1>(x));
            let z = _mm_xor_si128(_mm256_castsi256_si128(y), _mm256_extracti128_si256::<1>(y));
            let (lo, hi) = (_mm_cvtsi128_si64(z) as u64, _mm_extract_epi64::<1>(z) as u64);
            !(_mm_crc32_u64(_mm_crc32_u64(0, lo), hi) as u32)
        })
    }

    const _: () = assert!(PAGE == STRIPS * STRIP && STRIP.is_multiple_of(BLOCK));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pages() -> Vec<Box<[u8; PAGE]>> {
        let mut rng = novafs_rng::SplitMix::new(0);
        let mut out = vec![Box::new([0u8; PAGE]), Box::new([0xFF; PAGE])];
        for _ in 0..64 {
            let mut p = Box::new([0u8; PAGE]);
            rng.fill(&mut p[..]);
            out.push(p);
        }
        out
    }

    #[test]
    fn the_fast_path_agrees_with_crc32c_and_xor() {
        // "123456789" is CRC-32C's check value.
        assert_eq!(strip_crc(b"123456789"), 0xE306_9283);
        for p in pages() {
            let want = PageSums {
                crc: portable_crcs(&p),
                parity: portable_parity(&p),
            };
            assert_eq!(page_sums(&p), want);
            assert_eq!(page_crcs(&p), want.crc);
            assert_eq!(parity(&p), want.parity);
            let mut x = [0u8; STRIP];
            for s in p.chunks_exact(STRIP) {
                x.iter_mut().zip(s).for_each(|(a, b)| *a ^= b);
            }
            assert_eq!(want.parity, x);
        }
    }

    #[test]
    fn streaming_copies_the_page_and_returns_its_sums() {
        let persist = crate::Persist::new(false);
        let mut buf = vec![0u64; PAGE / 8 + 8];
        let skew = buf.as_ptr().cast::<u8>().align_offset(64);
        // 64-aligned (one pass), then not (the two-pass fallback).
        for at in [skew, skew + 8] {
            for p in pages() {
                let dst = buf.as_mut_ptr().cast::<u8>().wrapping_add(at);
                // SAFETY: `buf` has a page behind `dst`.
                let sums = unsafe { stream_page(dst, &p, &persist) };
                persist.fence();
                assert_eq!(sums, page_sums(&p));
                let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
                assert_eq!(&bytes[at..at + PAGE], &p[..]);
            }
        }
    }
}
