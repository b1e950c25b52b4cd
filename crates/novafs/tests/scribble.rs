//! Scribbles in the shape of NOVA-Fortis Fig. 7 (§4.4): age a file system,
//! then overwrite `size` bytes at random places and count the inodes whose
//! metadata is lost (they no longer read: EIO) or, worse, silently changed
//! (attributes or names that read back different without an error). With
//! replicas and a dead zone, no scribble shorter than the dead zone may
//! lose or change any metadata; without replicas, small scribbles already
//! do (the control that shows the test can fail). File contents are data,
//! not metadata: data checksums are a separate feature.
//!
//! The default run tries a few places per size; `NOVAFS_SCRIBBLE_LONG=1`
//! tries many more and prints the table.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use novafs::{Attr, FileType, FormatOptions, Fs, Ino, MountOptions, ROOT_INO};
use novafs_rng::SplitMix as Rng;
use pm::{MemRegion, Region};

const MIB: u64 = 1 << 20;

/// An aged image (Fortis §4.4 ages with Filebench: create, delete about
/// half, again): directories of small files, half of them deleted, twice.
fn aged(replicas: bool) -> Vec<u8> {
    aged_with(FormatOptions::default().meta_replicas(replicas))
}

fn aged_with(opts: FormatOptions) -> Vec<u8> {
    let mem = Arc::new(MemRegion::new(48 * MIB));
    let region: Arc<dyn Region> = mem.clone();
    let opts = opts.shards(2);
    Fs::format(region.clone(), &opts).unwrap();
    let fs = Fs::open(region, MountOptions::default()).unwrap();
    let mut rng = Rng::from_state(7);
    for round in 0..2 {
        for d in 0..8 {
            let name = format!("d{round}-{d}");
            let dir = fs.mkdir(ROOT_INO, name.as_bytes(), 0o755, 0, 0).unwrap().ino;
            for f in 0..60 {
                let file = fs.create(dir, format!("f{f}").as_bytes(), 0o644, 0, 0).unwrap().ino;
                let len = 1 + rng.below(3 * 4096) as usize;
                let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
                fs.write(file, 0, &data).unwrap();
                if rng.below(2) == 0 {
                    fs.unlink(dir, format!("f{f}").as_bytes()).unwrap();
                }
            }
        }
    }
    fs.unmount().unwrap();
    mem.snapshot()
}

/// Every inode reachable from the root, by number.
fn inodes(fs: &Fs) -> Vec<Ino> {
    let mut all = vec![ROOT_INO];
    let mut i = 0;
    while i < all.len() {
        let ino = all[i];
        i += 1;
        let mut children = Vec::new();
        let listed = fs.readdir(ino, 0, |e| {
            if e.name != b"." && e.name != b".." {
                children.push((e.ino, e.kind));
            }
            false
        });
        if listed.is_ok() {
            for (child, kind) in children {
                if kind == FileType::Directory || !all.contains(&child) {
                    all.push(child);
                }
            }
        }
    }
    all
}

/// An inode's attributes and, for a directory, its names.
type Metadata = (Attr, Vec<(Vec<u8>, Ino)>);

/// What an inode's metadata reads as; None when it does not read.
fn metadata(fs: &Fs, ino: Ino) -> Option<Metadata> {
    let attr = fs.getattr(ino).ok()?;
    let mut names = Vec::new();
    if attr.kind == FileType::Directory {
        fs.readdir(ino, 0, |e| {
            names.push((e.name, e.ino));
            false
        })
        .ok()?;
    }
    Some((attr, names))
}

/// How many of `expected` inodes no longer read, and how many read back
/// different, after `size` bytes at `at` were overwritten (the whole image
/// lost counts them all).
fn lost_after(image: &[u8], expected: &Expected, at: u64, size: u64, rng: &mut Rng) -> (usize, usize) {
    let mut bytes = image.to_vec();
    for b in &mut bytes[at as usize..(at + size) as usize] {
        *b ^= 1 + (rng.next_u64() % 255) as u8;
    }
    let region: Arc<dyn Region> = Arc::new(MemRegion::from_bytes(bytes));
    let Ok(fs) = Fs::open(region, MountOptions::default().read_only(true)) else {
        return (expected.len(), 0);
    };
    let mut out = (0, 0);
    for (ino, was) in expected {
        match metadata(&fs, *ino) {
            None => out.0 += 1,
            Some(now) if now != *was => out.1 += 1,
            Some(_) => {}
        }
    }
    out
}

/// Every reachable inode and its metadata on the undamaged image.
type Expected = Vec<(Ino, Metadata)>;

/// Inodes lost per scribble size: (places tried, places that lost or
/// changed any, inodes lost, inodes silently changed).
fn sweep(replicas: bool, sizes: &[u64], places: u64) -> BTreeMap<u64, (u64, u64, usize, usize)> {
    let image = aged(replicas);
    let region: Arc<dyn Region> = Arc::new(MemRegion::from_bytes(image.clone()));
    let fs = Fs::open(region, MountOptions::default().read_only(true)).unwrap();
    let expected: Expected = inodes(&fs)
        .into_iter()
        .map(|ino| (ino, metadata(&fs, ino).unwrap()))
        .collect();
    let sb = fs.superblock();
    drop(fs);
    let mut rng = Rng::from_state(if replicas { 11 } else { 13 });
    let mut out = BTreeMap::new();
    for &size in sizes {
        let mut row = (0, 0, 0, 0);
        for _ in 0..places {
            // Anywhere in the data area, where every inode and log lives.
            let at = sb.data_start + rng.below(sb.data_end - sb.data_start - size);
            let (lost, changed) = lost_after(&image, &expected, at, size, &mut rng);
            row.0 += 1;
            row.1 += u64::from(lost + changed > 0);
            row.2 += lost;
            row.3 += changed;
        }
        out.insert(size, row);
    }
    out
}

#[test]
fn no_scribble_shorter_than_the_dead_zone_loses_metadata() {
    let long = std::env::var_os("NOVAFS_SCRIBBLE_LONG").is_some();
    let places = if long { 400 } else { 12 };
    let sizes = [1, 64, 4096, 64 << 10, 512 << 10, MIB - 4096];
    let with = sweep(true, &sizes, places);
    let without = sweep(false, &sizes[..3], places * 4);
    if long {
        println!("| scribble bytes | places | with replicas: places hit, inodes lost, changed | without: places hit, lost, changed |");
        for (size, (n, hit, lost, changed)) in &with {
            let other = without
                .get(size)
                .map_or("-".to_string(), |(_, h, l, c)| format!("{h}, {l}, {c}"));
            println!("| {size} | {n} | {hit}, {lost}, {changed} | {other} |");
        }
    }
    for (size, (_, hit, lost, changed)) in &with {
        assert_eq!(
            (*hit, *lost, *changed),
            (0, 0, 0),
            "a {size}-byte scribble lost or changed metadata despite the replicas"
        );
    }
    let lost_without: usize = without.values().map(|r| r.2 + r.3).sum();
    assert!(
        lost_without > 0,
        "the control: without replicas, scribbles lose metadata"
    );
}

/// What every regular file reachable from the root holds.
fn file_contents(fs: &Fs) -> Vec<(Ino, Vec<u8>)> {
    inodes(fs)
        .into_iter()
        .filter_map(|ino| {
            let a = fs.getattr(ino).ok().filter(|a| a.kind == FileType::RegularFile)?;
            let mut buf = vec![0u8; a.size as usize];
            fs.read(ino, 0, &mut buf).ok()?;
            Some((ino, buf))
        })
        .collect()
}

/// Per scribble size over file data and its checksums and parity:
/// (places, files read back wrong, files EIO).
fn data_sweep(protected: bool, sizes: &[u64], places: u64) -> BTreeMap<u64, (u64, usize, usize)> {
    let image = aged_with(FormatOptions::default().data_csum(protected).data_parity(protected));
    let open = |bytes: Vec<u8>| {
        let region: Arc<dyn Region> = Arc::new(MemRegion::from_bytes(bytes));
        Fs::open(region, MountOptions::default().read_only(true))
    };
    let fs = open(image.clone()).unwrap();
    let expected = file_contents(&fs);
    let sb = fs.superblock();
    drop(fs);
    // Data, checksum and parity areas: from the first checksum area (or
    // the data area) to the superblock replica.
    let lo = if sb.csum_off[0] != 0 {
        sb.csum_off[0]
    } else {
        sb.data_start
    };
    let mut rng = Rng::from_state(if protected { 17 } else { 19 });
    let mut out = BTreeMap::new();
    for &size in sizes {
        let mut row = (0, 0, 0);
        for _ in 0..places {
            let at = lo + rng.below(sb.replica_off - lo - size);
            let mut bytes = image.clone();
            for b in &mut bytes[at as usize..(at + size) as usize] {
                *b ^= 1 + (rng.next_u64() % 255) as u8;
            }
            let Ok(fs) = open(bytes) else {
                row.2 += expected.len();
                continue;
            };
            for (ino, want) in &expected {
                let mut buf = vec![0u8; want.len()];
                match fs.read(*ino, 0, &mut buf) {
                    Ok(n) if n == want.len() && buf == *want => {}
                    Ok(_) => row.1 += 1,
                    Err(_) => row.2 += 1,
                }
            }
            row.0 += 1;
        }
        out.insert(size, row);
    }
    out
}

/// File data scribbled (Fortis §4.3): with strip checksums and parity
/// (mkfs's default) a read returns the bytes written or EIO, never
/// anything else, and a scribble inside one strip loses nothing; without
/// them (the control), scribbles are read back as data.
#[test]
fn no_scribble_makes_a_read_return_wrong_data() {
    let long = std::env::var_os("NOVAFS_SCRIBBLE_LONG").is_some();
    let places = if long { 400 } else { 10 };
    let sizes = [1, 64, 512, 4096, 64 << 10];
    let with = data_sweep(true, &sizes, places);
    let without = data_sweep(false, &sizes, places);
    if long {
        println!("| scribble bytes | places | protected: files wrong, EIO | unprotected: files wrong, EIO |");
        for (size, (n, wrong, eio)) in &with {
            let (_, w2, e2) = without[size];
            println!("| {size} | {n} | {wrong}, {eio} | {w2}, {e2} |");
        }
    }
    for (size, (_, wrong, _)) in &with {
        assert_eq!(
            *wrong, 0,
            "a {size}-byte scribble was read back as data despite the checksums"
        );
    }
    assert!(
        without.values().map(|r| r.1).sum::<usize>() > 0,
        "the control: without checksums, scribbles are read back as data"
    );
}
