//! Helpers shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;

use novafs::probe::layout::{Superblock, PAGE_SIZE};
use novafs::{FormatOptions, Fs, Mapping, MountOptions};
use pm::{MemRegion, Region};
use zerocopy::{FromBytes, IntoBytes};

/// A freshly formatted heap region of `mib` MiB with `shards` shards.
pub fn fresh(mib: u64, shards: u32) -> Arc<dyn Region> {
    let region: Arc<dyn Region> = Arc::new(MemRegion::new(mib << 20));
    Fs::format(region.clone(), &FormatOptions::default().shards(shards)).unwrap();
    region
}

pub fn mount(region: &Arc<dyn Region>) -> Fs {
    Fs::open(region.clone(), MountOptions::default()).unwrap()
}

/// Edits both superblock copies with `edit` and gives each its checksum
/// again: a superblock novafs did not write, but one no checksum catches.
pub fn rewrite_superblocks(mem: &dyn Region, edit: impl Fn(&mut Superblock)) {
    for off in [0, mem.len() - PAGE_SIZE] {
        let mut buf = vec![0u8; size_of::<Superblock>()];
        mem.read(off, &mut buf).unwrap();
        let mut sb = Superblock::read_from_bytes(&buf).unwrap();
        edit(&mut sb);
        sb.csum = sb.compute_csum();
        mem.write(off, sb.as_bytes()).unwrap();
    }
}

/// Reads a whole file.
pub fn read_all(fs: &Fs, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size as usize;
    let mut buf = vec![0u8; size];
    let n = fs.read(ino, 0, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

/// Names in a directory, sorted, without "." and "..".
pub fn names(fs: &Fs, dir: u64) -> Vec<String> {
    let mut v = Vec::new();
    fs.readdir(dir, 0, |e| {
        if e.name != b"." && e.name != b".." {
            v.push(String::from_utf8(e.name).unwrap());
        }
        false
    })
    .unwrap();
    v.sort();
    v
}

/// Runs fsck on the image and panics with its findings if it is not clean.
pub fn assert_fsck_clean(region: &Arc<dyn Region>) {
    let rep = novafs::fsck::check(region.clone(), &|_, _| {}).unwrap();
    assert!(rep.is_clean(), "fsck problems: {:#?}", rep.problems);
}

/// A change to a file through the file system, as the mapped-file model
/// tests make them among their stores: what [`random_change`] did, to be
/// replayed on the models.
pub enum FileChange {
    Write(usize, Vec<u8>),
    Resize(usize),
    /// Bytes `from..to` read as zeros (a hole punched).
    Zero(usize, usize),
}

impl FileChange {
    pub fn apply(&self, model: &mut Vec<u8>) {
        match self {
            FileChange::Write(off, bytes) => {
                let end = off + bytes.len();
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[*off..end].copy_from_slice(bytes);
            }
            FileChange::Resize(new) => model.resize(*new, 0),
            FileChange::Zero(from, to) => model[*from..*to].fill(0),
        }
    }
}

/// Makes change `kind` to file `ino` of `size` bytes, within its first
/// `limit` bytes: 0 a write, 1 a truncation, 2 a hole punched (None when
/// the file is a page or less).
pub fn random_change(
    fs: &Fs,
    ino: u64,
    rng: &mut novafs_rng::SplitMix,
    kind: u64,
    (size, limit): (usize, usize),
) -> Option<FileChange> {
    const PS: usize = novafs::PAGE_SIZE as usize;
    Some(match kind {
        0 => {
            let off = rng.below(limit as u64 - 100) as usize;
            let len = (1 + rng.below(5000) as usize).min(limit - off);
            let bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            fs.write(ino, off as u64, &bytes).unwrap();
            FileChange::Write(off, bytes)
        }
        1 => {
            let new = rng.below(limit as u64) as usize;
            fs.setattr(ino, &novafs::SetAttr::default().size(new as u64)).unwrap();
            FileChange::Resize(new)
        }
        _ if size > PS => {
            let off = rng.below(size as u64 - 1);
            let len = 1 + rng.below(3 * PS as u64);
            let mode = novafs::FALLOC_FL_PUNCH_HOLE | novafs::FALLOC_FL_KEEP_SIZE;
            fs.fallocate(ino, mode, off, len).unwrap();
            FileChange::Zero(off as usize, (off + len).min(size as u64) as usize)
        }
        _ => return None,
    })
}

/// Equal contents, or a panic naming the first byte that differs.
pub fn same(got: &[u8], want: &[u8], ctx: &str) {
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b);
        panic!(
            "{ctx}: {} bytes where {} are expected, first difference at {at:?}",
            got.len(),
            want.len()
        );
    }
}

/// The seeds a mapped-file model test runs: six from NOVAFS_MMAP_SEED, or
/// from `default`.
pub fn mmap_seeds(default: u64) -> std::ops::Range<u64> {
    let base = std::env::var("NOVAFS_MMAP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    base..base + 6
}

/// Runs each of `tests` (names in this test binary, ignored ones too) in a
/// child process whose windows may keep no kernel mapping a fault does not
/// need (`NOVAFS_WINDOW_VMAS=0`): each fault of a mapping there unmaps the
/// mapping's other pages, as it would past the kernel's mapping limit.
/// Panics unless each ran and passed within five minutes (a fault that
/// unmapped the page an access needs next would retry for ever).
pub fn run_where_every_fault_unmaps_the_rest(tests: &[&str]) {
    use std::io::Read;
    for name in tests {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--include-ignored", "--test-threads", "1"])
            .env("NOVAFS_WINDOW_VMAS", "0")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Read while it runs, so that a full pipe cannot stop it.
        let drain = |mut r: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut s = String::new();
                r.read_to_string(&mut s).unwrap();
                s
            })
        };
        let out = drain(Box::new(child.stdout.take().unwrap()));
        let err = drain(Box::new(child.stderr.take().unwrap()));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                child.kill().unwrap();
                child.wait().unwrap();
                panic!("{name} with NOVAFS_WINDOW_VMAS=0 still running after 5 minutes");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
        assert!(
            status.success() && stdout.contains("test result: ok. 1 passed"),
            "{name} with NOVAFS_WINDOW_VMAS=0:\n{stdout}\n{stderr}"
        );
    }
}

/// `threads` threads store at once through `m`, `len` bytes of `byte`
/// each time: thread t at byte t of its `each` pages t, t + threads, ...
/// Interleaved, so that one thread's faults (and their write-ahead) meet
/// the others' pages. `want` gets the same stores.
pub fn store_from_threads(m: &Mapping<'_>, (threads, each): (usize, usize), (byte, len): (u8, usize), want: &mut [u8]) {
    const PS: usize = novafs::PAGE_SIZE as usize;
    let at = move |t: usize, i: usize| (t + i * threads) * PS + t;
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let bytes = vec![byte; len];
                for i in 0..each {
                    m.store(at(t, i), &bytes).unwrap();
                }
            });
        }
    });
    for t in 0..threads {
        for i in 0..each {
            want[at(t, i)..at(t, i) + len].fill(byte);
        }
    }
}
