//! Pages reserved for an operation never leak: whichever write of the
//! operation fails (the media refuses it), the operation fails and the
//! free-page count is exactly what it was before, and after a clean
//! unmount fsck finds every page either in use or free. Each test
//! enumerates every write the operation makes, failing one per run, for
//! each place that reserves pages: file data, extended attribute values,
//! a shrink's copied page, a new inode's log and ACLs, an inode-table
//! chunk, thorough log GC's new log and the snapshot list's compaction.
#![allow(clippy::unwrap_used)]

mod common;

use common::fresh;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use novafs::{Fs, Ino, MountOptions, SetAttr, ROOT_INO};
use pm::{MemRegion, PmError, Region, RegionKind};

/// A heap region whose `k`-th bulk write (cached, non-temporal or zeroing)
/// after [`Failing::arm`] fails as a media error would; 8-byte stores and
/// flushes pass, so no commit point is torn.
struct Failing {
    inner: MemRegion,
    /// Bulk writes left before the failing one; negative: disarmed.
    left: AtomicI64,
    /// Bulk writes seen since the last arm.
    seen: AtomicU64,
}

impl Failing {
    fn arm(&self, k: i64) {
        self.seen.store(0, Ordering::SeqCst);
        self.left.store(k, Ordering::SeqCst);
    }

    fn disarm(&self) -> u64 {
        self.left.store(-1, Ordering::SeqCst);
        self.seen.load(Ordering::SeqCst)
    }

    fn bulk(&self, off: u64) -> Result<(), PmError> {
        self.seen.fetch_add(1, Ordering::SeqCst);
        if self.left.fetch_sub(1, Ordering::SeqCst) == 0 {
            return Err(PmError::Media { off });
        }
        Ok(())
    }
}

impl Region for Failing {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), PmError> {
        self.inner.read(off, buf)
    }
    fn write(&self, off: u64, data: &[u8]) -> Result<(), PmError> {
        self.bulk(off)?;
        self.inner.write(off, data)
    }
    fn write_nt(&self, off: u64, data: &[u8]) -> Result<(), PmError> {
        self.bulk(off)?;
        self.inner.write_nt(off, data)
    }
    fn zero_nt(&self, off: u64, len: u64) -> Result<(), PmError> {
        self.bulk(off)?;
        self.inner.zero_nt(off, len)
    }
    fn flush(&self, off: u64, len: u64) -> Result<(), PmError> {
        self.inner.flush(off, len)
    }
    fn fence(&self) {
        self.inner.fence()
    }
    fn store_u64(&self, off: u64, val: u64) -> Result<(), PmError> {
        self.inner.store_u64(off, val)
    }
    fn load_u64(&self, off: u64) -> Result<u64, PmError> {
        self.inner.load_u64(off)
    }
    fn kind(&self) -> RegionKind {
        RegionKind::Memory
    }
}

/// A formatted image of `mib` MiB (one shard: the runs are repeatable)
/// over a [`Failing`] region, mounted.
fn failing_fs(mib: u64) -> (Arc<Failing>, Arc<dyn Region>, Fs) {
    let formatted = fresh(mib, 1);
    let bytes = Arc::new(Failing {
        inner: MemRegion::from_bytes(snapshot_of(&formatted)),
        left: AtomicI64::new(-1),
        seen: AtomicU64::new(0),
    });
    let region: Arc<dyn Region> = bytes.clone();
    let fs = Fs::open(region.clone(), MountOptions::default()).unwrap();
    (bytes, region, fs)
}

fn snapshot_of(region: &Arc<dyn Region>) -> Vec<u8> {
    let mut bytes = vec![0u8; region.len() as usize];
    region.read(0, &mut bytes).unwrap();
    bytes
}

/// Runs `op` once for each of its bulk writes (the first 16, then every
/// 37th), that write failing. Every failed run must leave as many free
/// pages as a mount of the image after a crash finds (nothing leaked,
/// nothing freed that is in use) and fsck no page leaked or doubly used;
/// with `exact`, as many as before the op too (the op commits nothing
/// else, such as a GC or a table growth, before it fails). `setup` builds
/// the state `op` starts from, on a fresh image each time. Returns how
/// many runs failed.
fn every_failure<S>(
    mib: u64,
    exact: bool,
    setup: impl Fn(&Fs) -> S,
    op: impl Fn(&Fs, &S) -> novafs::Result<()>,
) -> u64 {
    let mut failed = 0;
    let mut k = 0;
    loop {
        let (bytes, region, fs) = failing_fs(mib);
        let state = setup(&fs);
        let before = fs.statfs().blocks_free;
        bytes.arm(k);
        let r = op(&fs, &state);
        let seen = bytes.disarm();
        if r.is_ok() {
            assert!(seen <= k as u64, "the op succeeded although its write {k} failed");
            break;
        }
        failed += 1;
        let free = fs.statfs().blocks_free;
        if exact {
            assert_eq!(free, before, "write {k} of {seen} failed ({r:?}): pages leaked");
        }
        drop(fs); // A crash: the next mount finds the free pages by a scan.
        let fs = Fs::open(region.clone(), MountOptions::default()).unwrap();
        assert_eq!(
            fs.statfs().blocks_free,
            free,
            "write {k} of {seen} failed ({r:?}): pages neither free nor in use"
        );
        fs.unmount().unwrap();
        let rep = novafs::fsck::check(region.clone(), &|_, _| {}).unwrap();
        let bad: Vec<_> = rep
            .problems
            .iter()
            .filter(|p| p.contains("leaked") || p.contains("used by") || p.contains("listed as free"))
            .collect();
        assert!(bad.is_empty(), "write {k} of {seen} failed: {bad:?}");
        k += if k < 16 { 1 } else { 37 };
    }
    assert!(failed > 0, "the op made no write to fail");
    failed
}

/// A POSIX ACL (the kernel's xattr format) naming `users` users: more
/// than 120 do not fit in a log entry, and the value takes data pages.
fn big_acl(users: u32) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    let mut push = |tag: u16, perm: u16, id: u32| {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    };
    push(0x01, 7, u32::MAX);
    for u in 0..users {
        push(0x02, 5, 1000 + u);
    }
    push(0x04, 5, u32::MAX);
    push(0x10, 7, u32::MAX);
    push(0x20, 0, u32::MAX);
    v
}

const ACCESS: &[u8] = b"system.posix_acl_access";
const DEFAULT: &[u8] = b"system.posix_acl_default";

#[test]
fn a_failed_write_gives_its_data_pages_back() {
    let failed = every_failure(
        32,
        true,
        |fs| fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino,
        |fs, &f| fs.write(f, 100, &[7u8; 3 * 4096]).map(|_| ()),
    );
    assert!(failed >= 3, "only {failed} failing runs");
}

#[test]
fn a_failed_large_xattr_gives_its_value_pages_back() {
    every_failure(
        32,
        true,
        |fs| fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino,
        |fs, &f| fs.setxattr(f, b"user.big", &[9u8; 10_000], 0),
    );
}

#[test]
fn a_failed_shrink_and_chmod_give_the_copied_page_and_acl_pages_back() {
    every_failure(
        32,
        true,
        |fs| {
            let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
            fs.write(f, 0, &[3u8; 3 * 4096]).unwrap();
            fs.setxattr(f, ACCESS, &big_acl(300), 0).unwrap();
            f
        },
        |fs, &f| {
            let set = SetAttr::default().size(5000).mode(0o600);
            fs.setattr(f, &set).map(|_| ())
        },
    );
}

#[test]
fn a_failed_create_gives_its_log_and_inherited_acl_pages_back() {
    let dir = |fs: &Fs| {
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
        fs.setxattr(d, DEFAULT, &big_acl(300), 0).unwrap();
        d
    };
    every_failure(32, true, dir, |fs, &d| fs.mkdir(d, b"sub", 0o750, 0, 0).map(|_| ()));
    every_failure(32, true, dir, |fs, &d| fs.create(d, b"f", 0o640, 0, 0).map(|_| ()));
    every_failure(
        32,
        true,
        |_| (),
        |fs, _| fs.symlink(ROOT_INO, b"l", &[b'x'; 3000], 0, 0).map(|_| ()),
    );
}

#[test]
fn a_failed_inode_table_growth_gives_the_chunk_back() {
    // Inode number past the first chunk (16384 slots): the table grows.
    every_failure(
        48,
        false,
        |fs| {
            let mut like = fs
                .getattr(fs.create(ROOT_INO, b"model", 0o644, 0, 0).unwrap().ino)
                .unwrap();
            like.ino = 16_384 + 5;
            like
        },
        |fs, like| fs.restore_node(ROOT_INO, b"far", like, None).map(|_| ()),
    );
}

/// Names kept in a directory one per log page, with created and removed
/// names between them: fast GC frees nothing, so the op that grows the
/// log next runs thorough GC. The ops, in order.
fn churn_ops() -> Vec<(bool, Vec<u8>)> {
    let mut ops = Vec::new();
    for i in 0..16 {
        ops.push((true, format!("keep{i}").into_bytes()));
        for _ in 0..30 {
            ops.push((true, b"t".to_vec()));
            ops.push((false, b"t".to_vec()));
        }
    }
    ops
}

fn churn_op(fs: &Fs, d: Ino, (create, name): &(bool, Vec<u8>)) -> novafs::Result<()> {
    if *create {
        fs.create(d, name, 0o644, 0, 0).map(|_| ())
    } else {
        fs.unlink(d, name)
    }
}

#[test]
fn a_failed_thorough_gc_gives_the_new_log_back() {
    let ops = churn_ops();
    // The first op that runs thorough GC.
    let (_, _, fs) = failing_fs(32);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let at = ops
        .iter()
        .position(|o| {
            churn_op(&fs, d, o).unwrap();
            fs.gc_stats().thorough_runs > 0
        })
        .expect("thorough GC never ran");
    drop(fs);
    every_failure(
        32,
        false,
        |fs| {
            let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
            for o in &ops[..at] {
                churn_op(fs, d, o).unwrap();
            }
            assert_eq!(fs.gc_stats().thorough_runs, 0);
            d
        },
        |fs, &d| churn_op(fs, d, &ops[at]),
    );
}

/// Takes (`true`) or deletes snapshot `i`.
fn snapshot_op(fs: &Fs, i: usize, take: bool) -> novafs::Result<()> {
    let name = format!("s{i}");
    match take {
        true => fs.take_snapshot(name.as_bytes()).map(|_| ()),
        false => fs.delete_snapshot(name.as_bytes()).map(|_| ()),
    }
}

#[test]
fn a_failed_snapshot_list_compaction_gives_the_new_log_back() {
    // Taking and deleting snapshots fills the list with records of which
    // none is live: the op that would grow it compacts it instead, the
    // first one that writes more than its own record.
    let (bytes, _, fs) = failing_fs(32);
    let mut at = None;
    for i in 0..400 {
        bytes.arm(i64::MAX);
        snapshot_op(&fs, i / 2, i % 2 == 0).unwrap();
        let one_record = i == 0;
        let seen = bytes.disarm();
        if seen > 2 && !one_record {
            at = Some(i);
            break;
        }
    }
    drop(fs);
    let at = at.expect("the snapshot list was never compacted");
    every_failure(
        32,
        true,
        |fs| {
            for i in 0..at {
                snapshot_op(fs, i / 2, i % 2 == 0).unwrap();
            }
        },
        |fs, _| snapshot_op(fs, at / 2, at % 2 == 0),
    );
}
