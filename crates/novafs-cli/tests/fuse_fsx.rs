//! fsx-style random I/O through the mount checked against an in-memory
//! shadow copy, and concurrent writers from several processes.

mod fuse_common;

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use fuse_common::{ok, random_bytes, require_fuse, shm_dir, Mount, SplitMix};

const FALLOC_FL_KEEP_SIZE: i32 = 0x01;
const FALLOC_FL_PUNCH_HOLE: i32 = 0x02;

fn fallocate(f: &File, mode: i32, off: u64, len: u64) -> io::Result<()> {
    // SAFETY: fallocate on a descriptor `f` keeps open for the call.
    let rc = unsafe { libc::fallocate(f.as_raw_fd(), mode, off as i64, len as i64) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// lseek with SEEK_DATA/SEEK_HOLE; Ok(None) for ENXIO.
fn seek(f: &File, off: u64, whence: i32) -> io::Result<Option<u64>> {
    // SAFETY: lseek on a descriptor `f` keeps open for the call.
    let rc = unsafe { libc::lseek(f.as_raw_fd(), off as i64, whence) };
    if rc >= 0 {
        return Ok(Some(rc as u64));
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ENXIO) {
        Ok(None)
    } else {
        Err(e)
    }
}

/// Writes `data` at `off` through a shared mapping of the file (the
/// range must lie inside the file): the kernel writes the pages back as
/// WRITE requests, at the latest when the file is closed or synced.
fn write_mapped(f: &File, off: u64, data: &[u8]) {
    let start = off & !4095;
    let len = (off - start) as usize + data.len();
    // SAFETY: a new shared mapping of `len` bytes of a descriptor open
    // for reading and writing; nothing else refers to it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            start as i64,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "mmap: {}", io::Error::last_os_error());
    // SAFETY: `data` fits in the mapping from byte `off - start` on, and
    // the mapping is unmapped right after, once.
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), p.cast::<u8>().add((off - start) as usize), data.len());
        assert_eq!(libc::munmap(p, len), 0, "munmap");
    }
}

fn open_rw(p: &Path) -> File {
    OpenOptions::new().read(true).write(true).open(p).expect("open")
}

/// The whole file equals the shadow, byte for byte.
fn check_all(f: &File, shadow: &[u8], op: usize) {
    assert_eq!(f.metadata().expect("fstat").len(), shadow.len() as u64, "op {op}: size");
    let mut buf = vec![0u8; shadow.len()];
    f.read_exact_at(&mut buf, 0).expect("read all");
    if buf != shadow {
        let at = buf.iter().zip(shadow).position(|(a, b)| a != b).unwrap_or(0);
        panic!(
            "op {op}: contents differ first at byte {at} (got {:#x}, want {:#x})",
            buf[at], shadow[at]
        );
    }
}

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn fsx_random_read_write_truncate_fallocate_matches_a_shadow_copy() {
    fsx("mode=strict", 0x5eed_f5c5);
}

/// The same in relaxed mode (Fortis §4.6), where overwrites inside the
/// file go in place and setattrs change the newest entry in place.
#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn fsx_in_relaxed_mode_matches_a_shadow_copy() {
    fsx("mode=relaxed", 0x5eed_f5c6);
}

/// The same with the kernel's writeback cache, where the kernel keeps
/// the size and times and writes pages back later, in other sizes than
/// they were written in; the remount at the end checks what reached the
/// image.
#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn fsx_with_the_writeback_cache_matches_a_shadow_copy() {
    fsx("writeback_cache", 0x5eed_f5c7);
}

fn fsx(mode_option: &str, seed: u64) {
    require_fuse();
    let mut m = Mount::new("256M", &[mode_option]);
    let path = m.path("fsx");
    File::create(&path).expect("create");
    let mut f = open_rw(&path);
    let mut shadow: Vec<u8> = Vec::new();
    let mut rng = SplitMix::new(seed);
    const MAX_LEN: u64 = 6 << 20;
    const OPS: usize = 4000;
    for op in 0..OPS {
        let size = shadow.len() as u64;
        match rng.below(100) {
            // write, mostly small, sometimes over 1 MiB (several requests)
            0..=34 => {
                let len = if rng.below(20) == 0 {
                    (1 << 20) + rng.below(1 << 20)
                } else {
                    1 + rng.below(64 << 10)
                };
                let off = rng.below(MAX_LEN - len);
                let data = random_bytes(&mut rng, len as usize);
                f.write_all_at(&data, off).expect("pwrite");
                let end = (off + len) as usize;
                if shadow.len() < end {
                    shadow.resize(end, 0);
                }
                shadow[off as usize..end].copy_from_slice(&data);
            }
            // read a random range (short at the end of the file)
            35..=59 => {
                let off = rng.below(size + 4096);
                let len = 1 + rng.below(256 << 10) as usize;
                let mut buf = vec![0u8; len];
                let mut got = 0;
                while got < len {
                    let n = f.read_at(&mut buf[got..], off + got as u64).expect("pread");
                    if n == 0 {
                        break;
                    }
                    got += n;
                }
                let want = shadow.get(off as usize..).map_or(&[][..], |s| &s[..s.len().min(len)]);
                assert_eq!(&buf[..got], want, "op {op}: read {len} at {off}");
            }
            // truncate down or up
            60..=69 => {
                let new = rng.below(MAX_LEN);
                f.set_len(new).expect("ftruncate");
                shadow.resize(new as usize, 0);
            }
            // fallocate: allocate (maybe extending), keep size, punch a hole
            70..=84 => {
                let off = rng.below(MAX_LEN / 2);
                let len = 1 + rng.below(1 << 20);
                match rng.below(3) {
                    0 => {
                        fallocate(&f, 0, off, len).expect("fallocate");
                        let end = (off + len) as usize;
                        if shadow.len() < end {
                            shadow.resize(end, 0);
                        }
                    }
                    1 => fallocate(&f, FALLOC_FL_KEEP_SIZE, off, len).expect("keep size"),
                    _ => {
                        fallocate(&f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len).expect("punch hole");
                        let end = ((off + len) as usize).min(shadow.len());
                        if (off as usize) < end {
                            shadow[off as usize..end].fill(0);
                        }
                    }
                }
            }
            // SEEK_DATA / SEEK_HOLE agree with the contents
            85..=91 => {
                if size == 0 {
                    continue;
                }
                let off = rng.below(size);
                match seek(&f, off, libc::SEEK_DATA).expect("SEEK_DATA") {
                    Some(d) => {
                        assert!(d >= off && d < size, "op {op}: SEEK_DATA {off} -> {d}");
                        assert!(
                            shadow[off as usize..d as usize].iter().all(|&b| b == 0),
                            "op {op}: SEEK_DATA skipped data"
                        );
                    }
                    None => assert!(shadow[off as usize..].iter().all(|&b| b == 0)),
                }
                let h = seek(&f, off, libc::SEEK_HOLE)
                    .expect("SEEK_HOLE")
                    .expect("a hole at EOF at least");
                assert!(h >= off && h <= size, "op {op}: SEEK_HOLE {off} -> {h}");
                if h < size {
                    assert_eq!(shadow[h as usize], 0, "op {op}: hole at {h} holds data");
                }
            }
            // close and reopen (the page cache is kept across opens)
            92..=93 => f = open_rw(&path),
            // write through a shared mapping
            94..=95 => {
                if size == 0 {
                    continue;
                }
                let off = rng.below(size);
                let len = 1 + rng.below((size - off).min(64 << 10));
                let data = random_bytes(&mut rng, len as usize);
                write_mapped(&f, off, &data);
                shadow[off as usize..(off + len) as usize].copy_from_slice(&data);
            }
            // full check
            _ => check_all(&f, &shadow, op),
        }
        assert_eq!(
            fs::metadata(&path).expect("stat").len(),
            shadow.len() as u64,
            "op {op}: size after op"
        );
    }
    check_all(&f, &shadow, OPS);
    drop(f);
    // What the mount showed is what is on the image.
    m.umount();
    m.mount(&[mode_option]);
    check_all(&File::open(&path).expect("open"), &shadow, OPS);
    m.finish();
}

/// One shell worker: appends numbered lines to a shared log (each echo
/// opens with O_APPEND), copies its own file with 4 KiB writes, and
/// churns names in a shared directory (create, rename, remove).
const WORKER: &str = r#"
set -e
i=0
while [ $i -lt 300 ]; do
    printf '%s %05d\n' "$ID" $i >> "$M/shared.log"
    : > "$M/churn/new-$ID-$i"
    mv "$M/churn/new-$ID-$i" "$M/churn/kept-$ID-$i"
    if [ $((i % 2)) -eq 0 ]; then rm "$M/churn/kept-$ID-$i"; fi
    i=$((i+1))
done
dd if="$S/src$ID" of="$M/file$ID" bs=4096 conv=fsync status=none
cmp "$S/src$ID" "$M/file$ID"
"#;

#[test]
#[cfg_attr(not(novafs_fuse), ignore = "needs /dev/fuse (see crates/novafs-cli/build.rs)")]
fn concurrent_writers_from_several_processes_lose_nothing() {
    require_fuse();
    const WORKERS: usize = 4;
    let m = Mount::new("256M", &[]);
    let scratch = shm_dir();
    fs::create_dir(m.path("churn")).expect("mkdir");
    let mut rng = SplitMix::new(77);
    for id in 0..WORKERS {
        let size = (1 << 20) + rng.below(3 << 20) as usize;
        fs::write(scratch.path().join(format!("src{id}")), random_bytes(&mut rng, size)).expect("write");
    }
    let children: Vec<Child> = (0..WORKERS)
        .map(|id| {
            Command::new("sh")
                .arg("-c")
                .arg(WORKER)
                .env("ID", id.to_string())
                .env("M", &m.mnt)
                .env("S", scratch.path())
                .stdin(Stdio::null())
                .spawn()
                .expect("spawn worker")
        })
        .collect();
    for mut c in children {
        assert!(c.wait().expect("wait").success(), "a worker failed");
    }
    // Every line intact, each worker's lines in its own order.
    let log = fs::read_to_string(m.path("shared.log")).expect("read log");
    let mut next = [0u32; WORKERS];
    for line in log.lines() {
        let (id, n) = line.split_once(' ').expect("well-formed line");
        let id: usize = id.parse().expect("id");
        assert_eq!(n.parse::<u32>().expect("n"), next[id], "worker {id} order");
        next[id] += 1;
    }
    assert_eq!(next, [300; WORKERS], "lines per worker");
    let mut names: Vec<String> = fs::read_dir(m.path("churn"))
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut want: Vec<String> = (0..WORKERS)
        .flat_map(|id| (1..300).step_by(2).map(move |i| format!("kept-{id}-{i}")))
        .collect();
    want.sort();
    assert_eq!(names, want);
    for id in 0..WORKERS {
        ok(Command::new("cmp")
            .arg(scratch.path().join(format!("src{id}")))
            .arg(m.path(&format!("file{id}"))));
    }
    m.finish();
}
