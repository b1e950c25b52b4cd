//! A populated image and a picture of its tree, for the fsck sweeps
//! (`fsck_sweep.rs`, `fsck_targets.rs`): what an image holds before it is
//! damaged, to be compared with what it holds after `fsck --repair`.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use novafs::fsck::Report;
use novafs::{Attr, FileType, FormatOptions, Fs, Ino, MountOptions, ROOT_INO};
use pm::{MemRegion, Region};

/// What a path holds: attributes, contents (file data or a symlink's
/// target) and extended attributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub attr: Attr,
    pub contents: Vec<u8>,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// Every path of a mounted tree (`/d0/f1`), with what it holds.
pub type Tree = BTreeMap<String, Node>;

/// `dirs` directories of `files` files each: data of varied sizes (a few
/// bytes to a few pages, some written twice), changed modes, extended
/// attributes, a symlink and a hard link per directory; cleanly unmounted.
/// Returns the image and the inode numbers of everything it holds.
pub fn populated(mib: u64, dirs: usize, files: usize) -> (Vec<u8>, Vec<Ino>) {
    let mem = Arc::new(MemRegion::new(mib << 20));
    let region: Arc<dyn Region> = mem.clone();
    Fs::format(region.clone(), &FormatOptions::default().shards(2)).unwrap();
    let fs = Fs::open(region, MountOptions::default()).unwrap();
    let mut inos = vec![ROOT_INO];
    for d in 0..dirs {
        let dir = fs.mkdir(ROOT_INO, format!("d{d}").as_bytes(), 0o755, 0, 0).unwrap().ino;
        inos.push(dir);
        for f in 0..files {
            let ino = fs
                .create(dir, format!("f{f}").as_bytes(), 0o644, 1000, 1000)
                .unwrap()
                .ino;
            inos.push(ino);
            let len = 1 + (f * 1_237 + d * 311) % 9_000;
            fs.write(ino, 0, &pattern(len, (d * 31 + f) as u8)).unwrap();
            if f % 3 == 0 {
                // A second write over part of the first: two write entries.
                fs.write(ino, (len / 2) as u64, &pattern(len / 3 + 1, f as u8 ^ 0x5a))
                    .unwrap();
            }
            if f % 4 == 1 {
                let set = novafs::SetAttr::default().mode(0o600);
                fs.setattr(ino, &set).unwrap();
            }
            if f % 5 == 2 {
                fs.setxattr(ino, b"user.note", format!("note {d}/{f}").as_bytes(), 0)
                    .unwrap();
            }
        }
        inos.push(fs.symlink(dir, b"link", b"f0", 0, 0).unwrap().ino);
        let f0 = fs.lookup(dir, b"f0").unwrap().ino;
        fs.link(f0, dir, b"f0-again").unwrap();
    }
    fs.unmount().unwrap();
    inos.sort_unstable();
    (mem.snapshot(), inos)
}

/// `len` bytes that differ from page to page and from file to file.
pub fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(salt) ^ (i >> 12) as u8)
        .collect()
}

/// The tree of the image, read through a read-only mount.
pub fn tree(region: &Arc<dyn Region>) -> novafs::Result<Tree> {
    let fs = Fs::open(region.clone(), MountOptions::default().read_only(true))?;
    let mut out = Tree::new();
    let mut todo = vec![(String::new(), ROOT_INO)];
    while let Some((path, dir)) = todo.pop() {
        let mut entries = Vec::new();
        fs.readdir(dir, 0, |e| {
            if e.name != b"." && e.name != b".." {
                entries.push(e.name);
            }
            false
        })?;
        for name in entries {
            let attr = fs.lookup(dir, &name)?;
            let p = format!("{path}/{}", String::from_utf8_lossy(&name));
            let contents = match attr.kind {
                FileType::RegularFile => {
                    let mut buf = vec![0u8; attr.size as usize];
                    let n = fs.read(attr.ino, 0, &mut buf)?;
                    buf.truncate(n);
                    buf
                }
                FileType::Symlink => fs.readlink(attr.ino)?,
                FileType::Directory => {
                    todo.push((p.clone(), attr.ino));
                    Vec::new()
                }
                _ => Vec::new(),
            };
            let mut xattrs = BTreeMap::new();
            let list = fs.listxattr(attr.ino)?;
            for name in list.split(|&b| b == 0).filter(|n| !n.is_empty()) {
                xattrs.insert(name.to_vec(), fs.getxattr(attr.ino, name)?);
            }
            out.insert(p, Node { attr, contents, xattrs });
        }
    }
    Ok(out)
}

pub fn check(region: &Arc<dyn Region>) -> novafs::Result<Report> {
    novafs::fsck::check(region.clone(), &|_, _| {})
}

/// A copy of image `base` to damage.
pub fn copy_of(base: &[u8]) -> (Arc<MemRegion>, Arc<dyn Region>) {
    let mem = Arc::new(MemRegion::from_bytes(base.to_vec()));
    let region: Arc<dyn Region> = mem.clone();
    (mem, region)
}

/// Whether the environment asks for the long sweep (`NOVAFS_SWEEP_LONG=1`).
pub fn long() -> bool {
    std::env::var("NOVAFS_SWEEP_LONG").is_ok_and(|v| v == "1")
}

/// Differences between two trees, for a message.
pub fn diff(before: &Tree, after: &Tree) -> Vec<String> {
    let mut out = Vec::new();
    for (p, n) in before {
        match after.get(p) {
            None => out.push(format!("{p}: lost")),
            Some(m) if m.attr != n.attr => out.push(format!("{p}: attributes {:?} became {:?}", n.attr, m.attr)),
            Some(m) if m.contents != n.contents => out.push(format!(
                "{p}: contents changed ({} bytes, {} differ)",
                m.contents.len(),
                m.contents.iter().zip(&n.contents).filter(|(a, b)| a != b).count()
            )),
            Some(m) if m != n => out.push(format!("{p}: extended attributes {:?} became {:?}", n.xattrs, m.xattrs)),
            _ => {}
        }
    }
    out.extend(
        after
            .keys()
            .filter(|p| !before.contains_key(*p))
            .map(|p| format!("{p}: new")),
    );
    out
}

/// Damages `spec` in a copy of `base`, then checks, repairs, checks again
/// and compares the tree with `before`; returns what went wrong.
pub fn damage_and_repair(base: &[u8], before: &Tree, spec: &novafs::inject::Spec) -> Result<(), String> {
    let (_mem, region) = copy_of(base);
    let damage = novafs::inject::corrupt(&*region, spec).map_err(|e| format!("inject: {e}"))?;
    let what = damage.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("; ");
    repair_and_compare(&region, before, &what)
}

/// Checks the damaged image `region` (fsck must find a problem), repairs
/// it, checks again (clean) and compares the tree with `before`; `what`
/// names the damage in what it returns.
pub fn repair_and_compare(region: &Arc<dyn Region>, before: &Tree, what: &str) -> Result<(), String> {
    let region = region.clone();
    let rep = check(&region).map_err(|e| format!("{what}: fsck failed: {e}"))?;
    if rep.is_clean() {
        return Err(format!(
            "{what}: fsck calls the damaged image clean (notes {:?})",
            rep.notes
        ));
    }
    let done = novafs::fsck::repair(region.clone()).map_err(|e| format!("{what}: repair failed: {e}"))?;
    let again = check(&region).map_err(|e| format!("{what}: fsck after repair failed: {e}"))?;
    if !again.is_clean() {
        return Err(format!(
            "{what}: after repair ({done:?}) fsck still finds {:?}",
            again.problems
        ));
    }
    let after = tree(&region).map_err(|e| format!("{what}: the repaired tree does not read: {e}"))?;
    let changes = diff(before, &after);
    if !changes.is_empty() {
        return Err(format!(
            "{what}: first found {:?}, repair did {done:?}, and changed the tree: {changes:#?}",
            rep.problems
        ));
    }
    Ok(())
}
