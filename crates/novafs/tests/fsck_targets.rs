//! fsck reports every damaged copy: for each structure `novafs inject`
//! can damage, and each copy of it, one damaged copy on a cleanly
//! unmounted image makes fsck report a problem (exit 1), and after `fsck
//! --repair` fsck finds the image clean and the tree is exactly what it
//! was. Data redundancy cannot rebuild (two strips of a page) is named by
//! path and byte range, and the rest of the file is kept.
//!
//! `NOVAFS_SWEEP_LONG=1`: more seeds.

#![allow(clippy::unwrap_used)]

mod sweep_common;

use novafs::inject::{self, Spec, Target, Which};
use novafs::{Fs, Ino, MountOptions};
use pm::Region;
use sweep_common::{check, copy_of, damage_and_repair, diff, long, populated, tree};

/// Whether damage `spec` would cut two strips of a data page (parity
/// rebuilds one): a loss, checked by its own test.
fn two_strips(region: &dyn Region, spec: &Spec) -> bool {
    spec.target == Target::DataPage
        && inject::plan(region, spec)
            .unwrap()
            .iter()
            .any(|d| (d.off - d.base) / 512 != (d.off - d.base + d.len - 1) / 512)
}

#[test]
fn one_damaged_copy_of_any_structure_is_reported_and_repaired() {
    let (base, inos) = populated(16, 2, 6);
    let before = tree(&copy_of(&base).1).unwrap();
    // A file written twice, a directory, the root, a symlink.
    let file = before["/d0/f0"].attr.ino;
    let picks: Vec<Ino> = vec![file, before["/d1"].attr.ino, 1, before["/d0/link"].attr.ino];
    assert!(picks.iter().all(|i| inos.contains(i)));
    let seeds = if long() { 1..=12 } else { 1..=3 };
    let (_mem, probe) = copy_of(&base);
    let mut failures = Vec::new();
    let mut cases = 0;
    for target in Target::ALL {
        for which in [Which::Primary, Which::Replica] {
            let inodes: &[Ino] = if target.per_inode() { &picks } else { &[1] };
            for &ino in inodes {
                for seed in seeds.clone() {
                    let spec = Spec::new(target)
                        .ino(ino)
                        .seed(seed)
                        .which(which)
                        .live(target == Target::LogPage);
                    let Ok(planned) = inject::plan(&*probe, &spec) else {
                        // No such copy (the journal, parity and data pages
                        // have one) or no such structure (a directory maps
                        // no data page): nothing to damage.
                        continue;
                    };
                    // What nothing reads cannot be seen, and changes
                    // nothing: an idle journal's ring (every transaction
                    // in it applied) and the header words past `head`.
                    // Two strips of a data page: a loss, tested below.
                    if target == Target::Journal
                        || planned[0].what.ends_with("journal headers")
                        || two_strips(&*probe, &spec)
                    {
                        continue;
                    }
                    cases += 1;
                    failures.extend(damage_and_repair(&base, &before, &spec).err());
                }
            }
        }
    }
    assert!(cases > 100, "{cases} cases");
    assert!(
        failures.is_empty(),
        "{} of {cases} cases failed; the first few:\n{}",
        failures.len(),
        failures.iter().take(6).cloned().collect::<Vec<_>>().join("\n")
    );
}

/// Two strips of one data page damaged: parity rebuilds one, so the page
/// is lost. fsck names the file and the bytes; repair keeps the file,
/// whose other pages read as before, and that page reads EIO.
#[test]
fn a_data_page_beyond_its_redundancy_is_named_and_the_file_kept() {
    let (base, _) = populated(16, 2, 6);
    let before = tree(&copy_of(&base).1).unwrap();
    // 1 + 5 * 1237 = 6186 bytes: the first page is whole, to be written
    // again whole (the first seed that hits it).
    let path = "/d0/f5";
    let ino = before[path].attr.ino;
    let (_mem, region) = copy_of(&base);
    let spec = (1..)
        .map(|seed| Spec::new(Target::DataPage).ino(ino).seed(seed).bytes(1024))
        .find(|spec| inject::plan(&*region, spec).unwrap()[0].what.ends_with("file page 0)"))
        .unwrap();
    let d = inject::corrupt(&*region, &spec).unwrap();
    assert_eq!(d[0].copy, None, "data pages have one copy");
    let page: u64 = d[0]
        .what
        .trim_start_matches("data page (file page ")
        .trim_end_matches(')')
        .parse()
        .unwrap();
    let size = before[path].attr.size;
    let range = format!("bytes {}..{}", page * 4096, ((page + 1) * 4096).min(size));
    let named = |lines: &[String]| lines.iter().any(|p| p.contains(path) && p.contains(&range));
    let rep = check(&region).unwrap();
    assert!(named(&rep.problems), "{:?}", rep.problems);
    let done = novafs::fsck::repair(region.clone()).unwrap();
    assert!(named(&done), "{done:?}");
    // Still a problem: the loss stays until the bytes are written again.
    let again = check(&region).unwrap();
    assert!(
        named(&again.problems) && again.problems.len() == 1,
        "{:?}",
        again.problems
    );
    let fs = Fs::open(region.clone(), MountOptions::default()).unwrap();
    let mut buf = vec![0u8; 4096];
    let err = fs.read(ino, page * 4096, &mut buf).unwrap_err();
    assert_eq!(err.errno(), libc::EIO);
    let whole = &before[path].contents;
    for other in (0..size.div_ceil(4096)).filter(|&p| p != page) {
        let n = fs.read(ino, other * 4096, &mut buf).unwrap();
        assert_eq!(buf[..n], whole[(other * 4096) as usize..][..n], "page {other}");
    }
    // Written again, the file is whole and fsck clean.
    let fresh = &whole[(page * 4096) as usize..((page + 1) * 4096).min(size) as usize];
    fs.write(ino, page * 4096, fresh).unwrap();
    fs.unmount().unwrap();
    assert!(check(&region).unwrap().is_clean());
    let after = tree(&region).unwrap();
    assert_eq!(
        diff(&before, &after).len(),
        1,
        "only the file's times changed: {:?}",
        diff(&before, &after)
    );
    assert_eq!(after[path].contents, *whole);
}

/// Log-page damage lands anywhere in the page by default (often past the
/// log's tail, where nothing reads it); with `live` only on bytes a mount
/// reads. `live` names no other target.
#[test]
fn live_log_page_damage_lands_only_on_bytes_a_mount_reads() {
    let (base, _) = populated(16, 1, 3);
    let (_mem, region) = copy_of(&base);
    let before = tree(&region).unwrap();
    let mut past = 0;
    for ino in [1, before["/d0"].attr.ino, before["/d0/f0"].attr.ino] {
        let pages = inject::locate(&*region, Target::LogPage, ino).unwrap();
        let read = |spec: &Spec| {
            let d = &inject::plan(&*region, spec).unwrap()[0];
            let l = pages.iter().find(|l| l.copies[0].1 == d.base).unwrap();
            let at = d.off - d.base..d.off - d.base + d.len;
            l.live
                .as_ref()
                .unwrap()
                .iter()
                .any(|r| r.start <= at.start && at.end <= r.end)
        };
        for seed in 1..=100 {
            let plain = Spec::new(Target::LogPage).ino(ino).seed(seed);
            past += usize::from(!read(&plain));
            assert!(read(&plain.live(true)), "inode {ino} seed {seed}");
        }
    }
    assert!(past > 100, "by default most damage misses what is read: {past} of 300");
    let inode = Spec::new(Target::Inode).live(true);
    assert!(matches!(inject::plan(&*region, &inode), Err(novafs::Error::Invalid(_))));
}
