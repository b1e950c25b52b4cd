//! `novafs tune`: turns protection features of an unmounted image on or
//! off, or changes the consistency mode its mounts take by default
//! ([`set_consistency`]: one superblock word, no rebuild). Metadata
//! replicas decide where metadata may live (a primary low,
//! its mirror high, the dead zone between: Fortis §4.4), so an image made
//! without them cannot simply start keeping them: its log pages and inode
//! tables sit anywhere, often where a mirror must go. Tuning therefore
//! rebuilds the file system into a second region formatted with the new
//! features and copies the tree over through the ordinary commit paths —
//! every inode keeps its number and generation (file handles stay valid),
//! every name, hard link, hole, owner, mode and time is kept, and the
//! image keeps its uuid, creation time and health counters. The source is
//! only read; the caller swaps the regions once the rebuild is checked.

use std::collections::HashSet;
use std::sync::Arc;

use pm::Region;

use crate::consistency::Consistency;
use crate::error::{Error, Result};
use crate::fs::{Fs, MountOptions, SetAttr, SEEK_DATA, SEEK_HOLE};
use crate::fsck;
use crate::inode::{Attr, FileType, Ino, ROOT_INO};
use crate::layout::{
    FEATURE_INCOMPAT_DATA_CSUM, FEATURE_INCOMPAT_DATA_PARITY, FEATURE_INCOMPAT_META_REPLICA, STATE_CLEAN,
};
use crate::mkfs::FormatOptions;
use crate::superblock::{read_superblock, write_superblock};

/// The features an image is rebuilt with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    /// Replicas of every metadata page (Fortis §4.2).
    pub meta_replicas: bool,
    /// The dead zone between a metadata page and its replica, in bytes
    /// (0 without replicas).
    pub dead_zone: u64,
    /// Strip checksums and parity of file data (Fortis §4.3).
    pub data_csum: bool,
    pub data_parity: bool,
}

impl Features {
    /// The features `region`'s image has now.
    pub fn of(region: &dyn Region) -> Result<Features> {
        let (sb, _) = read_superblock(region)?;
        Ok(Features {
            meta_replicas: sb.features_incompat & FEATURE_INCOMPAT_META_REPLICA != 0,
            dead_zone: sb.dead_zone_pages * crate::layout::PAGE_SIZE,
            data_csum: sb.features_incompat & FEATURE_INCOMPAT_DATA_CSUM != 0,
            data_parity: sb.features_incompat & FEATURE_INCOMPAT_DATA_PARITY != 0,
        })
    }
}

/// What a rebuild copied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rebuilt {
    pub inodes: u64,
    pub names: u64,
    /// File bytes copied (holes are not).
    pub bytes: u64,
}

/// Copies at most this much file data at a time.
const COPY_CHUNK: usize = 1 << 20;

/// Rebuilds the cleanly unmounted image on `from` into `to` (the same
/// size) with `features`, then checks the result with fsck. `progress`
/// is called with (inodes copied, inodes in use). With `snapshot`, what
/// is rebuilt is that snapshot of the image (a roll back); without, its
/// live state, and an image with snapshots is refused, since the copy
/// would not keep them.
pub fn rebuild(
    from: Arc<dyn Region>,
    to: Arc<dyn Region>,
    features: Features,
    snapshot: Option<&[u8]>,
    progress: &dyn Fn(u64, u64),
) -> Result<Rebuilt> {
    let (sb, _) = read_superblock(&*from)?;
    if sb.state != STATE_CLEAN {
        return Err(Error::Invalid(
            "the image was not cleanly unmounted: mount and unmount it (or run fsck --repair) first",
        ));
    }
    if to.len() != from.len() {
        return Err(Error::Invalid("the rebuilt image must be as large as the original"));
    }
    let live = Fs::open(
        from,
        MountOptions {
            read_only: true,
            ..MountOptions::default()
        },
    )?;
    let src =
        match snapshot {
            Some(name) => live.open_snapshot(name)?,
            None if !live.snapshots().is_empty() => return Err(Error::Invalid(
                "the image has snapshots, which a rebuild would not keep: delete them first (novafs snapshot delete)",
            )),
            None => live,
        };
    let root = src.getattr(ROOT_INO)?;
    Fs::format(
        to.clone(),
        &FormatOptions {
            shards: Some(sb.shards),
            uid: root.uid,
            gid: root.gid,
            meta_replicas: features.meta_replicas,
            dead_zone: features.dead_zone,
            data_csum: features.data_csum,
            data_parity: features.data_parity,
            // The mounted source refused an unknown mode.
            consistency: Consistency::of(&sb)?,
        },
    )?;
    let dst = Fs::open(to.clone(), MountOptions::default())?;
    let stats = src.statfs();
    let in_use = stats.files - stats.files_free;
    let rebuilt = copy_tree(&src, &dst, &|n| progress(n, in_use))?;
    dst.unmount()?;
    // The image stays the same file system: its identity and history.
    let (mut new_sb, _) = read_superblock(&*to)?;
    new_sb.uuid = sb.uuid;
    new_sb.created_ns = sb.created_ns;
    new_sb.meta_repairs = sb.meta_repairs;
    new_sb.data_repairs = sb.data_repairs;
    new_sb.meta_losses = sb.meta_losses;
    new_sb.last_loss_ino = sb.last_loss_ino;
    new_sb.last_loss_ns = sb.last_loss_ns;
    write_superblock(&*to, &mut new_sb)?;
    let check = fsck::check(to, &|_, _| {})?;
    if let Some(p) = check.problems.first() {
        tracing::error!(problem = %p, "the rebuilt image does not check clean");
        return Err(Error::Invalid(
            "the rebuilt image does not check clean; the original is unchanged",
        ));
    }
    Ok(rebuilt)
}

/// Records `mode` as the consistency mode mounts of the cleanly unmounted
/// image on `region` take by default (NOVA-Fortis §4.6), and returns the
/// one it replaces. Only the superblock changes (both copies, primary
/// first: R4): the modes share one format. An image that is mounted, or
/// was not cleanly unmounted, is refused: a mount's superblock updates
/// would undo the change, and a crashed relaxed mount's intents are for
/// the next mount to reseal.
pub fn set_consistency(region: &dyn Region, mode: Consistency) -> Result<Consistency> {
    let (mut sb, _) = read_superblock(region)?;
    if sb.state != STATE_CLEAN {
        return Err(Error::Invalid(
            "the image is mounted, or was not cleanly unmounted: unmount it (or mount and unmount it, or run fsck --repair) first",
        ));
    }
    let was = Consistency::of(&sb)?;
    if was != mode {
        sb.consistency = mode.code();
        write_superblock(region, &mut sb)?;
    }
    Ok(was)
}

/// Copies every inode reachable from the root of `src` into the empty
/// `dst`, keeping numbers; attributes last, once nothing changes them.
fn copy_tree(src: &Fs, dst: &Fs, progress: &dyn Fn(u64)) -> Result<Rebuilt> {
    let mut out = Rebuilt {
        inodes: 1,
        ..Rebuilt::default()
    };
    let mut seen: HashSet<Ino> = HashSet::from([ROOT_INO]);
    let mut attrs: Vec<Attr> = vec![src.getattr(ROOT_INO)?];
    let mut dirs = vec![ROOT_INO];
    while let Some(dir) = dirs.pop() {
        for (name, ino) in entries(src, dir)? {
            out.names += 1;
            if !seen.insert(ino) {
                dst.link(ino, dir, &name)?;
                continue;
            }
            let attr = src.getattr(ino)?;
            match attr.kind {
                FileType::Directory => {
                    dst.restore_node(dir, &name, &attr, None)?;
                    dirs.push(ino);
                }
                FileType::Symlink => {
                    dst.restore_node(dir, &name, &attr, Some(&src.readlink(ino)?))?;
                }
                FileType::RegularFile => {
                    dst.restore_node(dir, &name, &attr, None)?;
                    out.bytes += copy_data(src, dst, ino)?;
                }
                _ => {
                    dst.restore_node(dir, &name, &attr, None)?;
                }
            }
            attrs.push(attr);
            out.inodes += 1;
            progress(out.inodes);
        }
    }
    for a in &attrs {
        // Extended attributes (ACLs among them) before the attributes:
        // setting them changes ctime.
        let list = src.listxattr(a.ino)?;
        for name in list.split(|&b| b == 0).filter(|n| !n.is_empty()) {
            dst.setxattr(a.ino, name, &src.getxattr(a.ino, name)?, 0)?;
        }
        let is_file = a.kind == FileType::RegularFile;
        dst.setattr(
            a.ino,
            &SetAttr {
                // A symlink's permissions are fixed.
                mode: (a.kind != FileType::Symlink).then_some(a.perm),
                uid: Some(a.uid),
                gid: Some(a.gid),
                size: is_file.then_some(a.size),
                atime: Some(a.atime),
                mtime: Some(a.mtime),
                ctime: Some(a.ctime),
                // Last, with the times: an immutable directory takes no
                // more names, an immutable file no more data.
                flags: Some(a.flags),
                times_now: false,
            },
        )?;
    }
    Ok(out)
}

/// The names in directory `dir`, without "." and "..".
fn entries(fs: &Fs, dir: Ino) -> Result<Vec<(Vec<u8>, Ino)>> {
    let mut out = Vec::new();
    fs.readdir(dir, 0, |e| {
        if e.name != b"." && e.name != b".." {
            out.push((e.name, e.ino));
        }
        false
    })?;
    Ok(out)
}

/// Copies the data of file `ino`, skipping holes; returns bytes copied.
fn copy_data(src: &Fs, dst: &Fs, ino: Ino) -> Result<u64> {
    let mut buf = vec![0u8; COPY_CHUNK];
    let mut copied = 0;
    let mut at = 0;
    loop {
        let start = match src.lseek(ino, at, SEEK_DATA) {
            Ok(s) => s,
            Err(Error::NoSuchOffset) => return Ok(copied),
            Err(e) => return Err(e),
        };
        let end = src.lseek(ino, start, SEEK_HOLE)?;
        let mut off = start;
        while off < end {
            let want = ((end - off) as usize).min(COPY_CHUNK);
            let n = src.read(ino, off, &mut buf[..want])?;
            if n == 0 {
                return Ok(copied);
            }
            dst.write(ino, off, &buf[..n])?;
            off += n as u64;
            copied += n as u64;
        }
        at = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::PAGE_SIZE;
    use pm::MemRegion;

    const SIZE: u64 = 24 << 20;

    fn image(replicas: bool) -> Arc<MemRegion> {
        let mem = Arc::new(MemRegion::new(SIZE));
        let opts = FormatOptions {
            shards: Some(2),
            meta_replicas: replicas,
            dead_zone: 256 * 1024,
            ..FormatOptions::default()
        };
        Fs::format(mem.clone(), &opts).unwrap();
        mem
    }

    /// A tree with every kind of node, hard links, holes and odd modes.
    fn populate(fs: &Fs) {
        let d = fs.mkdir(ROOT_INO, b"d", 0o2750, 7, 8).unwrap();
        let e = fs.mkdir(d.ino, b"e", 0o700, 7, 8).unwrap();
        let a = fs.create(ROOT_INO, b"a", 0o4755, 1000, 100).unwrap();
        fs.write(a.ino, 0, b"hello").unwrap();
        let sparse = fs.create(e.ino, b"sparse", 0o600, 0, 0).unwrap();
        fs.write(sparse.ino, 3 * PAGE_SIZE + 5, &[7u8; 9000]).unwrap();
        fs.setattr(
            sparse.ino,
            &SetAttr {
                size: Some(40 * PAGE_SIZE),
                ..SetAttr::default()
            },
        )
        .unwrap();
        let big = fs.create(d.ino, b"big", 0o644, 0, 0).unwrap();
        let data: Vec<u8> = (0..(3 * COPY_CHUNK as u32 / 2)).map(|i| (i * 7 % 251) as u8).collect();
        fs.write(big.ino, 0, &data).unwrap();
        fs.link(a.ino, e.ino, b"a-again").unwrap();
        fs.symlink(d.ino, b"to-a", b"../a", 5, 6).unwrap();
        fs.mknod(ROOT_INO, b"fifo", libc::S_IFIFO | 0o640, 0, 0, 0).unwrap();
        fs.mknod(ROOT_INO, b"null", libc::S_IFCHR | 0o666, 0x103, 0, 0).unwrap();
        // Extended attributes: inline, in pages, and ACLs (access with a
        // named user and mask; a default one on a directory).
        fs.setxattr(a.ino, b"user.k", b"v", 0).unwrap();
        fs.setxattr(big.ino, b"trusted.big", &[9u8; 20_000], 0).unwrap();
        let acl = |tags: [(u16, u16, u32); 5]| {
            let mut v = 2u32.to_le_bytes().to_vec();
            for (tag, perm, id) in tags {
                v.extend([tag.to_le_bytes().as_slice(), &perm.to_le_bytes(), &id.to_le_bytes()].concat());
            }
            v
        };
        let named = acl([(1, 7, !0), (2, 5, 1000), (4, 0, !0), (0x10, 5, !0), (0x20, 0, !0)]);
        fs.setxattr(e.ino, b"system.posix_acl_access", &named, 0).unwrap();
        fs.setxattr(e.ino, b"system.posix_acl_default", &named, 0).unwrap();
        // A freed slot below the others: numbers must not close the gap.
        let gone = fs.create(ROOT_INO, b"gone", 0o600, 0, 0).unwrap();
        fs.create(ROOT_INO, b"after", 0o600, 0, 0).unwrap();
        fs.unlink(ROOT_INO, b"gone").unwrap();
        assert!(gone.ino > 1);
        fs.setattr(
            d.ino,
            &SetAttr {
                atime: Some(-1_500_000_000),
                mtime: Some(1),
                ..SetAttr::default()
            },
        )
        .unwrap();
    }

    /// Every reachable inode: path, attributes (less `blocks`, which
    /// depends on layout), contents or target or names.
    fn dump(fs: &Fs) -> Vec<(String, Attr, Vec<u8>)> {
        let mut out = Vec::new();
        let mut todo = vec![(String::from("/"), ROOT_INO)];
        while let Some((path, ino)) = todo.pop() {
            let mut a = fs.getattr(ino).unwrap();
            a.blocks = 0;
            let body = match a.kind {
                FileType::Directory => {
                    let mut names = entries(fs, ino).unwrap();
                    names.sort();
                    for (n, child) in &names {
                        todo.push((format!("{path}{}/", String::from_utf8_lossy(n)), *child));
                    }
                    names
                        .iter()
                        .flat_map(|(n, i)| [n.clone(), i.to_le_bytes().to_vec()].concat())
                        .collect()
                }
                FileType::Symlink => fs.readlink(ino).unwrap(),
                FileType::RegularFile => {
                    let mut buf = vec![0u8; a.size as usize];
                    assert_eq!(fs.read(ino, 0, &mut buf).unwrap(), buf.len());
                    buf
                }
                _ => Vec::new(),
            };
            let mut body = body;
            let list = fs.listxattr(ino).unwrap();
            for name in list.split(|&b| b == 0).filter(|n| !n.is_empty()) {
                body.extend([name, b"=", &fs.getxattr(ino, name).unwrap()].concat());
            }
            out.push((path, a, body));
        }
        out.sort_by(|x, y| x.0.cmp(&y.0));
        out
    }

    #[test]
    fn a_rebuild_keeps_the_tree_and_changes_only_the_features() {
        for (from, to) in [(false, true), (true, false)] {
            let src = image(from);
            let fs = Fs::open(src.clone(), MountOptions::default()).unwrap();
            populate(&fs);
            let before = dump(&fs);
            fs.unmount().unwrap();
            let untouched = src.snapshot();
            let dst = Arc::new(MemRegion::new(SIZE));
            let features = Features {
                meta_replicas: to,
                dead_zone: 512 * 1024,
                data_csum: to,
                data_parity: !to,
            };
            let calls = std::sync::atomic::AtomicU64::new(0);
            let done = rebuild(src.clone(), dst.clone(), features, None, &|_, _| {
                calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            })
            .unwrap();
            assert_eq!(src.snapshot(), untouched, "the source is only read");
            assert_eq!(done.inodes, 10);
            assert_eq!(done.names, 10, "nine names of nodes and one extra hard link");
            // Data is found page by page: the sparse file's three pages whole.
            assert_eq!(done.bytes, 5 + 3 * PAGE_SIZE + 3 * COPY_CHUNK as u64 / 2);
            assert_eq!(calls.into_inner(), 9);
            let dead_zone = if to { features.dead_zone } else { 0 };
            assert_eq!(Features::of(&*dst).unwrap(), Features { dead_zone, ..features });
            let (old_sb, new_sb) = (read_superblock(&*src).unwrap().0, read_superblock(&*dst).unwrap().0);
            assert_eq!((new_sb.uuid, new_sb.created_ns), (old_sb.uuid, old_sb.created_ns));
            let fs = Fs::open(dst.clone(), MountOptions::default()).unwrap();
            assert!(fs.mount_report().clean);
            assert_eq!(dump(&fs), before, "from replicas {from} to {to}");
            // The slot freed before the rebuild is still free and usable.
            fs.create(ROOT_INO, b"new", 0o600, 0, 0).unwrap();
            fs.unmount().unwrap();
            assert_eq!(fsck::check(dst, &|_, _| {}).unwrap().problems, Vec::<String>::new());
        }
    }

    #[test]
    fn an_image_that_was_not_cleanly_unmounted_is_refused() {
        let src = image(false);
        let fs = Fs::open(src.clone(), MountOptions::default()).unwrap();
        fs.create(ROOT_INO, b"f", 0o600, 0, 0).unwrap();
        drop(fs); // a crash: no clean unmount
        let dst = Arc::new(MemRegion::new(SIZE));
        let features = Features::of(&*src).unwrap();
        let err = rebuild(src, dst.clone(), features, None, &|_, _| {}).unwrap_err();
        assert!(err.to_string().contains("not cleanly unmounted"), "{err}");
        let small = Arc::new(MemRegion::new(SIZE / 2));
        let src = image(false);
        let err = rebuild(src, small, features, None, &|_, _| {}).unwrap_err();
        assert!(err.to_string().contains("as large as"), "{err}");
    }
}
