//! Mapping, creating and locking image files; media errors as errors.

use super::*;

fn shm_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").unwrap()
}

/// Opens `path` with its lock once the lock is free. A child another test
/// forks (`stray_store_faults`; the SIGBUS test re-executing the binary)
/// holds a copy of every descriptor open at the fork, a region's locked
/// one included, until it exits or execs: a region just dropped here may
/// read as busy for that long (flaky at `--test-threads 8`). A lock that
/// stays taken still fails, after 10 s.
fn open_once_free(path: &std::path::Path) -> MmapRegion {
    let start = std::time::Instant::now();
    loop {
        match MmapRegion::open(path, &MapOptions::default()) {
            Err(PmError::Busy { .. }) if start.elapsed() < std::time::Duration::from_secs(10) => {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            r => return r.unwrap(),
        }
    }
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(0x9E37_79B9).wrapping_add(seed) >> 7) as u8)
        .collect()
}

fn read_all(r: &MmapRegion) -> Vec<u8> {
    let mut buf = vec![0u8; r.len() as usize];
    r.read(0, &mut buf).unwrap();
    buf
}

#[test]
fn create_on_tmpfs_is_emulated_zeroed_and_reserved() {
    let dir = shm_dir();
    let path = dir.path().join("img");
    let r = MmapRegion::create(&path, 64 * 1024, &MapOptions::default()).unwrap();
    assert_eq!(r.len(), 64 * 1024);
    assert_eq!(r.kind(), RegionKind::Emulated);
    assert!(!r.kind().is_power_safe());
    assert_eq!(r.path(), path);
    assert_eq!(r.flush_kind(), FlushKind::detect());
    assert!(read_all(&r).iter().all(|&b| b == 0));
    let md = std::fs::metadata(&path).unwrap();
    assert_eq!(md.len(), 64 * 1024);
    assert_eq!(md.mode() & 0o777, 0o600);
    assert_eq!(md.blocks() * 512, 64 * 1024, "space is reserved");
}

/// Whether a store into the mapping that bypasses the region's methods
/// (a scribble) kills a forked child with SIGSEGV.
fn stray_store_faults(r: &MmapRegion, off: u64) -> bool {
    // SAFETY: the child only stores one byte and exits; the parent waits.
    match unsafe { libc::fork() } {
        0 => {
            // SAFETY: inside the mapping; faulting is the point.
            unsafe {
                ptr::write_volatile(r.at(off), 0xAB);
                libc::_exit(0)
            }
        }
        pid => {
            assert!(pid > 0, "fork failed");
            let mut status = 0;
            // SAFETY: waits for the child forked above.
            assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
            libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV
        }
    }
}

fn protected(dir: &tempfile::TempDir, protect: WriteProtect) -> Result<MmapRegion, PmError> {
    let opts = MapOptions {
        protect,
        ..MapOptions::default()
    };
    MmapRegion::create(&dir.path().join("img"), 16384, &opts)
}

#[test]
fn mprotect_windows_let_the_region_write_and_stop_stray_stores() {
    let dir = shm_dir();
    let r = protected(&dir, WriteProtect::Mprotect).unwrap();
    assert_eq!(r.protection(), Protection::Mprotect);
    let data = pattern(6000, 3);
    r.write(1000, &data).unwrap();
    r.write_nt(8000, &data[..100]).unwrap();
    r.zero_nt(12288, 4096).unwrap();
    r.store_u64(16376, 7).unwrap();
    r.persist(0, 16384).unwrap();
    assert!(stray_store_faults(&r, 5000), "a store outside a window must fault");
    let mut buf = vec![0u8; data.len()];
    r.read(1000, &mut buf).unwrap();
    assert_eq!(buf, data, "the stray store changed nothing");
    assert_eq!(r.load_u64(16376).unwrap(), 7);
    let unprotected = protected(&shm_dir(), WriteProtect::Off).unwrap();
    assert!(
        !stray_store_faults(&unprotected, 5000),
        "the control: an unprotected mapping takes it"
    );
}

#[test]
fn concurrent_mprotect_windows_on_one_page_nest() {
    let dir = shm_dir();
    let r = protected(&dir, WriteProtect::Mprotect).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let r = &r;
            s.spawn(move || {
                for i in 0..2000u64 {
                    // All four threads write the same two pages.
                    r.store_u64(4096 + 8 * t, i).unwrap();
                    r.write(8192 - 64 + 16 * t, &[t as u8; 16]).unwrap();
                }
            });
        }
    });
    for t in 0..4u64 {
        assert_eq!(r.load_u64(4096 + 8 * t).unwrap(), 1999);
    }
    assert!(stray_store_faults(&r, 4096), "every window closed again");
}

#[test]
#[cfg_attr(
    not(pm_pkeys),
    ignore = "needs memory protection keys (pku and ospke in /proc/cpuinfo)"
)]
fn memory_protection_keys_protect_where_the_cpu_has_them() {
    let dir = shm_dir();
    let r = protected(&dir, WriteProtect::Pkey).expect("the CPU lists pku and ospke");
    assert_eq!(r.protection(), Protection::Pkey);
    assert_eq!(
        protected(&shm_dir(), WriteProtect::Auto).unwrap().protection(),
        Protection::Pkey
    );
    r.write(100, b"inside a window").unwrap();
    // Another thread reads (its PKRU starts without the key).
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut buf = [0u8; 15];
            r.read(100, &mut buf).unwrap();
            assert_eq!(&buf, b"inside a window");
        });
    });
    assert!(stray_store_faults(&r, 200));
}

#[test]
#[cfg_attr(pm_pkeys, ignore = "this CPU has memory protection keys")]
fn without_protection_keys_auto_leaves_the_mapping_writable() {
    assert!(protected(&shm_dir(), WriteProtect::Pkey).is_err());
    let r = protected(&shm_dir(), WriteProtect::Auto).unwrap();
    assert_eq!(r.protection(), Protection::Off);
}

#[test]
fn data_survives_unmap_and_reopen() {
    let dir = shm_dir();
    let path = dir.path().join("img");
    let data = pattern(10_000, 1);
    {
        let r = MmapRegion::create(&path, 16384, &MapOptions::default()).unwrap();
        r.write(100, &data).unwrap();
        r.persist(100, data.len() as u64).unwrap();
        r.commit_u64(16376, 42).unwrap();
    }
    let r = open_once_free(&path);
    assert_eq!(r.len(), 16384);
    let mut buf = vec![0u8; data.len()];
    r.read(100, &mut buf).unwrap();
    assert_eq!(buf, data);
    assert_eq!(r.load_u64(16376).unwrap(), 42);
}

#[test]
fn write_nt_and_zero_nt_match_a_model_at_any_alignment() {
    let dir = shm_dir();
    let r = MmapRegion::create(&dir.path().join("img"), 16384, &MapOptions::default()).unwrap();
    let mut model = vec![0u8; 16384];
    let mut seed = 0;
    for off in [0u64, 1, 13, 63, 64, 65, 4095, 4096, 8000] {
        for len in [0usize, 1, 5, 63, 64, 65, 128, 191, 1000, 4096, 4097] {
            seed += 1;
            let data = pattern(len, seed);
            r.write_nt(off, &data).unwrap();
            model[off as usize..off as usize + len].copy_from_slice(&data);
            assert_eq!(read_all(&r), model, "write_nt off {off} len {len}");
            let zoff = off + (len as u64) / 3;
            let zlen = len as u64 / 2;
            r.zero_nt(zoff, zlen).unwrap();
            model[zoff as usize..(zoff + zlen) as usize].fill(0);
            assert_eq!(read_all(&r), model, "zero_nt off {zoff} len {zlen}");
        }
    }
    r.fence();
}

#[test]
fn every_access_is_bounds_checked() {
    let dir = shm_dir();
    let r = MmapRegion::create(&dir.path().join("img"), 8192, &MapOptions::default()).unwrap();
    let oob = |e: PmError| matches!(e, PmError::OutOfBounds { size: 8192, .. });
    assert!(oob(r.read(8191, &mut [0; 2]).unwrap_err()));
    assert!(oob(r.read(u64::MAX, &mut [0; 2]).unwrap_err()));
    assert!(oob(r.write(8192, &[1]).unwrap_err()));
    assert!(oob(r.write_nt(8000, &[1; 193]).unwrap_err()));
    assert!(oob(r.zero_nt(8, u64::MAX - 4).unwrap_err()));
    assert!(oob(r.flush(8192, 1).unwrap_err()));
    assert!(oob(r.persist(1, 8192).unwrap_err()));
    assert!(oob(r.store_u64(8192, 1).unwrap_err()));
    assert!(oob(r.load_u64(u64::MAX - 7).unwrap_err()));
    assert!(oob(r.commit_u64(8192, 1).unwrap_err()));
    assert!(matches!(r.store_u64(4, 1), Err(PmError::Misaligned { off: 4 })));
    assert!(matches!(r.load_u64(8190), Err(PmError::Misaligned { off: 8190 })));
    // Empty accesses at the very end are fine.
    r.read(8192, &mut []).unwrap();
    r.write(8192, &[]).unwrap();
    r.flush(8192, 0).unwrap();
}

#[test]
fn store_and_load_u64_are_visible_through_bytes() {
    let dir = shm_dir();
    let r = MmapRegion::create(&dir.path().join("img"), 4096, &MapOptions::default()).unwrap();
    r.store_u64(64, 0x0102_0304_0506_0708).unwrap();
    let mut buf = [0u8; 8];
    r.read(64, &mut buf).unwrap();
    assert_eq!(u64::from_ne_bytes(buf), 0x0102_0304_0506_0708);
    r.write(72, &7u64.to_ne_bytes()).unwrap();
    assert_eq!(r.load_u64(72).unwrap(), 7);
}

#[test]
fn second_open_while_mapped_is_busy() {
    let dir = shm_dir();
    let path = dir.path().join("img");
    let first = MmapRegion::create(&path, 8192, &MapOptions::default()).unwrap();
    let err = MmapRegion::open(&path, &MapOptions::default()).unwrap_err();
    assert!(matches!(err, PmError::Busy { .. }), "{err}");
    assert_eq!(err.errno(), libc::EBUSY);
    assert!(err.to_string().contains("in use by another novafs process"));
    // A busy image is not resized by a second create.
    let err = MmapRegion::create(&path, 4096, &MapOptions::default()).unwrap_err();
    assert!(matches!(err, PmError::Busy { .. }));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 8192);
    // Without locking, sharing is allowed.
    let opts = MapOptions {
        lock: false,
        ..MapOptions::default()
    };
    let second = MmapRegion::open(&path, &opts).unwrap();
    first.write(0, b"shared").unwrap();
    let mut buf = [0u8; 6];
    second.read(0, &mut buf).unwrap();
    assert_eq!(&buf, b"shared");
    drop(first);
    open_once_free(&path);
}

#[test]
fn open_of_missing_file_is_io_error_naming_the_path() {
    let dir = shm_dir();
    let path = dir.path().join("nope");
    let err = MmapRegion::open(&path, &MapOptions::default()).unwrap_err();
    match &err {
        PmError::Io { path: p, source } => {
            assert_eq!(p, &path.display().to_string());
            assert_eq!(source.kind(), io::ErrorKind::NotFound);
        }
        other => panic!("expected Io, got {other:?}"),
    }
    assert_eq!(err.errno(), libc::ENOENT);
    assert!(!path.exists());
}

#[test]
fn bad_sizes_and_file_types_are_invalid() {
    let dir = shm_dir();
    let path = dir.path().join("img");
    let opts = MapOptions::default();
    for size in [0, 1000, 4097] {
        let err = MmapRegion::create(&path, size, &opts).unwrap_err();
        assert!(matches!(err, PmError::Invalid { .. }), "{err}");
        assert_eq!(err.errno(), libc::EINVAL);
    }
    std::fs::write(&path, [0u8; 1000]).unwrap();
    assert!(matches!(MmapRegion::open(&path, &opts), Err(PmError::Invalid { .. })));
    assert!(matches!(
        MmapRegion::open(dir.path(), &opts),
        Err(PmError::Invalid { .. } | PmError::Io { .. })
    ));
    assert!(matches!(
        MmapRegion::create(dir.path(), 4096, &opts),
        Err(PmError::Invalid { .. })
    ));
    // A character device that is not devdax.
    let opts = MapOptions { lock: false, ..opts };
    let err = MmapRegion::create(Path::new("/dev/null"), 4096, &opts).unwrap_err();
    assert!(err.to_string().contains("not a devdax device"), "{err}");
    assert!(matches!(
        MmapRegion::open(Path::new("/dev/zero"), &opts),
        Err(PmError::Invalid { .. })
    ));
}

#[test]
fn disk_file_is_page_cache_unless_tmpfs() {
    let dir = tempfile::tempdir().unwrap();
    let r = MmapRegion::create(&dir.path().join("img"), 4096, &MapOptions::default()).unwrap();
    let file = File::open(dir.path()).unwrap();
    let expected = if is_tmpfs(&file).unwrap() {
        RegionKind::Emulated
    } else {
        RegionKind::PageCache
    };
    // MAP_SYNC succeeds only on a DAX file system, where FsDax is right.
    assert!(r.kind() == expected || r.kind() == RegionKind::FsDax, "{:?}", r.kind());
    r.write(0, b"x").unwrap();
    r.persist(0, 1).unwrap();
}

#[test]
fn kinds_describe_their_durability() {
    assert!(RegionKind::DevDax.is_power_safe());
    assert!(RegionKind::FsDax.is_power_safe());
    assert!(!RegionKind::Emulated.is_power_safe());
    assert!(!RegionKind::PageCache.is_power_safe());
    assert!(!RegionKind::Memory.is_power_safe());
    assert_eq!(
        RegionKind::Emulated.to_string(),
        "emulated (tmpfs file: survives process crashes, not power loss)"
    );
    assert_eq!(RegionKind::Memory.to_string(), "heap memory (tests only, not durable)");
}

#[test]
fn eadr_region_skips_flushes() {
    let dir = shm_dir();
    let opts = MapOptions {
        eadr: true,
        prefault: Prefault::OnFirstUse,
        ..MapOptions::default()
    };
    let r = MmapRegion::create(&dir.path().join("img"), 4096, &opts).unwrap();
    assert_eq!(r.flush_kind(), FlushKind::None);
    r.write_nt(3, b"abc").unwrap();
    r.persist(0, 4096).unwrap();
    let mut buf = [0u8; 3];
    r.read(3, &mut buf).unwrap();
    assert_eq!(&buf, b"abc");
}

#[test]
fn read_of_unbacked_page_is_a_media_error_not_a_crash() {
    let dir = shm_dir();
    let path = dir.path().join("img");
    let r = MmapRegion::create(&path, 3 * PAGE, &MapOptions::default()).unwrap();
    r.write(0, b"still here").unwrap();
    // Shrink the file under the mapping: pages 1 and 2 lose their backing
    // and touching them raises SIGBUS, as a poisoned page would.
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(PAGE)
        .unwrap();
    let mut page = vec![0u8; PAGE as usize];
    let err = r.read(2 * PAGE, &mut page).unwrap_err();
    assert!(matches!(err, PmError::Media { off } if off == 2 * PAGE), "{err}");
    assert_eq!(err.errno(), libc::EIO);
    r.read(0, &mut page).unwrap();
    assert_eq!(&page[..10], b"still here");
    // A read running off the good page reports the first bad byte.
    let mut two = vec![0u8; 2 * PAGE as usize];
    assert!(matches!(
        r.read(100, &mut two),
        Err(PmError::Media { off }) if off == PAGE
    ));
    assert!(matches!(
        r.load_u64(PAGE + 8),
        Err(PmError::Media { off }) if off == PAGE + 8
    ));
    // The same page fails every time, not just the first.
    assert!(r.read(2 * PAGE + 1, &mut [0u8; 1]).is_err());
    assert_eq!(r.load_u64(8).unwrap(), u64::from_ne_bytes(*b"re\0\0\0\0\0\0"));
}

#[test]
fn sidecar_bad_blocks_fail_reads_until_the_sidecar_is_removed() {
    let dir = shm_dir();
    let path = dir.path().join("img");
    {
        let r = MmapRegion::create(&path, 3 * PAGE, &MapOptions::default()).unwrap();
        r.write(PAGE, &[9u8; 64]).unwrap();
        assert!(r.bad_blocks().ranges().is_empty());
    }
    BadBlocks::append(&path, PAGE + 16, 8).unwrap();
    BadBlocks::append(&path, 2 * PAGE, 1).unwrap();
    let r = open_once_free(&path);
    assert_eq!(r.bad_blocks().ranges(), [(PAGE + 16, 8), (2 * PAGE, 1)]);
    let mut buf = [0u8; 64];
    let err = r.read(PAGE, &mut buf).unwrap_err();
    assert!(matches!(err, PmError::Media { off } if off == PAGE + 16), "{err}");
    assert_eq!(err.errno(), libc::EIO);
    assert!(matches!(r.load_u64(PAGE + 16), Err(PmError::Media { off }) if off == PAGE + 16));
    assert!(r.load_u64(PAGE + 8).is_ok(), "neighbours read fine");
    assert!(matches!(r.read(2 * PAGE - 10, &mut buf), Err(PmError::Media { off }) if off == 2 * PAGE));
    // Writes do not clear poison.
    r.write(PAGE + 16, &[1u8; 8]).unwrap();
    assert!(r.read(PAGE + 20, &mut [0u8; 1]).is_err());
    drop(r);
    // Removing the sidecar clears it for the next mapping; the write
    // made while poisoned is there.
    std::fs::remove_file(BadBlocks::sidecar(&path)).unwrap();
    let r = open_once_free(&path);
    r.read(PAGE, &mut buf).unwrap();
    assert_eq!(&buf[16..24], &[1u8; 8]);
    assert_eq!(&buf[..16], &[9u8; 16]);
}

#[test]
fn a_malformed_sidecar_is_refused_naming_it() {
    let dir = shm_dir();
    let path = dir.path().join("img");
    drop(MmapRegion::create(&path, 2 * PAGE, &MapOptions::default()).unwrap());
    std::fs::write(BadBlocks::sidecar(&path), "8192 1\n").unwrap();
    let err = MmapRegion::open(&path, &MapOptions::default()).unwrap_err();
    assert!(matches!(err, PmError::Invalid { .. }), "{err}");
    assert!(err.to_string().contains("img.badblocks: line 1"), "{err}");
}

/// Timing, not a test: `cargo test -p pm --release -- --ignored --nocapture`.
#[test]
#[ignore = "timing; run with --ignored --nocapture"]
fn write_nt_4k_timing() {
    let dir = shm_dir();
    let r = MmapRegion::create(&dir.path().join("img"), 1 << 24, &MapOptions::default()).unwrap();
    let data = pattern(4096, 3);
    let n = 200_000u64;
    let pages = r.len() / PAGE;
    let t = std::time::Instant::now();
    for i in 0..n {
        r.write_nt((i % pages) * PAGE, &data).unwrap();
    }
    r.fence();
    let nt = t.elapsed().as_nanos() as f64 / n as f64;
    let t = std::time::Instant::now();
    for i in 0..n {
        let off = (i % pages) * PAGE;
        r.write(off, &data).unwrap();
        r.flush(off, PAGE).unwrap();
    }
    r.fence();
    let cached = t.elapsed().as_nanos() as f64 / n as f64;
    let mut buf = vec![0u8; 4096];
    let t = std::time::Instant::now();
    for i in 0..n {
        r.read((i % pages) * PAGE, &mut buf).unwrap();
    }
    let read = t.elapsed().as_nanos() as f64 / n as f64;
    println!(
        "4 KiB write_nt {nt:.0} ns, write+{} {cached:.0} ns, read {read:.0} ns",
        r.flush_kind()
    );
}
