//! Fault injection finds the structures the file system uses
//! (`novafs::inject::locate`), picks the same bytes for the same seed
//! (`plan`) and changes exactly those (`corrupt`), on sound and on
//! already damaged images (NOVA-Fortis §4).
#![allow(clippy::unwrap_used)]

mod inject_common;

use std::collections::HashSet;

use inject_common::*;
use novafs::inject::{corrupt, locate, plan, CopyKind, Target, Which};
use novafs::probe::layout::{
    INODES_PER_CHUNK, INODE_HEADS_OFF, INODE_SIZE, JOURNAL_HEADERS_OFF, LOG_NEXT_OFF, PAGE_SIZE,
};
use novafs::probe::{bounds_of, read_superblock, InodeTables, Log};
use novafs::{Error, Fs, MountOptions, Structure, ROOT_INO};
use pm::Region;

#[test]
fn each_target_locates_the_structure_the_file_system_uses() {
    let (mem, a, b) = image();
    let r = &*mem;
    let (sb, _) = read_superblock(r).unwrap();
    let bounds = bounds_of(&sb);
    assert!(bounds.replicas, "replicas are the default");
    // Superblock: both copies, where read_superblock looks.
    let s = locate(r, Target::Superblock, 0).unwrap();
    assert_eq!(
        s[0].copies,
        [(CopyKind::Primary, 0), (CopyKind::Replica, r.len() - PAGE_SIZE)]
    );
    assert_eq!(s[0].len, 440);
    // Inode records: where the inode tables put them, and their mirrors.
    let tables = InodeTables::load(r, &sb, bounds).unwrap();
    for ino in [ROOT_INO, a, b, 1000] {
        let l = locate(r, Target::Inode, ino).unwrap();
        let off = tables.locate(ino).unwrap();
        assert_eq!(
            l[0].copies,
            [
                (CopyKind::Primary, off),
                (CopyKind::Replica, bounds.mirror(off).unwrap())
            ],
            "ino {ino}"
        );
        assert!(copies_equal(r, &l[0], 0..INODE_SIZE), "ino {ino}");
    }
    // Log entries and pages: what the log replay visits, and mirrors.
    let (_, rec) = live_record(r, &sb, ROOT_INO).unwrap();
    let mut offsets = Vec::new();
    let log = Log::load(r, bounds, rec.log_head, rec.log_tail, |_, off, _| {
        offsets.push(off);
        Ok(())
    })
    .unwrap();
    let entries = locate(r, Target::LogEntry, ROOT_INO).unwrap();
    assert_eq!(entries.iter().map(|e| e.copies[0].1).collect::<Vec<_>>(), offsets);
    assert!(
        entries.iter().any(|e| e.what == "log entry (dentry add)"),
        "{entries:?}"
    );
    let pages = locate(r, Target::LogPage, ROOT_INO).unwrap();
    assert_eq!(pages[0].copies[0].1, rec.log_head);
    assert!(pages.iter().all(|p| log.pages().contains(&p.copies[0].1)));
    for l in entries.iter().chain(&pages) {
        let off = l.copies[0].1;
        assert_eq!(
            l.copies[1],
            (CopyKind::Replica, bounds.mirror(off).unwrap()),
            "{}",
            l.what
        );
        assert!(copies_equal(r, l, 0..l.len), "{} at {off:#x}", l.what);
    }
    // Data pages: the last write wins; no replica.
    let data = locate(r, Target::DataPage, b).unwrap();
    assert_eq!(data.len(), 2);
    let mut page = vec![0u8; PAGE_SIZE as usize];
    for (d, fill) in data.iter().zip([b'B', b'C']) {
        assert_eq!(d.copies.len(), 1);
        r.read(d.copies[0].1, &mut page).unwrap();
        assert!(page.iter().all(|&x| x == fill), "{}", d.what);
    }
    assert_eq!(data[1].what, "data page (file page 1)");
    // Journal and fixed area: one header and one ring per shard, no
    // replica; the used parts of pages 1 and 2, page 2 mirrored just
    // past the data area.
    let j = locate(r, Target::Journal, 0).unwrap();
    assert_eq!(j.len(), 4);
    assert_eq!(j[1].copies[0].1, sb.journal_rings_off);
    assert_eq!(j[3].len, sb.journal_ring_size);
    assert!(j.iter().all(|l| l.copies.len() == 1));
    let f = locate(r, Target::FixedArea, 0).unwrap();
    assert!(f
        .iter()
        .all(|l| l.copies[0].1 >= PAGE_SIZE && l.copies[0].1 + l.len <= 3 * PAGE_SIZE));
    assert_eq!(f[0].copies, [(CopyKind::Primary, JOURNAL_HEADERS_OFF)]);
    for l in &f[1..] {
        let off = l.copies[0].1;
        assert_eq!(l.copies[1], (CopyKind::Replica, sb.data_end + off % PAGE_SIZE));
        assert!(copies_equal(r, l, 0..l.len), "{}", l.what);
    }
}

#[test]
fn without_replicas_only_the_superblock_has_two_copies() {
    let (mem, f) = image_with(false);
    let r = &*mem;
    assert!(!bounds_of(&read_superblock(r).unwrap().0).replicas);
    for target in Target::ALL {
        let found = locate(r, target, f.b).unwrap();
        assert!(!found.is_empty(), "{target}");
        let want = if matches!(target, Target::Superblock | Target::DataChecksums) {
            2
        } else {
            1
        };
        assert!(found.iter().all(|l| l.copies.len() == want), "{target}: {found:?}");
    }
    let d = plan(r, &spec(Target::Inode, f.a, 1)).unwrap();
    assert_eq!(d[0].copy, None, "one copy: not named");
    assert!(d[0].to_string().contains(" record at "), "{}", d[0]);
}

#[test]
fn plans_are_deterministic_inside_their_structure_and_sized() {
    let (mem, _, b) = image();
    let r = &*mem;
    for target in Target::ALL {
        for seed in 1..20 {
            let sp = spec(target, b, seed).bytes(1 + seed % 12);
            let d = plan(r, &sp).unwrap();
            assert_eq!(d, plan(r, &sp).unwrap(), "same seed, same bytes");
            assert_eq!(d.len(), 1);
            let d = &d[0];
            assert_eq!(d.len, sp.bytes);
            assert!(d.off >= d.base && d.off + d.len <= d.base + d.size, "{target}: {d}");
            assert_eq!(d.ino.is_some(), target.per_inode());
            if !target.may_have_replica() {
                continue;
            }
            // Both copies: the same bytes of each.
            let both = plan(r, &sp.which(Which::Both)).unwrap();
            assert_eq!(
                both.iter().map(|d| d.copy).collect::<Vec<_>>(),
                [Some(CopyKind::Primary), Some(CopyKind::Replica)],
                "{target}"
            );
            assert_eq!(both[0].off - both[0].base, both[1].off - both[1].base, "{target}");
            assert_eq!((both[0].len, both[0].size), (both[1].len, both[1].size));
            assert_ne!(both[0].base, both[1].base);
        }
    }
    let seeds: HashSet<u64> = (1..20)
        .map(|seed| plan(r, &spec(Target::Superblock, 0, seed)).unwrap()[0].off)
        .collect();
    assert!(seeds.len() > 5, "seeds spread the damage");
    let huge = spec(Target::Inode, b, 1).bytes(1 << 20);
    assert_eq!(plan(r, &huge).unwrap()[0].len, INODE_SIZE, "clipped to the structure");
    let zero = spec(Target::Inode, b, 1).bytes(0);
    assert!(matches!(plan(r, &zero), Err(Error::Invalid(_))));
}

#[test]
fn corrupt_changes_exactly_the_planned_bytes() {
    let (mem, a, _) = image();
    let before = mem.snapshot();
    let d = corrupt(&*mem, &spec(Target::LogEntry, a, 3)).unwrap();
    let after = mem.snapshot();
    let changed: Vec<usize> = (0..before.len()).filter(|&i| before[i] != after[i]).collect();
    let (off, len) = (d[0].off as usize, d[0].len as usize);
    assert_eq!(changed, (off..off + len).collect::<Vec<_>>(), "{}", d[0]);
    assert!(
        d[0].to_string().starts_with(&format!("inode {a} log entry (")),
        "{}",
        d[0]
    );
    assert!(d[0].to_string().contains(") (primary) at "), "{}", d[0]);
    // Both copies: the same bytes of each, nothing else.
    let d = corrupt(&*mem, &spec(Target::Inode, a, 4).which(Which::Both)).unwrap();
    let again = mem.snapshot();
    let changed: Vec<usize> = (0..after.len()).filter(|&i| after[i] != again[i]).collect();
    let mut want: Vec<usize> = d
        .iter()
        .flat_map(|d| d.off as usize..(d.off + d.len) as usize)
        .collect();
    want.sort_unstable();
    assert_eq!(changed, want);
    assert!(d[1].to_string().contains("record (replica) at "), "{}", d[1]);
}

#[test]
fn structures_without_a_replica_refuse_replica_damage() {
    // With replicas: the journal and data pages have none.
    let (mem, a, _) = image();
    for target in [Target::Journal, Target::DataPage] {
        for which in [Which::Replica, Which::Both] {
            let sp = spec(target, a, 1).which(which);
            let err = plan(&*mem, &sp).unwrap_err();
            assert!(
                matches!(&err, Error::NotSupported(m) if m.contains("has no replica") || m.contains("have no replica")),
                "{target}: {err}"
            );
        }
    }
    // In the fixed area only page 2 has one: a replica's damage lands
    // there whatever the seed.
    let (sb, _) = read_superblock(&*mem).unwrap();
    for seed in 1..20 {
        let sp = spec(Target::FixedArea, 0, seed).which(Which::Replica);
        let d = plan(&*mem, &sp).unwrap();
        assert!(
            d[0].base >= sb.data_end && d[0].off + d[0].len <= sb.data_end + PAGE_SIZE,
            "{}",
            d[0]
        );
    }
    // Without metadata replicas: every structure but the superblock and
    // the data checksums (two copies whatever the metadata keeps) refuses.
    let (mem, f) = image_with(false);
    let two_copies = [Target::Superblock, Target::DataChecksums];
    for target in Target::ALL.into_iter().filter(|t| !two_copies.contains(t)) {
        for which in [Which::Replica, Which::Both] {
            let sp = spec(target, f.a, 1).which(which);
            let err = plan(&*mem, &sp).unwrap_err();
            assert!(
                matches!(&err, Error::NotSupported(m) if m.contains("no replica")),
                "{target}: {err}"
            );
            if target.may_have_replica() {
                assert!(err.to_string().contains("made without metadata replicas"), "{err}");
            }
        }
    }
}

#[test]
fn a_damaged_primary_does_not_hide_the_log_from_locate() {
    let (mem, f) = image_with(true);
    let r = &*mem;
    let entries = locate(r, Target::LogEntry, f.a).unwrap();
    let pages = locate(r, Target::LogPage, f.a).unwrap();
    let data = locate(r, Target::DataPage, f.a).unwrap();
    assert_eq!(data.len(), 1);
    // The primary log page destroyed: lengths and links read as
    // garbage there; the replica still leads through the log.
    let all = spec(Target::LogPage, f.a, 1).bytes(PAGE_SIZE);
    corrupt(r, &all).unwrap();
    assert_eq!(locate(r, Target::LogEntry, f.a).unwrap(), entries);
    assert_eq!(locate(r, Target::LogPage, f.a).unwrap(), pages);
    // The primary record destroyed too: the replica's names the log.
    let rec = spec(Target::Inode, f.a, 1).bytes(INODE_SIZE);
    corrupt(r, &rec).unwrap();
    assert_eq!(locate(r, Target::LogEntry, f.a).unwrap(), entries);
    // The data pages are still what a mount maps: it reads the
    // replica's record and entries.
    assert_eq!(locate(r, Target::DataPage, f.a).unwrap(), data);
    let fs = Fs::open(mem.clone(), MountOptions::default().read_only(true)).unwrap();
    assert_eq!(read_file(&fs, f.a, 8192).unwrap(), [b'A'; 4096]);
    drop(fs);
    // So the replica can be damaged too: the inode is lost.
    corrupt(r, &all.which(Which::Replica)).unwrap();
    assert!(locate(r, Target::LogEntry, f.a).is_err(), "no copy leads anywhere now");
    assert!(locate(r, Target::DataPage, f.a).is_err());
    let fs = mount(&mem).unwrap();
    assert!(fs.getattr(f.a).is_err());
    others_read(&fs, f, f.a, &"both pages damaged");
}

#[test]
fn a_damaged_log_can_be_damaged_again_but_its_data_pages_are_unknown() {
    for replicas in [true, false] {
        let (mem, f) = image_with(replicas);
        let a = f.a;
        let r = &*mem;
        let w = meta(&mem);
        let entries = locate(r, Target::LogEntry, a).unwrap();
        let pages = locate(r, Target::LogPage, a).unwrap();
        assert!(!locate(r, Target::DataPage, a).unwrap().is_empty());
        // Damage every entry's body in every copy (its first 16 bytes,
        // type and length, stay): each now fails its checksum.
        for e in &entries {
            let off = e.copies[0].1 + 16;
            let mut buf = vec![0u8; (e.len - 16) as usize];
            r.read(off, &mut buf).unwrap();
            buf.iter_mut().for_each(|b| *b ^= 0x5A);
            w.write(off, &buf).unwrap();
        }
        let (sb, _) = read_superblock(r).unwrap();
        let (_, rec) = live_record(r, &sb, a).unwrap();
        let load = Log::load(r, bounds_of(&sb), rec.log_head, rec.log_tail, |_, _, _| Ok(()));
        // The reason is typed: the first entry's offset, as an entry.
        let first = entries[0].copies[0].1;
        assert!(matches!(load, Err(Error::Corrupt(m)) if m.detail().contains("checksum")
            && m.structure() == Structure::LogEntry && m.offset() == Some(first)));
        // Still the same entries and pages to damage, a second time.
        assert_eq!(locate(r, Target::LogEntry, a).unwrap(), entries);
        assert_eq!(locate(r, Target::LogPage, a).unwrap(), pages);
        let which = if replicas { Which::Both } else { Which::Primary };
        corrupt(r, &spec(Target::LogEntry, a, 2).which(which)).unwrap();
        // The data pages are what the file system's replay maps: none now.
        let err = locate(r, Target::DataPage, a).unwrap_err();
        assert!(
            matches!(&err, Error::Corrupt(m) if m.detail().contains(&format!("data pages of inode {a}")) && m.detail().contains("checksum")),
            "{err}"
        );
    }
}

#[test]
fn bad_inode_numbers_and_damaged_chains_are_errors_not_hangs() {
    for replicas in [true, false] {
        let (mem, f) = image_with(replicas);
        let a = f.a;
        let r = &*mem;
        // Damage goes to both copies, as the file system would write it.
        let w = meta(&mem);
        assert!(matches!(locate(r, Target::Inode, 0), Err(Error::Invalid(_))));
        assert!(matches!(locate(r, Target::Inode, u64::MAX), Err(Error::NotFound)));
        assert!(matches!(locate(r, Target::LogEntry, 999), Err(Error::NotFound)));
        let d = locate(r, Target::DataPage, ROOT_INO).unwrap();
        assert!(d.is_empty(), "a directory has no data pages");
        assert!(matches!(
            plan(r, &spec(Target::DataPage, ROOT_INO, 1)),
            Err(Error::Invalid(_))
        ));
        // A log whose tail is lost and whose page links to itself.
        let (sb, _) = read_superblock(r).unwrap();
        let off = record_off(r, &sb, a).unwrap();
        let head = r.load_u64(off + 8).unwrap();
        w.store_u64(off + 16, head + PAGE_SIZE + 64).unwrap();
        w.store_u64(head + LOG_NEXT_OFF, head).unwrap();
        let err = locate(r, Target::LogEntry, a).unwrap_err();
        assert!(
            matches!(&err, Error::Corrupt(m) if m.detail().contains("loops")
                && m.structure() == Structure::LogPage && m.offset() == Some(head)),
            "{err}"
        );
        // An inode-table chunk chain looping back to its first chunk.
        let first = r.load_u64(sb.inode_heads_off).unwrap();
        w.store_u64(first + novafs::probe::layout::CHUNK_NEXT_OFF, first)
            .unwrap();
        let far = 1 + 2 * INODES_PER_CHUNK * 3;
        assert!(matches!(locate(r, Target::Inode, far), Err(Error::Corrupt(_))));
        // A destroyed fixed area: the heads are garbage.
        w.write(INODE_HEADS_OFF, &[0xA5; 16]).unwrap();
        assert!(matches!(locate(r, Target::Inode, a), Err(Error::Corrupt(_))));
    }
}

#[test]
fn target_names_round_trip() {
    for t in Target::ALL {
        assert_eq!(Target::parse(t.name()), Some(t));
    }
    assert_eq!(Target::parse("nope"), None);
}
