//! Space accounting and limits: filling the device to ENOSPC and emptying
//! it again returns every page (no leak, also across clean and crash
//! remounts, NOVA §4.7), log GC keeps churning logs bounded (NOVA §4.6), and
//! the name-length and link-count limits give the right errnos.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Instant;

use common::{assert_fsck_clean, fresh, mount, names, read_all};
use novafs::fs::MAX_LINKS;
use novafs::{Error, Fs, Ino, SetAttr, ROOT_INO};

const CHUNK: usize = 64 * 1024;

fn chunk(file: usize, n: usize) -> Vec<u8> {
    let b = (file * 31 + n * 7) as u8 | 1;
    vec![b; CHUNK]
}

fn expect_nospace<T: std::fmt::Debug>(r: Result<T, Error>, what: &str) {
    match r {
        Err(e) => assert_eq!(e.errno(), libc::ENOSPC, "{what}: {e:?}"),
        Ok(v) => panic!("{what}: succeeded ({v:?}) on a full device"),
    }
}

/// Creates files in `dir` and writes 64 KiB chunks until the device is
/// full; checks that the failed write changed nothing. Returns the files.
fn fill(fs: &Fs, dir: Ino) -> Vec<(Vec<u8>, Ino, Vec<u8>)> {
    let mut files = Vec::new();
    for f in 0.. {
        let name = format!("f{f}").into_bytes();
        let ino = match fs.create(dir, &name, 0o644, 0, 0) {
            Ok(a) => a.ino,
            Err(e) => {
                assert_eq!(e.errno(), libc::ENOSPC, "create {f}: {e:?}");
                return files;
            }
        };
        let mut data = Vec::new();
        // A few chunks per file, so files and their logs both grow.
        for n in 0..8 {
            let c = chunk(f, n);
            match fs.write(ino, data.len() as u64, &c) {
                Ok(k) => {
                    assert_eq!(k, CHUNK);
                    data.extend_from_slice(&c);
                }
                Err(e) => {
                    assert_eq!(e.errno(), libc::ENOSPC, "write to f{f}: {e:?}");
                    assert_eq!(fs.getattr(ino).unwrap().size, data.len() as u64);
                    assert!(read_all(fs, ino) == data, "a failed write changed f{f}");
                    files.push((name, ino, data));
                    return files;
                }
            }
        }
        files.push((name, ino, data));
    }
    unreachable!()
}

/// Fill, delete, refill ten times: once everything is deleted the free
/// count is exactly what it was before the first fill — after plain cycles,
/// after a clean remount, after a crash of the empty file system and after
/// a crash of the full one (the scan must find the same free pages the
/// running file system had). The files live in a directory that is removed
/// too, so no log of this cycle's names remains (a directory's log may end
/// up one page longer or shorter, which is not a leak).
#[test]
fn fill_delete_refill_ten_times_returns_all_space() {
    let region = fresh(24, 2);
    let mut fs = mount(&region);
    let empty = fs.statfs().blocks_free;
    for cycle in 0..10 {
        let dir = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
        let files = fill(&fs, dir);
        assert!(files.len() > 10, "cycle {cycle}: only {} files fit", files.len());
        let full = fs.statfs().blocks_free;
        // 16 pages would have taken another chunk (a little may be kept
        // for the logs the last write needed); the reserve stays free.
        let avail = fs.statfs().blocks_avail;
        assert!(avail < 32, "cycle {cycle}: {avail} pages still available when full");
        assert!(
            full < fs.statfs().blocks_reserved + 32,
            "cycle {cycle}: {full} pages free when full"
        );
        if cycle == 8 {
            drop(fs); // crash while full
            assert_fsck_clean(&region);
            fs = mount(&region);
            assert_eq!(fs.statfs().blocks_free, full, "free pages after a crash when full");
        }
        for (name, ino, data) in &files {
            assert!(read_all(&fs, *ino) == *data, "cycle {cycle}");
            fs.unlink(dir, name).unwrap();
        }
        assert_eq!(names(&fs, dir), Vec::<String>::new());
        fs.rmdir(ROOT_INO, b"d").unwrap();
        assert_eq!(
            fs.statfs().blocks_free,
            empty,
            "cycle {cycle}: free pages after deleting everything"
        );
        match cycle {
            3 => {
                fs.unmount().unwrap();
                assert_fsck_clean(&region);
                fs = mount(&region);
                assert!(fs.mount_report().clean);
            }
            6 => {
                drop(fs);
                assert_fsck_clean(&region);
                fs = mount(&region);
                assert!(!fs.mount_report().clean);
            }
            _ => continue,
        }
        assert_eq!(fs.statfs().blocks_free, empty, "after the remount in cycle {cycle}");
    }
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// Writes to a file named "big" until not one data page is left for
/// ordinary writes (the reserve for deletes stays): 64 KiB writes, then
/// 4 KiB writes.
fn fill_with_one_file(fs: &Fs) -> Ino {
    let big = fs.create(ROOT_INO, b"big", 0o644, 0, 0).unwrap().ino;
    let mut off = 0;
    for len in [CHUNK, 4096] {
        while fs.write(big, off, &vec![1u8; len]).is_ok() {
            off += len as u64;
        }
    }
    expect_nospace(fs.write(big, 1 << 30, b"x"), "one more page");
    big
}

/// Shortens `big`, which filled the device, by `pages` pages: exactly that
/// many become available.
fn give_back(fs: &Fs, big: Ino, pages: u64) {
    let set = SetAttr::default().size(fs.getattr(big).unwrap().size - pages * 4096);
    fs.setattr(big, &set).unwrap();
    assert_eq!(fs.statfs().blocks_avail, pages);
}

/// On a full device, deleting a file must work even when the directory's
/// log has no room left: otherwise no space can ever be freed.
#[test]
fn unlink_on_a_completely_full_device_frees_space() {
    let region = fresh(32, 2);
    let fs = mount(&region);
    fill_with_one_file(&fs);
    // Empty files need no data pages, only room in the root's log: create
    // them until that log cannot grow, so its last page is full.
    for i in 0.. {
        if let Err(e) = fs.create(ROOT_INO, format!("e{i}").as_bytes(), 0o644, 0, 0) {
            assert_eq!(e.errno(), libc::ENOSPC);
            break;
        }
    }
    assert_eq!(fs.statfs().blocks_avail, 0);
    fs.unlink(ROOT_INO, b"big").unwrap();
    assert!(fs.statfs().blocks_free > 3000);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// A clean unmount of a full device must still save the allocator state
/// (NOVA §4.7), so the next mount is clean and needs no scan.
#[test]
fn unmount_of_a_completely_full_device_is_clean() {
    let region = fresh(16, 2);
    let fs = mount(&region);
    fill_with_one_file(&fs);
    assert_eq!(fs.statfs().blocks_avail, 0);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
    let fs = mount(&region);
    assert!(fs.mount_report().clean, "{:?}", fs.mount_report());
    fs.unmount().unwrap();
}

/// Creating files in a directory with a long log keeps working until the
/// device is really full: the log should grow by what it needs when it
/// cannot double (NOVA §4.1 doubles "sufficient new pages").
#[test]
fn creating_in_a_large_directory_uses_the_last_free_pages() {
    let region = fresh(64, 2);
    let fs = mount(&region);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    // 1000 names of 255 bytes: a directory log of about 90 pages.
    for i in 0..1000 {
        let mut name = format!("{i:04}").into_bytes();
        name.resize(255, b'x');
        fs.create(d, &name, 0o644, 0, 0).unwrap();
    }
    let big = fill_with_one_file(&fs);
    give_back(&fs, big, 40);
    for i in 0.. {
        if let Err(e) = fs.create(d, format!("e{i}").as_bytes(), 0o644, 0, 0) {
            assert_eq!(e.errno(), libc::ENOSPC);
            break;
        }
    }
    // Each create needs at most one new log page.
    let left = fs.statfs().blocks_avail;
    assert!(left <= 1, "ENOSPC with {left} pages available");
}

/// Names of 256 bytes are refused with ENAMETOOLONG by every call that
/// takes a name; 255 bytes work.
#[test]
fn names_over_255_bytes_give_enametoolong() {
    let region = fresh(16, 2);
    let fs = mount(&region);
    let long = vec![b'n'; 256];
    let max = vec![b'm'; 255];
    let f = fs.create(ROOT_INO, &max, 0o644, 0, 0).unwrap();
    assert_eq!(fs.lookup(ROOT_INO, &max).unwrap().ino, f.ino);
    let too_long = |r: Result<(), Error>, what: &str| match r {
        Err(e) => assert_eq!(e.errno(), libc::ENAMETOOLONG, "{what}: {e:?}"),
        Ok(()) => panic!("{what} accepted a 256-byte name"),
    };
    too_long(fs.create(ROOT_INO, &long, 0o644, 0, 0).map(drop), "create");
    too_long(fs.mkdir(ROOT_INO, &long, 0o755, 0, 0).map(drop), "mkdir");
    too_long(
        fs.mknod(ROOT_INO, &long, libc::S_IFIFO | 0o644, 0, 0, 0).map(drop),
        "mknod",
    );
    too_long(fs.symlink(ROOT_INO, &long, b"t", 0, 0).map(drop), "symlink");
    too_long(fs.link(f.ino, ROOT_INO, &long).map(drop), "link");
    too_long(fs.lookup(ROOT_INO, &long).map(drop), "lookup");
    too_long(fs.unlink(ROOT_INO, &long), "unlink");
    too_long(fs.rmdir(ROOT_INO, &long), "rmdir");
    too_long(fs.rename(ROOT_INO, &max, ROOT_INO, &long, 0), "rename to");
    too_long(fs.rename(ROOT_INO, &long, ROOT_INO, b"x", 0), "rename from");
    too_long(
        fs.symlink(ROOT_INO, b"s", &vec![b't'; 4096], 0, 0).map(drop),
        "symlink target of 4096 bytes",
    );
    fs.symlink(ROOT_INO, b"s", &vec![b't'; 4095], 0, 0).unwrap();
    fs.rename(ROOT_INO, &max, ROOT_INO, b"short", 0).unwrap();
    let mut want = vec!["s".to_string(), "short".to_string()];
    want.sort();
    assert_eq!(names(&fs, ROOT_INO), want);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// Hard links up to MAX_LINKS work and the next one gives EMLINK; the
/// count survives a remount and fsck agrees with it.
#[test]
fn linking_past_max_links_gives_emlink() {
    let region = fresh(64, 2);
    let fs = mount(&region);
    let d = fs.mkdir(ROOT_INO, b"links", 0o755, 0, 0).unwrap().ino;
    let f = fs.create(d, b"l0", 0o644, 0, 0).unwrap().ino;
    let t0 = Instant::now();
    for i in 1..MAX_LINKS {
        let a = fs.link(f, d, format!("l{i}").as_bytes()).unwrap();
        assert_eq!(a.nlink, i + 1);
    }
    match fs.link(f, d, b"one-more") {
        Err(e) => assert_eq!(e.errno(), libc::EMLINK, "{e:?}"),
        Ok(a) => panic!("link number {} succeeded", a.nlink),
    }
    eprintln!("{MAX_LINKS} links in {:?}", t0.elapsed());
    fs.unlink(d, b"l7").unwrap();
    fs.link(f, d, b"again").unwrap();
    assert_eq!(fs.getattr(f).unwrap().nlink, MAX_LINKS);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
    let fs = mount(&region);
    assert_eq!(fs.getattr(f).unwrap().nlink, MAX_LINKS);
    assert!(matches!(fs.link(f, d, b"one-more"), Err(Error::TooManyLinks)));
    fs.unmount().unwrap();
}

/// Runs `work` `rounds` times and checks the free count after is within a
/// few pages of before: the logs it grows must be collected.
fn assert_bounded(fs: &Fs, rounds: usize, mut work: impl FnMut(usize)) {
    // A log whose live entries fit in a page grows to six pages before
    // thorough GC compacts it (three left by fast GC, then doubled:
    // `gc::worth_compacting`), and its replica with it; a rename between
    // two directories grows two such logs.
    const SLACK: u64 = 24;
    let before = fs.statfs().blocks_free;
    for i in 0..rounds {
        work(i);
    }
    let after = fs.statfs().blocks_free;
    assert!(
        after + SLACK >= before,
        "{} pages gone after {rounds} rounds",
        before - after
    );
}

/// A thousand create/unlink cycles in one directory (and ten thousand
/// more) leave free space within a few pages of where it started: log GC
/// reclaims the dead dentries.
#[test]
fn thousand_create_unlink_cycles_keep_the_directory_log_bounded() {
    let region = fresh(16, 2);
    let fs = mount(&region);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    fs.create(d, b"keep", 0o644, 0, 0).unwrap();
    for rounds in [1000, 10_000] {
        assert_bounded(&fs, rounds, |i| {
            let name = format!("tmp{i}");
            fs.create(d, name.as_bytes(), 0o644, 0, 0).unwrap();
            fs.unlink(d, name.as_bytes()).unwrap();
        });
    }
    assert_eq!(names(&fs, d), vec!["keep"]);
    drop(fs);
    assert_fsck_clean(&region);
    let fs = mount(&region);
    assert_eq!(names(&fs, d), vec!["keep"]);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// Rewriting one page, changing attributes, truncating and extending, and
/// renaming back and forth, each ten thousand times, keep the logs bounded.
#[test]
fn ten_thousand_overwrites_setattrs_truncates_and_renames_keep_logs_bounded() {
    let region = fresh(16, 2);
    let fs = mount(&region);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    fs.write(f, 0, &[1u8; 8192]).unwrap();
    assert_bounded(&fs, 10_000, |i| {
        fs.write(f, 100, &[(i % 250) as u8 + 1; 50]).unwrap();
    });
    assert_bounded(&fs, 10_000, |i| {
        let set = SetAttr::default().mode(0o600 + (i as u32 % 2));
        fs.setattr(f, &set).unwrap();
    });
    assert_bounded(&fs, 10_000, |i| {
        let set = SetAttr::default().size(if i % 2 == 0 { 5000 } else { 12_000 });
        fs.setattr(f, &set).unwrap();
    });
    assert_bounded(&fs, 10_000, |i| {
        let (a, b) = if i % 2 == 0 { (ROOT_INO, d) } else { (d, ROOT_INO) };
        fs.rename(a, b"f", b, b"f", 0).unwrap();
    });
    let mut want = vec![1u8; 5000];
    want[100..150].fill((9999 % 250) as u8 + 1);
    want.resize(12_000, 0);
    assert!(read_all(&fs, f) == want);
    assert_eq!(fs.getattr(f).unwrap().perm, 0o601);
    drop(fs);
    assert_fsck_clean(&region);
    let fs = mount(&region);
    assert!(read_all(&fs, f) == want);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// A rename that fails for want of room in its directory's log gives back
/// the first log page it had written for a file that had no log yet:
/// nothing on the media reaches that page, so kept it would be neither in
/// use nor free after the unmount (fsck: leaked).
#[test]
fn a_failed_rename_gives_back_the_first_log_page_of_a_file() {
    let region = fresh(32, 2);
    let fs = mount(&region);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    fs.create(d, b"f", 0o644, 0, 0).unwrap();
    let big = fill_with_one_file(&fs);
    // Empty files until the directory's log cannot grow.
    for i in 0.. {
        if let Err(e) = fs.create(d, format!("e{i}").as_bytes(), 0o644, 0, 0) {
            assert_eq!(e.errno(), libc::ENOSPC);
            break;
        }
    }
    // Room for one log page and its mirror: the rename writes the file's
    // first log page (its ctime), then finds no room for the directory's.
    give_back(&fs, big, 2);
    expect_nospace(
        fs.rename(d, b"f", d, b"g", 0),
        "rename in a directory whose log is full",
    );
    assert_eq!(fs.statfs().blocks_avail, 2, "the failed rename kept the pages it wrote");
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}
