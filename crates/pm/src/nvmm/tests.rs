//! The emulation's accounting, checked by counting; its delays only
//! against generous lower bounds (never upper bounds: the machine is
//! shared).

use std::time::{Duration, Instant};

use super::*;
use crate::{MapOptions, MmapRegion, Persist, Prefault, Region};

/// A 64-aligned heap buffer of `len` bytes.
struct Buf(Vec<u8>, usize);

impl Buf {
    fn new(len: usize) -> Buf {
        let v = vec![0u8; len + 64];
        let at = v.as_ptr().align_offset(64);
        Buf(v, at)
    }

    fn ptr(&mut self, off: usize) -> *mut u8 {
        // SAFETY: callers stay inside the buffer.
        unsafe { self.0.as_mut_ptr().add(self.1 + off) }
    }
}

/// A model whose barrier is long enough to see and cheap to count.
const SLOW_BARRIER: Nvmm = Nvmm {
    barrier_ns: 50_000,
    write_bw_divisor: 1,
};

fn delta(before: NvmmStats) -> NvmmStats {
    NvmmStats::thread().since(&before)
}

#[test]
fn models_parse_and_print() {
    for (text, model) in [
        ("dram", Nvmm::DRAM),
        ("stt", Nvmm::STT_RAM),
        ("stt-ram", Nvmm::STT_RAM),
        ("pcm", Nvmm::PCM),
        ("500:8", Nvmm::PCM),
        (
            "0:8",
            Nvmm {
                barrier_ns: 0,
                write_bw_divisor: 8,
            },
        ),
    ] {
        assert_eq!(text.parse::<Nvmm>().unwrap(), model, "{text}");
    }
    assert_eq!(Nvmm::PCM.to_string(), "pcm");
    assert_eq!(Nvmm::STT_RAM.to_string(), "stt");
    assert_eq!(
        Nvmm {
            barrier_ns: 0,
            write_bw_divisor: 8
        }
        .to_string(),
        "0:8"
    );
    for bad in ["", "fast", "1:0", "x:8", "500", "-1:8"] {
        assert!(bad.parse::<Nvmm>().is_err(), "{bad:?}");
    }
    assert_eq!(Nvmm::default(), Nvmm::DRAM);
    assert!(!Nvmm::DRAM.is_emulated());
    assert!(Nvmm::STT_RAM.is_emulated() && Nvmm::PCM.is_emulated());
}

#[test]
fn dram_speed_slows_nothing() {
    let p = Persist::new(false).slowed(Nvmm::DRAM);
    assert_eq!(p, Persist::new(false));
    assert_eq!(p.nvmm(), Nvmm::DRAM);
    let mut buf = Buf::new(4096);
    let before = NvmmStats::thread();
    // SAFETY: inside `buf`.
    unsafe { p.flush_range(buf.ptr(0), 4096) };
    p.fence();
    assert_eq!(delta(before), NvmmStats::default());
}

#[test]
fn a_fence_with_nothing_outstanding_costs_nothing() {
    let p = Persist::new(false).slowed(SLOW_BARRIER);
    assert_eq!(p.nvmm(), SLOW_BARRIER);
    let before = NvmmStats::thread();
    for _ in 0..3 {
        p.fence();
    }
    let d = delta(before);
    assert_eq!((d.fences, d.barriers, d.bytes, d.delay_ns), (3, 0, 0, 0));
}

#[test]
fn flushed_lines_make_the_next_fence_a_barrier() {
    let p = Persist::new(false).slowed(SLOW_BARRIER);
    let mut buf = Buf::new(4096);
    let before = NvmmStats::thread();
    // Bytes 60..160 lie in three lines.
    // SAFETY: inside `buf`.
    unsafe { p.flush_range(buf.ptr(60), 100) };
    p.fence();
    p.fence();
    let d = delta(before);
    assert_eq!((d.fences, d.barriers, d.bytes), (2, 1, 3 * 64));
    assert_eq!(d.delay_ns, 50_000, "the barrier alone: no bandwidth cap");
}

#[test]
fn non_temporal_stores_count_every_line_they_write() {
    let p = Persist::new(false).slowed(SLOW_BARRIER);
    let mut buf = Buf::new(8192);
    let data = vec![7u8; 4096];
    let before = NvmmStats::thread();
    // SAFETY: inside `buf`, which `data` does not overlap.
    unsafe { p.write_nt(buf.ptr(0), &data) };
    let d = delta(before);
    assert_eq!((d.fences, d.barriers, d.bytes), (1, 1, 4096), "write_nt fences itself");
    // An unaligned 200 bytes at 1: a flushed head line, two streamed
    // lines, a flushed tail line.
    let before = NvmmStats::thread();
    // SAFETY: as above.
    unsafe {
        p.write_nt(buf.ptr(1), &data[..200]);
        p.zero_nt(buf.ptr(4096), 128);
    }
    let d = delta(before);
    assert_eq!((d.fences, d.barriers, d.bytes), (2, 2, 4 * 64 + 128));
}

#[test]
fn eadr_flushes_nothing_so_only_streamed_bytes_count() {
    let p = Persist::new(true).slowed(SLOW_BARRIER);
    let mut buf = Buf::new(4096);
    let before = NvmmStats::thread();
    // SAFETY: inside `buf`.
    unsafe { p.flush_range(buf.ptr(0), 4096) };
    p.fence();
    assert_eq!(delta(before).barriers, 0);
    // SAFETY: inside `buf`.
    unsafe { p.zero_nt(buf.ptr(0), 4096) };
    let d = delta(before);
    assert_eq!((d.barriers, d.bytes), (1, 4096));
}

#[test]
fn outstanding_writes_belong_to_the_thread_that_made_them() {
    let p = Persist::new(false).slowed(SLOW_BARRIER);
    let mut buf = Buf::new(64);
    let line = buf.ptr(0) as usize;
    // SAFETY: inside `buf`.
    unsafe { p.flush_range(line as *const u8, 64) };
    let other = std::thread::spawn(move || {
        p.fence();
        NvmmStats::thread()
    })
    .join()
    .unwrap();
    assert_eq!((other.fences, other.barriers), (1, 0));
    let before = NvmmStats::thread();
    p.fence();
    assert_eq!(delta(before).barriers, 1);
}

#[test]
fn each_barrier_waits_at_least_its_latency() {
    let p = Persist::new(false).slowed(SLOW_BARRIER);
    let mut buf = Buf::new(64);
    const N: u32 = 20;
    let t = Instant::now();
    for _ in 0..N {
        // SAFETY: inside `buf`.
        unsafe { p.flush_range(buf.ptr(0), 64) };
        p.fence();
    }
    let floor = Duration::from_nanos(u64::from(SLOW_BARRIER.barrier_ns)) * N / 2;
    assert!(t.elapsed() >= floor, "{:?} < {floor:?}", t.elapsed());
}

#[test]
fn the_bandwidth_cap_charges_each_byte_its_share() {
    let bw = dram_write_bandwidth();
    assert!(bw > 1e8, "{bw} bytes/s");
    let model = Nvmm {
        barrier_ns: 0,
        write_bw_divisor: 9,
    };
    let slow = Slow::new(model).unwrap();
    assert_eq!(slow.ps_per_byte, (8e12 / bw).round() as u64);
    let p = Persist::new(false).slowed(model);
    let len = 4 << 20;
    let mut buf = Buf::new(len);
    let data = vec![1u8; len];
    let before = NvmmStats::thread();
    let t = Instant::now();
    // SAFETY: inside `buf`, which `data` does not overlap.
    unsafe { p.write_nt(buf.ptr(0), &data) };
    let elapsed = t.elapsed();
    let d = delta(before);
    assert_eq!((d.barriers, d.bytes), (1, len as u64));
    assert_eq!(d.delay_ns, len as u64 * slow.ps_per_byte / 1000);
    // At 1/9 of the bandwidth, the extra 8/9 alone.
    let floor = Duration::from_secs_f64(len as f64 * 8.0 / bw / 2.0);
    assert!(elapsed >= floor, "{elapsed:?} < {floor:?}");
}

#[test]
fn a_mapped_region_slows_its_writes_not_its_reads() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let opts = MapOptions {
        nvmm: Nvmm::PCM,
        prefault: Prefault::OnFirstUse,
        ..MapOptions::default()
    };
    let r = MmapRegion::create(&dir.path().join("img"), 16 * 4096, &opts).unwrap();
    assert_eq!(r.nvmm(), Nvmm::PCM);
    let before = NvmmStats::thread();
    r.write(100, b"abc").unwrap();
    r.persist(100, 3).unwrap();
    r.commit_u64(4096, 7).unwrap();
    let page = [5u8; crate::stripe::PAGE];
    r.write_nt_summed(8192, &page).unwrap();
    let mut back = [0u8; 3];
    r.read(100, &mut back).unwrap();
    assert_eq!(r.load_u64(4096).unwrap(), 7);
    r.fence();
    let d = delta(before);
    assert_eq!(&back, b"abc");
    assert_eq!((d.barriers, d.bytes), (3, 64 + 64 + 4096), "{d:?}");
    assert!(d.fences >= 4);
    let plain = MmapRegion::create(&dir.path().join("img2"), 4096, &MapOptions::default()).unwrap();
    assert_eq!(plain.nvmm(), Nvmm::DRAM);
    let before = NvmmStats::thread();
    plain.persist(0, 4096).unwrap();
    assert_eq!(delta(before), NvmmStats::default());
}
