//! Regressions: a create (or mknod) whose new inode record is torn
//! by the crash. The record's flush shares the creating transaction's R2
//! fence, so at that fence any 8-byte word of either of its two lines may
//! still hold what the slot's previous occupant left there. Each test builds
//! exactly that image — every other uncertain line reached media, one word
//! of the record did not, nor did that line's replica — and checks that recovery either drops the create
//! (the transaction's check fails) or completes it, never anything else.
//! Each is named after the failure the seed-7 sweep found before the fix
//! (`novafs crashcheck --all --seed 7`).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use novafs::probe::layout::{INODE_HEADS_OFF, INODE_SIZE};
use novafs::probe::{bounds_of, read_superblock};
use novafs::{Fs, MountOptions};
use novafs_crashcheck::{record, Compare, Tree, Workload};
use novafs_ops::Op;
use pm::{Choice, MemRegion, PointKind, Region, Torn};

/// Which state recovery must show.
#[derive(Debug, PartialEq, Eq)]
enum Shows {
    /// The create did not happen.
    Before,
    /// The create happened.
    After,
}

/// Record word indices (8-byte words of the 128-byte record).
const LOG_HEAD: usize = 1;
const LOG_TAIL: usize = 2;
const CSUM: usize = 15;

/// A file of two data pages, deleted: its slot is free again, and its
/// record still names its (freed) log, whose pages nothing has reused yet.
fn deleted_file() -> Vec<Op> {
    vec![
        Op::create("/old"),
        Op::chmod("/old", 0o711),
        Op::write("/old", 0, 8192, 42),
        Op::Unlink("/old".into()),
    ]
}

/// Records `op` after `setup`, crashes it just before the fence that
/// commits its transaction with every uncertain line on media except the
/// `old` words of the new record, which keep the previous occupant's
/// bytes; recovers; and returns which legal state the result is, failing
/// on anything else (fsck problems before or after recovery, a mount
/// error, a tree that is neither state).
fn crash_with_old_words(setup: Vec<Op>, op: Op, path: &str, old: &[usize]) -> Shows {
    let w = Workload::new("torn_create", setup, vec![op]);
    let rec = record(&w).unwrap();
    let final_image = rec.trace.final_image();
    let record_off = {
        let fs = Fs::open(
            Arc::new(MemRegion::from_bytes(final_image.clone())),
            MountOptions::default(),
        )
        .unwrap();
        let ino = fs.resolve(path).unwrap().ino;
        let at = INODE_HEADS_OFF as usize;
        let chunk = u64::from_le_bytes(final_image[at..at + 8].try_into().unwrap());
        chunk + (ino - 1) * INODE_SIZE
    };
    for &w in old {
        let at = record_off as usize + 8 * w;
        let before = &rec.trace.base[at..at + 8];
        assert_ne!(
            before,
            &final_image[at..at + 8],
            "word {w} of the record must change for this test to mean anything"
        );
    }
    let bounds = bounds_of(&read_superblock(&MemRegion::from_bytes(final_image.clone())).unwrap().0);
    let mut image = None;
    rec.trace.crash_points(|cp| {
        let line = |off: u64| cp.lines.iter().position(|l| l.off == off);
        let on_record = [line(record_off), line(record_off + 64)];
        if cp.in_flight == Some(1) && cp.kind == PointKind::Fence && on_record.iter().all(Option::is_some) {
            let torn_line = old[0] / 8;
            let mask = old
                .iter()
                .filter(|&&w| w / 8 == torn_line)
                .fold(0xffu8, |m, &w| m & !(1 << (w % 8)));
            assert!(old.iter().all(|&w| w / 8 == torn_line), "one torn line per image");
            let idx = on_record[torn_line].unwrap();
            let mut lines: Vec<usize> = cp.lines.iter().map(|l| l.versions.len()).collect();
            // The replica of that line keeps the previous occupant's bytes
            // too: a replica that reached the media whole holds the
            // transaction's check, and the replay completes the create from
            // it (legal, but then no stale word is ever read).
            if let Some(r) = bounds.replica(record_off + 64 * torn_line as u64).and_then(line) {
                lines[r] = 0;
            }
            image = Some(cp.image(&Choice {
                lines,
                torn: Some(Torn {
                    line: idx,
                    version: cp.lines[idx].versions.len(),
                    mask,
                }),
            }));
        }
        true
    });
    let image = image.expect("a crash point with the new record uncertain");
    let region: Arc<dyn Region> = Arc::new(MemRegion::from_bytes(image));
    let fsck = |region: &Arc<dyn Region>, when: &str| {
        let rep = novafs::fsck::check(region.clone(), &|_, _| {}).unwrap();
        assert!(rep.is_clean(), "fsck {when}: {:?}", rep.problems);
    };
    fsck(&region, "of the crash image");
    let fs = Fs::open(region.clone(), MountOptions::default()).expect("recovery");
    let tree = Tree::capture(&fs).unwrap();
    fs.unmount().unwrap();
    fsck(&region, "after recovery and a clean unmount");
    let cmp = Compare::default();
    if tree.same(&rec.states[1], cmp) {
        Shows::Before
    } else if tree.same(&rec.states[2], cmp) {
        Shows::After
    } else {
        panic!(
            "recovered tree is neither state:\n{}\n--- differences from the state after the create:\n{}",
            tree.diff(&rec.states[1], cmp, 8).join("\n"),
            tree.diff(&rec.states[2], cmp, 8).join("\n")
        );
    }
}

fn create_a() -> Op {
    Op::create("/a")
}

/// Before the fix: "fsck: inode N fails its checksum" and "directory 2:
/// entry 'tmp-123' points to missing inode 7" (the check excluded the
/// record's checksum word). Now that word is replayed by the transaction.
#[test]
fn inode_fails_its_checksum_never_follows_a_create_with_a_torn_checksum_word() {
    assert_eq!(
        crash_with_old_words(deleted_file(), create_a(), "/a", &[CSUM]),
        Shows::After
    );
    assert_eq!(crash_with_old_words(vec![], create_a(), "/a", &[CSUM]), Shows::After);
}

/// Before the fix: "log tail 0x218040 without a head" (the new record's
/// head reached media, its tail word still the previous occupant's).
#[test]
fn log_tail_without_a_head_never_follows_a_create_over_a_stale_tail_word() {
    assert_eq!(
        crash_with_old_words(deleted_file(), create_a(), "/a", &[LOG_TAIL]),
        Shows::Before
    );
}

/// Before the fix: "log page pointer 0x39a6f60636c0c956 outside the data
/// area" (the stale head word of a slot, pointing into a reused page).
#[test]
fn log_page_pointer_outside_the_data_area_never_follows_a_create_over_a_stale_head_word() {
    assert_eq!(
        crash_with_old_words(deleted_file(), create_a(), "/a", &[LOG_HEAD]),
        Shows::Before
    );
}

/// Before the fix: "write entry in the log of a non-file" (a FIFO made in
/// the slot of a deleted file inherited that file's log).
#[test]
fn write_entry_in_the_log_of_a_non_file_never_follows_a_mknod_in_a_reused_slot() {
    let fifo = Op::mknod("/a", libc::S_IFIFO | 0o600, 0);
    assert_eq!(
        crash_with_old_words(deleted_file(), fifo, "/a", &[LOG_HEAD, LOG_TAIL]),
        Shows::Before
    );
}

/// Before the fix, the worst: the new, empty `/a` came back with the
/// deleted file's mode, size and 8 KiB of its contents — one user's
/// deleted data in another user's new file.
#[test]
fn a_create_in_a_reused_slot_never_shows_the_deleted_files_contents() {
    assert_eq!(
        crash_with_old_words(deleted_file(), create_a(), "/a", &[LOG_HEAD, LOG_TAIL]),
        Shows::Before
    );
}
