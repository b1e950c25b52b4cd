//! Bad images and media errors: a foreign, newer or damaged image gets a
//! clear error; a damaged object reads as EIO without harming the rest; a
//! damaged primary superblock is repaired from its replica (Fortis §4.2).
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::*;
use novafs::probe::layout::{Superblock, PAGE_SIZE};
use novafs::{Error, Fs, MountOptions, ROOT_INO};
use pm::{MemRegion, Region};
use zerocopy::{FromBytes, IntoBytes};

fn image_with(f: impl FnOnce(&Fs)) -> Arc<MemRegion> {
    image_with_data_protection(true, f)
}

/// A 32 MiB two-shard image populated by `f`, with or without the strip
/// checksums and parity of file data.
fn image_with_data_protection(on: bool, f: impl FnOnce(&Fs)) -> Arc<MemRegion> {
    let mem = Arc::new(MemRegion::new(32 << 20));
    let region: Arc<dyn Region> = mem.clone();
    Fs::format(
        region.clone(),
        &novafs::FormatOptions::default().shards(2).data_csum(on).data_parity(on),
    )
    .unwrap();
    let fs = mount(&region);
    f(&fs);
    fs.unmount().unwrap();
    mem
}

fn open(mem: &Arc<MemRegion>) -> novafs::Result<Fs> {
    Fs::open(mem.clone(), MountOptions::default())
}

fn find(mem: &MemRegion, needle: &[u8]) -> u64 {
    let img = mem.snapshot();
    img.windows(needle.len())
        .position(|w| w == needle)
        .expect("marker not found") as u64
}

#[test]
fn foreign_image_is_refused_as_not_novafs() {
    let mem = Arc::new(MemRegion::new(32 << 20));
    mem.write(0, &[0xAB; 8192]).unwrap();
    assert!(matches!(open(&mem), Err(Error::NotNovafs(_))));
}

#[test]
fn newer_format_version_is_refused() {
    let mem = image_with(|_| {});
    rewrite_superblocks(&*mem, |sb| sb.version = 99);
    assert!(matches!(open(&mem), Err(Error::TooNew { found: 99, .. })));
}

#[test]
fn damaged_primary_superblock_is_repaired_from_the_replica() {
    let mem = image_with(|fs| {
        fs.create(ROOT_INO, b"kept", 0o644, 0, 0).unwrap();
    });
    mem.write(16, &[0xFF; 32]).unwrap();
    let fs = open(&mem).unwrap();
    assert!(fs.mount_report().superblock_repaired);
    fs.lookup(ROOT_INO, b"kept").unwrap();
    fs.unmount().unwrap();
    let fs = open(&mem).unwrap();
    assert!(!fs.mount_report().superblock_repaired, "primary was rewritten");
    fs.unmount().unwrap();
}

#[test]
fn both_superblocks_damaged_is_a_clear_error() {
    let mem = image_with(|_| {});
    mem.write(16, &[0xFF; 32]).unwrap();
    mem.write(mem.len() - PAGE_SIZE + 16, &[0xFF; 32]).unwrap();
    assert!(matches!(open(&mem), Err(Error::Corrupt(_))));
}

fn find_all(mem: &MemRegion, needle: &[u8]) -> Vec<u64> {
    let img = mem.snapshot();
    img.windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i as u64)
        .collect()
}

#[test]
fn a_dentry_damaged_in_one_copy_is_repaired_from_the_other() {
    let mem = image_with(|fs| {
        let d = fs.mkdir(ROOT_INO, b"sub", 0o755, 0, 0).unwrap();
        fs.create(d.ino, b"a-rather-unique-marker-name", 0o644, 0, 0).unwrap();
    });
    let copies = find_all(&mem, b"a-rather-unique-marker-name");
    assert_eq!(copies.len(), 2, "a primary and its replica");
    for (damaged, kept) in [(copies[0], copies[1]), (copies[1], copies[0])] {
        mem.write(damaged + 3, b"X").unwrap();
        let fs = open(&mem).unwrap();
        let sub = fs.lookup(ROOT_INO, b"sub").unwrap();
        fs.lookup(sub.ino, b"a-rather-unique-marker-name").unwrap();
        fs.unmount().unwrap();
        let mut a = [0u8; 27];
        let mut b = [0u8; 27];
        mem.read(damaged, &mut a).unwrap();
        mem.read(kept, &mut b).unwrap();
        if damaged == copies[0] {
            assert_eq!(a, b, "the mount copied the replica over the damaged primary");
            assert!(check(&mem).is_clean());
        } else {
            // A damaged replica is not read while the primary is whole:
            // fsck finds it, and its repair rewrites it from the primary.
            let found = check(&mem);
            assert!(
                found.problems.iter().any(|p| p.contains("differ from their replicas")),
                "{found:?}"
            );
            repair(&mem);
            mem.read(damaged, &mut a).unwrap();
            assert_eq!(a, b);
            assert!(check(&mem).is_clean());
        }
    }
}

#[test]
fn a_dentry_damaged_in_both_copies_makes_only_its_directory_eio() {
    let mem = image_with(|fs| {
        let d = fs.mkdir(ROOT_INO, b"sub", 0o755, 0, 0).unwrap();
        fs.create(d.ino, b"a-rather-unique-marker-name", 0o644, 0, 0).unwrap();
        let g = fs.create(ROOT_INO, b"good", 0o644, 0, 0).unwrap();
        fs.write(g.ino, 0, b"fine").unwrap();
    });
    for at in find_all(&mem, b"a-rather-unique-marker-name") {
        mem.write(at + 3, b"X").unwrap();
    }
    let region: Arc<dyn Region> = mem.clone();
    let rep = novafs::fsck::check(region, &|_, _| {}).unwrap();
    assert!(
        rep.problems.iter().any(|p| p.contains("checksum")),
        "{:?}",
        rep.problems
    );
    let fs = open(&mem).unwrap();
    let sub = fs.lookup(ROOT_INO, b"sub");
    assert_eq!(sub.map(|_| ()).unwrap_err().errno(), libc::EIO);
    let g = fs.lookup(ROOT_INO, b"good").unwrap();
    assert_eq!(read_all(&fs, g.ino), b"fine");
}

/// A poisoned byte of file data: EIO for that page without data
/// protection; with it (the default), rebuilt from parity.
#[test]
fn poisoned_data_page_reads_as_eio_or_rebuilt_and_the_rest_reads_fine() {
    for protected in [false, true] {
        let mut data = vec![b'A'; 4096];
        data.extend(b"UNIQUE-SECOND-PAGE-MARKER");
        data.resize(8192, b'B');
        let mem = image_with_data_protection(protected, |fs| {
            let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
            fs.write(f.ino, 0, &data).unwrap();
        });
        let at = find(&mem, b"UNIQUE-SECOND-PAGE-MARKER");
        mem.poison(at, 1).unwrap();
        let fs = open(&mem).unwrap();
        let f = fs.lookup(ROOT_INO, b"f").unwrap();
        let mut buf = vec![0u8; 4096];
        assert_eq!(fs.read(f.ino, 0, &mut buf).unwrap(), 4096);
        assert_eq!(buf, vec![b'A'; 4096]);
        match fs.read(f.ino, 4096, &mut buf) {
            Ok(n) => assert!(protected && n == 4096 && buf == data[4096..]),
            Err(e) => assert!(!protected && e.errno() == libc::EIO, "{e}"),
        }
    }
}

/// Builds, at shard 0's journal head, a transaction that stores a marker
/// word at `target` and checks `checked` bytes of the image.
fn plant_transaction(mem: &MemRegion, target: u64, checked: (u64, &[u8]), corrupt_csum: bool) {
    use novafs::probe::layout::{JournalRecord, TxnInfo, RECORD_CHECK, RECORD_UPDATE, TXN_MAGIC, TXN_MARKER};
    let head = mem.load_u64(novafs::probe::layout::JOURNAL_HEADERS_OFF).unwrap();
    let mut txn = Vec::new();
    let update = JournalRecord {
        addr: target,
        len: 8,
        kind: RECORD_UPDATE,
    };
    txn.extend_from_slice(update.as_bytes());
    txn.extend_from_slice(&0x1234_5678_u64.to_le_bytes());
    let check = JournalRecord {
        addr: checked.0,
        len: checked.1.len() as u32,
        kind: RECORD_CHECK,
    };
    txn.extend_from_slice(check.as_bytes());
    txn.extend_from_slice(&u64::from(crc32c::crc32c(checked.1)).to_le_bytes());
    let info = TxnInfo {
        marker: TXN_MARKER,
        count: 2,
        magic: TXN_MAGIC,
        txn_id: head,
        csum: crc32c::crc32c(&txn) ^ u32::from(corrupt_csum),
        pad: 0,
    };
    txn.extend_from_slice(info.as_bytes());
    let ring = novafs::probe::layout::JOURNAL_RINGS_OFF + head % novafs::probe::layout::JOURNAL_RING_SIZE;
    mem.write(ring, &txn).unwrap();
}

/// A transaction at the journal head counts as committed only if its
/// checksum matches and every range it checks is on the media; otherwise
/// it is ignored (its operation never happened), whatever it holds, and
/// stays ignored.
#[test]
fn journal_transactions_commit_only_with_matching_checksum_and_checks() {
    // Two free data pages in the middle of the image: zeros.
    let checked_page = 16 << 20;
    let target = checked_page + PAGE_SIZE;
    for (case, checked, corrupt_csum, applied) in [
        ("intact", vec![0u8; 64], false, true),
        ("checked range not on the media", vec![1u8; 64], false, false),
        ("checksum mismatch", vec![0u8; 64], true, false),
    ] {
        let mem = image_with(|fs| {
            fs.create(ROOT_INO, b"x", 0o644, 0, 0).unwrap();
        });
        let inspect = || novafs::inspect(mem.clone()).unwrap();
        let clean = inspect();
        assert!(!clean.pending_journal && clean.free.is_ok(), "{case}: a clean image");
        plant_transaction(&mem, target, (checked_page, &checked), corrupt_csum);
        assert_eq!(
            inspect().pending_journal,
            applied,
            "{case}: info sees what a mount replays"
        );
        let fs = open(&mem).unwrap();
        assert_eq!(fs.mount_report().journal_replayed, u64::from(applied), "{case}");
        let want = if applied { 0x1234_5678 } else { 0 };
        assert_eq!(mem.load_u64(target).unwrap(), want, "{case}");
        fs.lookup(ROOT_INO, b"x").unwrap();
        fs.unmount().unwrap();
        if !applied {
            // A later write of exactly the bytes it checks must not bring
            // the uncommitted transaction back at the next mount.
            mem.write(checked_page, &checked).unwrap();
            let fs = open(&mem).unwrap();
            assert_eq!(fs.mount_report().journal_replayed, 0, "{case}: forgotten");
            assert_eq!(mem.load_u64(target).unwrap(), 0, "{case}: forgotten");
            fs.unmount().unwrap();
        }
    }
}

fn check(mem: &Arc<MemRegion>) -> novafs::fsck::Report {
    let region: Arc<dyn Region> = mem.clone();
    novafs::fsck::check(region, &|_, _| {}).unwrap()
}

fn repair(mem: &Arc<MemRegion>) -> Vec<String> {
    let region: Arc<dyn Region> = mem.clone();
    novafs::fsck::repair(region).unwrap()
}

fn copy(mem: &MemRegion) -> Arc<MemRegion> {
    Arc::new(MemRegion::from_bytes(mem.snapshot()))
}

/// (free pages, free inodes) as a fresh mount sees them.
fn free_space(mem: &Arc<MemRegion>) -> (u64, u64) {
    let fs = open(mem).unwrap();
    let s = fs.statfs();
    fs.unmount().unwrap();
    (s.blocks_free, s.files_free)
}

/// A uid no other inode has, to find one inode record in the image.
const MARKED_UID: u32 = 0x5EED_F11E;

#[test]
fn repair_removes_a_file_whose_inode_is_lost_and_returns_its_space() {
    let mem = image_with(|fs| {
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
        let lost = fs.create(d.ino, b"lost", 0o644, MARKED_UID, 0).unwrap();
        fs.write(lost.ino, 0, &[7u8; 3 * 4096]).unwrap();
        let kept = fs.create(d.ino, b"kept", 0o644, 0, 0).unwrap();
        fs.write(kept.ino, 0, b"kept bytes").unwrap();
    });
    // The same image with the file unlinked the ordinary way: what repair
    // must leave behind.
    let unlinked = copy(&mem);
    let fs = open(&unlinked).unwrap();
    let d = fs.lookup(ROOT_INO, b"d").unwrap();
    let lost_ino = fs.lookup(d.ino, b"lost").unwrap().ino;
    fs.unlink(d.ino, b"lost").unwrap();
    fs.unmount().unwrap();

    // Both copies of the record: one alone is repaired from the other.
    for at in find_all(&mem, &MARKED_UID.to_le_bytes()) {
        mem.write(at, &[0, 0]).unwrap();
    }
    assert!(!check(&mem).is_clean());
    let done = repair(&mem);
    assert!(done.iter().any(|d| d.contains("removed 'lost'")), "{done:?}");
    assert!(
        done.iter()
            .any(|d| d.contains("freed: inode") && d.contains("checksum")),
        "{done:?}"
    );
    let after = check(&mem);
    assert!(after.is_clean(), "{after:?}");
    assert_eq!(
        after.notes,
        [format!(
            "0 metadata range(s) repaired from a replica, 0 data strip(s) repaired, 1 object(s) lost since mkfs (last: inode {lost_ino}, {})",
            novafs::time::utc(novafs::probe::health(&superblock(&mem)).last_loss_ns)
        )]
    );
    assert_eq!(free_space(&mem), free_space(&unlinked));
    let fs = open(&mem).unwrap();
    let d = fs.lookup(ROOT_INO, b"d").unwrap();
    assert!(matches!(fs.lookup(d.ino, b"lost"), Err(Error::NotFound)));
    let kept = fs.lookup(d.ino, b"kept").unwrap();
    assert_eq!(read_all(&fs, kept.ino), b"kept bytes");
    assert_eq!(fs.getattr(d.ino).unwrap().nlink, 2);
    fs.unmount().unwrap();
}

fn superblock(mem: &MemRegion) -> Superblock {
    let mut buf = vec![0u8; size_of::<Superblock>()];
    mem.read(0, &mut buf).unwrap();
    Superblock::read_from_bytes(&buf).unwrap()
}

/// What a lost directory held comes back under /lost+found (e2fsck's
/// `#INO` names), a subtree whole, and a file that kept a name elsewhere
/// keeps just that name with its link count set to match.
#[test]
fn repair_reconnects_what_a_lost_directory_held_to_lost_found() {
    let mut inos = (0, 0, 0);
    let mem = image_with(|fs| {
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, MARKED_UID, 0).unwrap();
        let sub = fs.mkdir(d.ino, b"sub", 0o750, 0, 0).unwrap();
        let c = fs.create(sub.ino, b"c", 0o644, 0, 0).unwrap();
        fs.write(c.ino, 0, b"in sub").unwrap();
        let lonely = fs.create(d.ino, b"lonely", 0o600, 0, 0).unwrap();
        fs.write(lonely.ino, 0, b"only here").unwrap();
        let shared = fs.create(d.ino, b"shared", 0o644, 0, 0).unwrap();
        fs.link(shared.ino, ROOT_INO, b"also").unwrap();
        inos = (sub.ino, lonely.ino, shared.ino);
    });
    let (sub, lonely, shared) = inos;
    for at in find_all(&mem, &MARKED_UID.to_le_bytes()) {
        mem.write(at, &[0, 0]).unwrap();
    }
    let done = repair(&mem);
    for line in [
        format!("reconnected inode {sub} as /lost+found/#{sub}"),
        format!("reconnected inode {lonely} as /lost+found/#{lonely}"),
        format!("inode {shared}: link count 2 set to its 1 name(s)"),
    ] {
        assert!(done.contains(&line), "{line}: {done:?}");
    }
    assert!(check(&mem).is_clean(), "{:?}", check(&mem));
    let fs = open(&mem).unwrap();
    let lf = fs.lookup(ROOT_INO, b"lost+found").unwrap();
    assert_eq!((lf.perm, lf.nlink), (0o700, 3), "itself, its '.', and #sub's '..'");
    let s = fs.lookup(lf.ino, format!("#{sub}").as_bytes()).unwrap();
    assert_eq!((s.ino, s.perm), (sub, 0o750));
    assert_eq!(fs.lookup(s.ino, b"..").unwrap().ino, lf.ino);
    let c = fs.lookup(sub, b"c").unwrap();
    assert_eq!(read_all(&fs, c.ino), b"in sub");
    let l = fs.lookup(lf.ino, format!("#{lonely}").as_bytes()).unwrap();
    assert_eq!((l.nlink, read_all(&fs, lonely)), (1, b"only here".to_vec()));
    assert_eq!(fs.lookup(ROOT_INO, b"also").unwrap().nlink, 1);
    assert!(matches!(
        fs.lookup(lf.ino, format!("#{shared}").as_bytes()),
        Err(Error::NotFound)
    ));
    fs.unmount().unwrap();
    assert!(
        repair(&mem).iter().all(|l| !l.contains("reconnected")),
        "a second repair has nothing to do"
    );
}

#[test]
fn repair_rebuilds_a_damaged_saved_allocator_state() {
    let mem = image_with(|fs| {
        let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
        fs.write(f.ino, 0, &[1u8; 5 * 4096]).unwrap();
    });
    let before = free_space(&copy(&mem));
    // A saved-state length that once made every tool try to allocate
    // 498 GB.
    // In both copies of the recovery inode: one alone is read from the other.
    let fs = open(&mem).unwrap();
    let data_end = fs.superblock().data_end;
    fs.unmount().unwrap();
    for base in [novafs::probe::layout::RECOVERY_INODE_OFF, data_end] {
        mem.write(base + 16, &498_216_206_440u64.to_le_bytes()).unwrap();
    }
    let first = check(&mem);
    assert!(
        first.problems.iter().any(|p| p.contains("saved allocator state")),
        "{first:?}"
    );
    assert!(novafs::inspect(mem.clone()).unwrap().free.is_err());
    repair(&mem);
    assert!(check(&mem).is_clean());
    assert_eq!(free_space(&mem), before);
}

#[test]
fn repair_rewrites_a_damaged_primary_superblock() {
    let mem = image_with(|_| {});
    mem.write(16, &[0xFF; 32]).unwrap();
    // One copy is gone: a problem (exit 1), as e2fsck reports it.
    let first = check(&mem);
    assert!(
        first.problems.iter().any(|n| n.contains("primary superblock")),
        "{first:?}"
    );
    let done = repair(&mem);
    assert!(done.iter().any(|d| d.contains("from its replica")), "{done:?}");
    let after = check(&mem);
    assert!(after.is_clean() && after.notes.is_empty(), "{after:?}");
}
