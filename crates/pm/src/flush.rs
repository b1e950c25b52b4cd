//! Persist primitives: cache-line flushes, store fences, non-temporal copies.
//!
//! Owns the choice of flush instruction ([`FlushKind`], detected at run time)
//! and [`Persist`], the object every region uses to make stores durable
//! (DESIGN.md §3). Touches memory only through pointers its callers vouch for.
//!
//! On targets other than x86_64 there is no user-space flush instruction we
//! can rely on: flushes are no-ops and a fence is a sequentially consistent
//! atomic fence. That is enough for the emulated (tmpfs) regions used there,
//! not for real persistent memory.

use std::fmt;
use std::ptr;

use crate::nvmm::{Nvmm, Slow};
use crate::CACHELINE;

const LINE: usize = CACHELINE as usize;

/// The instruction used to write a cache line back to the media.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlushKind {
    /// `clwb`: writes back and keeps the line cached (best).
    Clwb,
    /// `clflushopt`: writes back and evicts, weakly ordered.
    ClflushOpt,
    /// `clflush`: writes back and evicts, serialised (slowest).
    Clflush,
    /// No flush: caches are in the persistence domain (eADR) or the target
    /// has no usable flush instruction. Fences are still issued.
    None,
}

impl FlushKind {
    /// The best flush instruction this CPU offers, checked with CPUID.
    pub fn detect() -> FlushKind {
        [FlushKind::Clwb, FlushKind::ClflushOpt, FlushKind::Clflush]
            .into_iter()
            .find(|&kind| cpu_has(kind))
            .unwrap_or(FlushKind::None)
    }
}

impl fmt::Display for FlushKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FlushKind::Clwb => "clwb",
            FlushKind::ClflushOpt => "clflushopt",
            FlushKind::Clflush => "clflush",
            FlushKind::None => "none (fences only)",
        })
    }
}

/// Whether the CPU implements `kind` (CPUID leaf 7 EBX bit 24 = CLWB, bit 23
/// = CLFLUSHOPT; leaf 1 EDX bit 19 = CLFLUSH).
#[cfg(target_arch = "x86_64")]
fn cpu_has(kind: FlushKind) -> bool {
    use core::arch::x86_64::{__cpuid, __cpuid_count};

    let max_leaf = __cpuid(0).eax;
    match kind {
        FlushKind::Clwb if max_leaf >= 7 => __cpuid_count(7, 0).ebx & (1 << 24) != 0,
        FlushKind::ClflushOpt if max_leaf >= 7 => __cpuid_count(7, 0).ebx & (1 << 23) != 0,
        FlushKind::Clflush => __cpuid(1).edx & (1 << 19) != 0,
        FlushKind::None => true,
        _ => false,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_has(kind: FlushKind) -> bool {
    kind == FlushKind::None
}

/// Makes stores durable: flushes cache lines and orders them with fences,
/// at an emulated NVMM's speed when asked ([`Persist::slowed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Persist {
    kind: FlushKind,
    slow: Option<Slow>,
}

/// Where the bytes of a non-temporal store come from.
#[derive(Clone, Copy)]
enum Source {
    Bytes(*const u8),
    Zero,
}

impl Persist {
    /// Persist primitives for this CPU. With `eadr` the caches are inside the
    /// persistence domain, so only fences are needed.
    pub fn new(eadr: bool) -> Persist {
        let kind = if eadr { FlushKind::None } else { FlushKind::detect() };
        Persist { kind, slow: None }
    }

    /// These primitives with `model`'s persist barrier latency and write
    /// bandwidth ([`crate::nvmm`]); [`Nvmm::DRAM`] slows nothing.
    pub fn slowed(self, model: Nvmm) -> Persist {
        Persist {
            slow: Slow::new(model),
            ..self
        }
    }

    /// The NVMM speed emulated.
    pub fn nvmm(&self) -> Nvmm {
        self.slow.map_or(Nvmm::DRAM, |s| s.model())
    }

    /// `bytes` were streamed to the media outside these primitives (a
    /// fused copy): the next fence waits for them like for its own.
    pub(crate) fn streamed(&self, bytes: usize) {
        if let Some(slow) = self.slow {
            slow.wrote(bytes);
        }
    }

    /// The flush instruction in use.
    pub fn kind(&self) -> FlushKind {
        self.kind
    }

    /// Writes back every cache line overlapping `[ptr, ptr + len)`.
    ///
    /// # Safety
    ///
    /// The whole range must be mapped in this process: flushing an unmapped
    /// address faults.
    pub unsafe fn flush_range(&self, ptr: *const u8, len: usize) {
        if len == 0 || self.kind == FlushKind::None {
            return;
        }
        let start = ptr as usize & !(LINE - 1);
        let end = ptr as usize + len;
        // Each line written back is a line's write to the media.
        self.streamed((end - start).div_ceil(LINE) * LINE);
        // SAFETY: forwarded from the caller.
        unsafe { flush_lines(self.kind, start, end) }
    }

    /// Store fence: earlier flushes and non-temporal stores complete before
    /// any later store. Emulating a slower NVMM, a fence with this
    /// thread's writes outstanding then waits as a persist barrier would.
    pub fn fence(&self) {
        // SAFETY: SSE (and so sfence) is part of the x86_64 baseline.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            core::arch::x86_64::_mm_sfence()
        };
        #[cfg(not(target_arch = "x86_64"))]
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        if let Some(slow) = self.slow {
            slow.barrier();
        }
    }

    /// Copies `src` to `dst` with non-temporal stores for the whole aligned
    /// lines; partial edge lines get ordinary stores and a flush.
    ///
    /// # Safety
    ///
    /// `dst..dst + src.len()` must be mapped, writable, and not overlap `src`.
    pub(crate) unsafe fn write_nt(&self, dst: *mut u8, src: &[u8]) {
        // SAFETY: forwarded from the caller.
        unsafe { self.store_nt(dst, src.len(), Source::Bytes(src.as_ptr())) }
    }

    /// Zeroes `[dst, dst + len)` like [`Persist::write_nt`].
    ///
    /// # Safety
    ///
    /// The range must be mapped and writable.
    pub(crate) unsafe fn zero_nt(&self, dst: *mut u8, len: usize) {
        // SAFETY: forwarded from the caller.
        unsafe { self.store_nt(dst, len, Source::Zero) }
    }

    /// # Safety
    ///
    /// `[dst, dst + len)` must be mapped and writable; a `Source::Bytes`
    /// pointer must be readable for `len` bytes and not overlap `dst`.
    unsafe fn store_nt(&self, dst: *mut u8, len: usize, src: Source) {
        if len == 0 {
            return;
        }
        let start = dst as usize;
        let end = start + len;
        let body_start = (start + LINE - 1) & !(LINE - 1);
        let body_end = end & !(LINE - 1);
        // SAFETY (whole block): every sub-range below lies inside
        // `[dst, dst + len)`, which the caller vouches for.
        unsafe {
            if body_start >= body_end {
                // No whole line: the range sits inside one or two lines.
                store_cached(dst, 0, len, src);
                self.flush_range(dst, len);
            } else {
                let head = body_start - start;
                let tail = end - body_end;
                if head > 0 {
                    store_cached(dst, 0, head, src);
                    self.flush_range(dst, head);
                }
                stream_lines(dst.add(head), (body_end - body_start) / LINE, src, head);
                self.streamed(body_end - body_start);
                if tail > 0 {
                    store_cached(dst, len - tail, tail, src);
                    self.flush_range(dst.add(len - tail), tail);
                }
            }
        }
        // Non-temporal stores are weakly ordered and outside Rust's memory
        // model: they must be fenced before anyone touches these bytes again,
        // so the fence belongs here rather than to the caller. It also makes
        // the copy durable on return.
        self.fence();
    }
}

/// Flushes the lines from the 64-aligned `line` up to `end` with `kind`.
///
/// # Safety
///
/// `[line, end)` must be mapped.
#[cfg(target_arch = "x86_64")]
unsafe fn flush_lines(kind: FlushKind, mut line: usize, end: usize) {
    macro_rules! each_line {
        ($insn:literal) => {
            while line < end {
                // SAFETY: the caller guarantees the range is mapped, and
                // `detect` only picks instructions the CPU implements. No
                // `nomem`: the flush must stay after the stores it covers.
                unsafe {
                    core::arch::asm!(
                        concat!($insn, " [{0}]"),
                        in(reg) line,
                        options(nostack, preserves_flags),
                    );
                }
                line += LINE;
            }
        };
    }
    match kind {
        FlushKind::Clwb => each_line!("clwb"),
        FlushKind::ClflushOpt => each_line!("clflushopt"),
        FlushKind::Clflush => each_line!("clflush"),
        FlushKind::None => {}
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn flush_lines(_kind: FlushKind, _line: usize, _end: usize) {}

/// Ordinary stores of `len` bytes at `dst + at` from `src + at`.
///
/// # Safety
///
/// As for [`Persist::store_nt`], for the sub-range `[at, at + len)`.
unsafe fn store_cached(dst: *mut u8, at: usize, len: usize, src: Source) {
    // SAFETY: forwarded from the caller.
    unsafe {
        match src {
            Source::Bytes(s) => ptr::copy_nonoverlapping(s.add(at), dst.add(at), len),
            Source::Zero => ptr::write_bytes(dst.add(at), 0, len),
        }
    }
}

/// Streams `lines` whole cache lines to the 64-aligned `dst`, reading from
/// `src + at` (unaligned) for `Source::Bytes`.
///
/// # Safety
///
/// `dst` must be 64-aligned and writable for `lines * 64` bytes, the source
/// readable for as many.
#[cfg(target_arch = "x86_64")]
unsafe fn stream_lines(dst: *mut u8, lines: usize, src: Source, at: usize) {
    use core::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_setzero_si128, _mm_stream_si128};

    let dst = dst.cast::<__m128i>();
    // SAFETY: `dst` is 16-aligned (it is 64-aligned) and every access stays
    // within the `lines * 64` bytes the caller vouches for, on both sides.
    unsafe {
        match src {
            Source::Bytes(s) => {
                let s = s.add(at).cast::<__m128i>();
                for i in 0..lines * 4 {
                    _mm_stream_si128(dst.add(i), _mm_loadu_si128(s.add(i)));
                }
            }
            Source::Zero => {
                let zero = _mm_setzero_si128();
                for i in 0..lines * 4 {
                    _mm_stream_si128(dst.add(i), zero);
                }
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn stream_lines(dst: *mut u8, lines: usize, src: Source, at: usize) {
    // No portable non-temporal store: ordinary stores (flushes are no-ops).
    // SAFETY: forwarded from the caller; `dst` is `dst_base + at`.
    unsafe { store_cached(dst.sub(at), at, lines * LINE, src) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 64-aligned heap buffer.
    fn aligned(len: usize) -> Vec<u64> {
        vec![0u64; len.div_ceil(8) + 8]
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    const LENS: [usize; 12] = [0, 1, 7, 8, 63, 64, 65, 127, 128, 129, 200, 4096];

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn detect_finds_a_flush_instruction_on_x86_64() {
        let kind = FlushKind::detect();
        assert_ne!(kind, FlushKind::None);
        assert!(cpu_has(kind));
        assert_eq!(Persist::new(false).kind(), kind);
    }

    #[test]
    fn eadr_means_fences_only() {
        assert_eq!(Persist::new(true).kind(), FlushKind::None);
        assert_eq!(FlushKind::None.to_string(), "none (fences only)");
        assert_eq!(FlushKind::ClflushOpt.to_string(), "clflushopt");
    }

    #[test]
    fn every_supported_flush_instruction_runs() {
        let mut buf = aligned(4096);
        let ptr = buf.as_mut_ptr().cast::<u8>();
        for kind in [
            FlushKind::Clwb,
            FlushKind::ClflushOpt,
            FlushKind::Clflush,
            FlushKind::None,
        ] {
            if !cpu_has(kind) {
                continue;
            }
            let p = Persist { kind, slow: None };
            // SAFETY: all ranges lie inside `buf`.
            unsafe {
                ptr.add(3).write(7);
                p.flush_range(ptr.add(3), 1);
                p.flush_range(ptr.add(60), 10); // spans two lines
                p.flush_range(ptr, 4096);
                p.flush_range(ptr, 0);
            }
            p.fence();
            // SAFETY: inside `buf`.
            assert_eq!(unsafe { ptr.add(3).read() }, 7);
        }
    }

    #[test]
    fn write_nt_matches_plain_copy_at_any_alignment() {
        let p = Persist::new(false);
        for off in [0usize, 1, 8, 17, 63, 64, 100] {
            for len in LENS {
                let mut buf = aligned(off + len + 128);
                let base = buf.as_mut_ptr().cast::<u8>();
                let mut expected = vec![0xAAu8; off + len + 64];
                // SAFETY: `buf` holds at least `expected.len()` bytes.
                unsafe { ptr::copy_nonoverlapping(expected.as_ptr(), base, expected.len()) };
                let data = pattern(len, off as u8);
                expected[off..off + len].copy_from_slice(&data);
                // SAFETY: `[off, off + len)` is inside `buf`; `data` is separate.
                unsafe { p.write_nt(base.add(off), &data) };
                // SAFETY: inside `buf`.
                let got = unsafe { std::slice::from_raw_parts(base, expected.len()) };
                assert_eq!(got, &expected[..], "off {off} len {len}");
            }
        }
    }

    #[test]
    fn zero_nt_clears_exactly_the_range() {
        let p = Persist::new(false);
        for off in [0usize, 5, 64, 71] {
            for len in LENS {
                let total = off + len + 64;
                let mut buf = aligned(total + 64);
                let base = buf.as_mut_ptr().cast::<u8>();
                // SAFETY: `buf` holds at least `total` bytes.
                unsafe { ptr::write_bytes(base, 0xFF, total) };
                // SAFETY: `[off, off + len)` is inside `buf`.
                unsafe { p.zero_nt(base.add(off), len) };
                // SAFETY: inside `buf`.
                let got = unsafe { std::slice::from_raw_parts(base, total) };
                assert!(got[..off].iter().all(|&b| b == 0xFF));
                assert!(got[off..off + len].iter().all(|&b| b == 0));
                assert!(got[off + len..].iter().all(|&b| b == 0xFF));
            }
        }
    }
}
