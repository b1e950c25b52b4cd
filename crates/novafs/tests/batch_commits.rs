//! What makes a batching relaxed mount's running transaction commit
//! (`Fs::batch_stats`, FGM Fig. 14): exact counts for a scripted sequence.
//! An in-place chmod changes three words of the inode's newest setattr
//! entry (its checksum's word, the mode's and the ctime's), so a
//! transaction of six words is full after chmods of two files; the same
//! file changed again replaces its words.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use novafs::{BatchStats, Batching, Consistency, FormatOptions, Fs, MountOptions, SetAttr, ROOT_INO};
use pm::{MemRegion, Region};

const HOUR: Duration = Duration::from_secs(3600);

fn relaxed_image() -> Arc<dyn Region> {
    let region: Arc<dyn Region> = Arc::new(MemRegion::new(32 << 20));
    let format = FormatOptions::default().shards(2).consistency(Consistency::Relaxed);
    Fs::format(region.clone(), &format).unwrap();
    region
}

fn batching(region: &Arc<dyn Region>, words: usize, interval: Duration) -> Fs {
    Fs::open(
        region.clone(),
        MountOptions::default().batch(Some(Batching { words, interval })),
    )
    .unwrap()
}

fn chmod(fs: &Fs, ino: u64, perm: u32) {
    fs.setattr(ino, &SetAttr::default().mode(Some(perm))).unwrap();
}

/// A new file whose newest log entry is a setattr: the next setattr on it
/// goes in place. The first, after the create, is appended.
fn file(fs: &Fs, name: &str) -> u64 {
    let f = fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
    chmod(fs, f, 0o640);
    f
}

#[test]
fn each_commit_of_the_running_transaction_counts_its_cause() {
    let region = relaxed_image();
    let fs = batching(&region, 6, HOUR);
    let [a, b, c] = ["a", "b", "c"].map(|n| file(&fs, n));
    let zero = BatchStats {
        capacity: 6,
        ..BatchStats::default()
    };
    assert_eq!(fs.batch_stats(), zero, "appended setattrs do not batch");
    let j0 = fs.journal_stats();

    // Three words for a, three for b: full.
    chmod(&fs, a, 0o600);
    chmod(&fs, b, 0o600);
    assert_eq!(fs.batch_stats(), BatchStats { full: 1, ..zero });
    // a's three words, twice: still three, not full; fsync commits them
    // (any file's fsync), and a second fsync has nothing to commit.
    chmod(&fs, a, 0o604);
    chmod(&fs, a, 0o600);
    fs.fsync(b).unwrap();
    fs.fsync(b).unwrap();
    let two = BatchStats {
        full: 1,
        fsync: 1,
        ..zero
    };
    assert_eq!(fs.batch_stats(), two);
    assert_eq!(fs.journal_stats().since(&j0).txns, 2, "each commit is one transaction");

    // A snapshot commits first.
    chmod(&fs, c, 0o600);
    fs.take_snapshot(b"s").unwrap();
    let three = BatchStats { snapshot: 1, ..two };
    assert_eq!(fs.batch_stats(), three);

    // a's newest entry is now of an epoch the snapshot keeps: appended
    // once, then in place again. Freeing a deleted file's log commits
    // first (a file made after the snapshot, which keeps none of it).
    chmod(&fs, a, 0o644);
    assert_eq!(fs.batch_stats(), three, "appended after the snapshot");
    chmod(&fs, a, 0o640);
    let d = fs.create(ROOT_INO, b"d", 0o644, 0, 0).unwrap().ino;
    fs.write(d, 0, &[7u8; 100]).unwrap();
    fs.unlink(ROOT_INO, b"d").unwrap();
    fs.wait_reclaimed();
    let four = BatchStats { log_free: 1, ..three };
    assert_eq!(fs.batch_stats(), four);
    assert_eq!(four.commits(), 4);
    assert_eq!(
        fs.batch_stats().since(&two),
        BatchStats {
            snapshot: 1,
            log_free: 1,
            ..zero
        }
    );
    fs.unmount().unwrap();

    // The timer: one commit of what is running, then nothing to commit.
    // (b's newest entry is of the snapshot's epoch: the first chmod is
    // appended.)
    let fs = batching(&region, 1024, Duration::from_millis(20));
    chmod(&fs, b, 0o644);
    chmod(&fs, b, 0o640);
    let t = Instant::now();
    while fs.batch_stats().timer == 0 && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        fs.batch_stats(),
        BatchStats {
            capacity: 1024,
            timer: 1,
            ..BatchStats::default()
        }
    );
    fs.unmount().unwrap();

    // A strict mount does not batch.
    let fs = Fs::open(
        region.clone(),
        MountOptions::default().consistency(Some(Consistency::Strict)),
    )
    .unwrap();
    chmod(&fs, a, 0o600);
    chmod(&fs, a, 0o644);
    fs.fsync(a).unwrap();
    assert_eq!(fs.batch_stats(), BatchStats::default());
    fs.unmount().unwrap();
}

#[test]
fn the_capacity_is_at_most_what_the_ring_holds() {
    let region = relaxed_image();
    let fs = batching(&region, 1 << 20, HOUR);
    let cap = fs.batch_stats().capacity;
    // 64 KiB ring: a 32-byte TxnInfo, then 16-byte records of 8-byte words.
    assert_eq!(cap, (64 * 1024 - 32) / 24);
    fs.unmount().unwrap();
}

/// The commit timer racing in-place setattrs: relaxed mode reads the
/// newest entry from the media and then lays the running transaction over
/// it (`relaxed::newest_entry`), so a commit between the two leaves it the
/// media's old words, and the entry's new checksum is computed over them
/// while the media keeps the committed ones: "log entry ... fails its
/// checksum" on the next mount. `Batch::read` reads under the batch's
/// lock (found by `novafs bench --txninfo-sweep`).
#[test]
fn the_commit_timer_racing_setattrs_leaves_every_entry_whole() {
    let region = relaxed_image();
    let fs = batching(&region, 1 << 20, HOUR);
    let files: Vec<u64> = (0..50).map(|i| file(&fs, &format!("f{i}"))).collect();
    fs.unmount().unwrap();
    let fs = batching(&region, 1 << 20, Duration::from_micros(100));
    let t = Instant::now();
    let mut perms = vec![0o640u32; files.len()];
    let mut n = 0u64;
    while t.elapsed() < Duration::from_secs(3) {
        let i = (n * 7919 % files.len() as u64) as usize;
        let set = if n.is_multiple_of(2) {
            perms[i] ^= 0o004;
            SetAttr::default().mode(Some(perms[i]))
        } else {
            SetAttr::default().atime(Some(n as i64)).mtime(Some(n as i64))
        };
        fs.setattr(files[i], &set).unwrap();
        n += 1;
    }
    fs.unmount().unwrap();
    let fs = Fs::open(
        region.clone(),
        MountOptions::default().consistency(Some(Consistency::Strict)),
    )
    .unwrap();
    for (&f, &perm) in files.iter().zip(&perms) {
        let a = fs
            .getattr(f)
            .unwrap_or_else(|e| panic!("after {n} setattrs, file {f}: {e}"));
        assert_eq!(a.perm, perm);
    }
    fs.unmount().unwrap();
}

/// A transaction as large as the ring holds: a change that would take it
/// past its limit commits it first (it was "larger than the ring", EINVAL,
/// when the limit was reached by a change of several words).
#[test]
fn a_change_that_would_overfill_the_transaction_commits_it_first() {
    let region: Arc<dyn Region> = Arc::new(MemRegion::new(64 << 20));
    let format = FormatOptions::default().shards(2).consistency(Consistency::Relaxed);
    Fs::format(region.clone(), &format).unwrap();
    let fs = batching(&region, 1 << 20, HOUR);
    let cap = fs.batch_stats().capacity as u64;
    // Chmods of three words each fill it to within three words.
    let chmods = (cap - 1) / 3;
    let files: Vec<u64> = (0..=chmods).map(|i| file(&fs, &format!("f{i}"))).collect();
    for &f in &files[..chmods as usize] {
        chmod(&fs, f, 0o600);
    }
    assert_eq!(fs.batch_stats().commits(), 0);
    // A utimens changes four words (checksum, atime, mtime, ctime).
    let last = files[chmods as usize];
    fs.setattr(last, &SetAttr::default().atime(Some(1)).mtime(Some(2)))
        .unwrap();
    assert_eq!(fs.batch_stats().full, 1);
    fs.fsync(last).unwrap();
    assert_eq!(fs.batch_stats().fsync, 1);
    fs.unmount().unwrap();
    let fs = Fs::open(region.clone(), MountOptions::default()).unwrap();
    assert_eq!(fs.getattr(last).unwrap().mtime, 2);
    assert!(files[..chmods as usize]
        .iter()
        .all(|&f| fs.getattr(f).unwrap().perm == 0o600));
    fs.unmount().unwrap();
}
