//! The journal's accounting (FGM §IV-B's journal writes) on whole
//! operations of the public API.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use novafs::{JournalStats, ROOT_INO};

/// A journal record's header is 16 bytes, its payload padded to 8; a
/// TxnInfo is 32.
const WORD_RECORD: u64 = 16 + 8;
const CHECK_RECORD: u64 = 16 + 8;
const TXN_INFO: u64 = 32;

#[test]
fn create_append_and_unlink_count_exactly_what_their_commits_write() {
    let region = fresh(64, 1);
    let fs = mount(&region);
    let dir = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    let before = fs.journal_stats();
    let f = fs.create(dir.ino, b"f", 0o644, 0, 0).unwrap();
    let created = fs.journal_stats();
    // NOVA §4.3: one transaction; three words (the parent's tail, the new
    // inode's state and its checksum word) and two checks (the dentry
    // and the new inode's record). Its ring bytes span three lines here;
    // each word one; the checkpoint one. Three fences: commit, applied,
    // checkpoint.
    assert_eq!(
        created.since(&before),
        JournalStats {
            txns: 1,
            words: 0,
            journal_bytes: 3 * WORD_RECORD + 2 * CHECK_RECORD + TXN_INFO,
            applied_bytes: 3 * 8,
            checkpoint_bytes: 8,
            flushes: 3 + 3 + 1,
            fences: 3,
        }
    );
    // One inode's append commits by its log's tail store (NOVA §3.2):
    // the journal does nothing.
    fs.write(f.ino, 0, &[7u8; 4096]).unwrap();
    fs.fsync(f.ino).unwrap();
    let appended = fs.journal_stats();
    assert_eq!(appended, created);
    fs.unlink(dir.ino, b"f").unwrap();
    let unlinked = fs.journal_stats().since(&appended);
    // The last link of a closed file: three words (the parent's tail, the
    // cancelled add's valid bit, the freed inode's state), one check (the
    // removing dentry).
    assert_eq!(
        (
            unlinked.txns,
            unlinked.journal_bytes,
            unlinked.applied_bytes,
            unlinked.fences
        ),
        (1, 3 * WORD_RECORD + CHECK_RECORD + TXN_INFO, 3 * 8, 3)
    );
}

#[test]
fn the_block_baseline_journals_whole_blocks_and_leaves_a_clean_image() {
    let region = fresh(64, 1);
    let fs = novafs::Fs::open(
        region.clone(),
        novafs::MountOptions::default().bench_block_journal(true),
    )
    .unwrap();
    let dir = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap();
    let before = fs.journal_stats();
    let f = fs.create(dir.ino, b"f", 0o644, 0, 0).unwrap();
    let created = fs.journal_stats().since(&before);
    // The same three words as the fine-grained create, all in one block
    // of the inode table (one shard): descriptor, that block, commit
    // block; a fence more than fine-grained, between the copies and the
    // commit block.
    assert_eq!(
        created,
        JournalStats {
            txns: 1,
            words: 0,
            journal_bytes: 3 * 4096,
            applied_bytes: 3 * 8,
            checkpoint_bytes: 8,
            flushes: 3 + 1,
            fences: 4,
        }
    );
    fs.write(f.ino, 0, b"kept").unwrap();
    fs.rename(dir.ino, b"f", ROOT_INO, b"g", 0).unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
    let fs = mount(&region);
    let g = fs.lookup(ROOT_INO, b"g").unwrap();
    assert_eq!(read_all(&fs, g.ino), b"kept");
    assert!(names(&fs, dir.ino).is_empty());
}
