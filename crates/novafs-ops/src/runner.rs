//! The interpreter of [`Op`]: applies operations to the file system on one
//! region. Owns path resolution, the handles it holds open and the life
//! cycle of the image (mkfs, mount, unmount, crash); uses only the public
//! API of [`Fs`].

use std::sync::Arc;

use pm::Region;

use crate::{data, split, At, Op, Whence};
use novafs::{
    Attr, DirEntry, Error, FormatOptions, Fs, Ino, MetaReplicas, MountOptions, MountReport, StatFs, SEEK_DATA,
    SEEK_HOLE,
};

/// What an operation that succeeded observed.
#[derive(Clone, Debug)]
pub enum Observed {
    /// Nothing besides success.
    Done,
    /// The attributes of the node made, linked, changed, opened or stat'ed.
    Attr(Attr),
    /// Bytes written.
    Written(usize),
    /// Bytes read, or a symlink's target.
    Data(Vec<u8>),
    /// Where lseek landed.
    Offset(u64),
    Entries(Vec<DirEntry>),
    Statfs(StatFs),
    /// How the mount went.
    Mounted(MountReport),
}

/// Why an operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// Resolving `path` failed.
    #[error("{path}: {error}")]
    Resolve { path: String, error: Error },
    /// The file system refused or failed the operation.
    #[error(transparent)]
    Fs(#[from] Error),
    #[error("not mounted")]
    NotMounted,
    #[error("the image is mounted")]
    Mounted,
    #[error("{0} is not open")]
    NotOpen(At),
}

impl OpError {
    /// The file system's error (its errno is what a POSIX caller sees), or
    /// None when the runner could not run the operation at all.
    pub fn fs_error(&self) -> Option<&Error> {
        match self {
            OpError::Resolve { error, .. } | OpError::Fs(error) => Some(error),
            OpError::NotMounted | OpError::Mounted | OpError::NotOpen(_) => None,
        }
    }
}

/// What a read buffer holds before the read: bytes a read reports but does
/// not write show as this, not as zeros.
const POISON: u8 = 0xEE;

/// A handle the runner holds open.
#[derive(Clone, Debug)]
struct Handle {
    ino: Ino,
    /// The path it was opened by, for [`Op::Release`] by path.
    path: Option<String>,
}

/// Applies operations to the file system on one region: the interpreter.
pub struct Runner {
    region: Arc<dyn Region>,
    format: FormatOptions,
    /// What [`Op::Mount`] mounts with.
    mount: MountOptions,
    fs: Option<Fs>,
    handles: Vec<Handle>,
}

impl Runner {
    /// A runner on `region`, not mounted; [`Op::Mkfs`] formats it with
    /// `format`.
    pub fn new(region: Arc<dyn Region>, format: FormatOptions) -> Runner {
        Runner {
            region,
            format,
            mount: MountOptions::default(),
            fs: None,
            handles: Vec::new(),
        }
    }

    /// The same runner, [`Op::Mount`] mounting with `opts` instead of the
    /// defaults.
    pub fn mount_with(self, opts: MountOptions) -> Runner {
        Runner { mount: opts, ..self }
    }

    pub fn region(&self) -> &Arc<dyn Region> {
        &self.region
    }

    /// The mounted file system, for checks that look at everything.
    pub fn fs(&self) -> Option<&Fs> {
        self.fs.as_ref()
    }

    /// Applies `op`. Handles die with the mount: unmount, crash and
    /// remount release them all.
    pub fn apply(&mut self, op: &Op) -> Result<Observed, OpError> {
        match op {
            Op::Mount => return self.mount(self.mount),
            Op::MountReadOnly => return self.mount(MountOptions::default().read_only(true)),
            Op::MountUnprotected => return self.mount(MountOptions::default().meta_replicas(MetaReplicas::Skipped)),
            Op::Unmount => {
                self.handles.clear();
                self.fs.take().ok_or(OpError::NotMounted)?.unmount()?;
                return Ok(Observed::Done);
            }
            Op::Crash => {
                self.handles.clear();
                drop(self.fs.take().ok_or(OpError::NotMounted)?);
                return Ok(Observed::Done);
            }
            Op::Remount => {
                self.apply(&Op::Unmount)?;
                return self.apply(&Op::Mount);
            }
            Op::Mkfs => {
                if self.fs.is_some() {
                    return Err(OpError::Mounted);
                }
                Fs::format(self.region.clone(), &self.format)?;
                return Ok(Observed::Done);
            }
            _ => {}
        }
        let fs = self.fs.as_ref().ok_or(OpError::NotMounted)?;
        let handles = &mut self.handles;
        Ok(match op {
            Op::Create { path, perm, owner } => {
                let (d, n) = parent(fs, path)?;
                Observed::Attr(fs.create(d, n, *perm, owner.uid, owner.gid)?)
            }
            Op::Mkdir { path, perm, owner } => {
                let (d, n) = parent(fs, path)?;
                Observed::Attr(fs.mkdir(d, n, *perm, owner.uid, owner.gid)?)
            }
            Op::Mknod {
                path,
                mode,
                rdev,
                owner,
            } => {
                let (d, n) = parent(fs, path)?;
                Observed::Attr(fs.mknod(d, n, *mode, *rdev, owner.uid, owner.gid)?)
            }
            Op::Symlink { path, target, owner } => {
                let (d, n) = parent(fs, path)?;
                Observed::Attr(fs.symlink(d, n, target, owner.uid, owner.gid)?)
            }
            Op::Link { from, to } => {
                let i = ino(fs, handles, from)?;
                let (d, n) = parent(fs, to)?;
                Observed::Attr(fs.link(i, d, n)?)
            }
            Op::Relink { from, to } => {
                let i = ino(fs, handles, from)?;
                let (d, n) = parent(fs, to)?;
                Observed::Attr(fs.relink(i, d, n)?)
            }
            Op::Unlink(path) => {
                let (d, n) = parent(fs, path)?;
                fs.unlink(d, n)?;
                Observed::Done
            }
            Op::Rmdir(path) => {
                let (d, n) = parent(fs, path)?;
                fs.rmdir(d, n)?;
                Observed::Done
            }
            Op::Rename { from, to, flags } => {
                let (d1, n1) = parent(fs, from)?;
                let (d2, n2) = parent(fs, to)?;
                fs.rename(d1, n1, d2, n2, *flags)?;
                Observed::Done
            }
            Op::Stat(at) => Observed::Attr(fs.getattr(ino(fs, handles, at)?)?),
            Op::Readlink(at) => Observed::Data(fs.readlink(ino(fs, handles, at)?)?),
            Op::Readdir { path, offset, limit } => {
                let dir = resolve(fs, path)?.ino;
                let mut entries = Vec::new();
                fs.readdir(dir, *offset, |e| {
                    if entries.len() >= *limit {
                        return true;
                    }
                    entries.push(e);
                    false
                })?;
                Observed::Entries(entries)
            }
            Op::Statfs => Observed::Statfs(fs.statfs()),
            Op::Write { at, off, len, seed } => {
                Observed::Written(fs.write(ino(fs, handles, at)?, *off, &data(*seed, *len))?)
            }
            Op::MappedWrite { at, stores } => {
                let ino = ino(fs, handles, at)?;
                let size = fs.getattr(ino)?.size;
                let npages = size.div_ceil(novafs::PAGE_SIZE).max(1);
                let m = fs.mmap_atomic(ino, 0, npages as usize, true)?;
                for &(off, len, seed) in stores {
                    let end = off.saturating_add(len).min(size);
                    if off < end {
                        m.store(off as usize, &data(seed, len)[..(end - off) as usize])?;
                    }
                }
                m.sync()?;
                m.close()?;
                Observed::Done
            }
            Op::Read { at, off, len } => {
                let mut buf = vec![POISON; *len as usize];
                let n = fs.read(ino(fs, handles, at)?, *off, &mut buf)?;
                buf.truncate(n);
                Observed::Data(buf)
            }
            Op::Fallocate { at, mode, off, len } => {
                fs.fallocate(ino(fs, handles, at)?, *mode, *off, *len)?;
                Observed::Done
            }
            Op::Lseek { at, off, whence } => {
                let whence = match whence {
                    Whence::Data => SEEK_DATA,
                    Whence::Hole => SEEK_HOLE,
                };
                Observed::Offset(fs.lseek(ino(fs, handles, at)?, *off, whence)?)
            }
            Op::Fsync(at) => {
                fs.fsync(ino(fs, handles, at)?)?;
                Observed::Done
            }
            Op::Setattr { at, set } => Observed::Attr(fs.setattr(ino(fs, handles, at)?, set)?),
            Op::SetXattr { at, name, value, flags } => {
                fs.setxattr(ino(fs, handles, at)?, name, value, *flags)?;
                Observed::Done
            }
            Op::RemoveXattr { at, name } => {
                fs.removexattr(ino(fs, handles, at)?, name)?;
                Observed::Done
            }
            Op::GetXattr { at, name } => Observed::Data(fs.getxattr(ino(fs, handles, at)?, name)?),
            Op::ListXattr(at) => Observed::Data(fs.listxattr(ino(fs, handles, at)?)?),
            Op::Snapshot(name) => {
                fs.take_snapshot(name.as_bytes())?;
                Observed::Done
            }
            Op::DeleteSnapshot(name) => {
                fs.delete_snapshot(name.as_bytes())?;
                // The reclaimer's stores land before the next operation's:
                // a run replays the same sequence of stores (crashcheck).
                fs.wait_reclaimed();
                Observed::Done
            }
            Op::Open(at) => {
                let i = ino(fs, handles, at)?;
                let attr = fs.open_handle(i)?;
                let path = match at {
                    At::Path(p) => Some(p.clone()),
                    At::Handle(_) => None,
                };
                handles.push(Handle { ino: i, path });
                Observed::Attr(attr)
            }
            Op::Release(at) => {
                let found = match at {
                    At::Handle(i) => (*i < handles.len()).then_some(*i),
                    At::Path(p) => handles.iter().rposition(|h| h.path.as_deref() == Some(p.as_str())),
                };
                let h = handles.remove(found.ok_or_else(|| OpError::NotOpen(at.clone()))?);
                fs.release_handle(h.ino)?;
                Observed::Done
            }
            Op::Mount | Op::MountReadOnly | Op::MountUnprotected | Op::Unmount | Op::Crash | Op::Remount | Op::Mkfs => {
                unreachable!("handled above")
            }
        })
    }

    fn mount(&mut self, opts: MountOptions) -> Result<Observed, OpError> {
        if self.fs.is_some() {
            return Err(OpError::Mounted);
        }
        let fs = Fs::open(self.region.clone(), opts)?;
        let report = fs.mount_report().clone();
        self.fs = Some(fs);
        Ok(Observed::Mounted(report))
    }
}

/// The inode `at` names.
fn ino(fs: &Fs, handles: &[Handle], at: &At) -> Result<Ino, OpError> {
    match at {
        At::Path(p) => Ok(resolve(fs, p)?.ino),
        At::Handle(i) => handles
            .get(*i)
            .map(|h| h.ino)
            .ok_or_else(|| OpError::NotOpen(at.clone())),
    }
}

/// The directory a new or removed name `path` lives in, and the name.
fn parent<'p>(fs: &Fs, path: &'p str) -> Result<(Ino, &'p [u8]), OpError> {
    let (dir, name) = split(path);
    Ok((resolve(fs, dir)?.ino, name.as_bytes()))
}

fn resolve(fs: &Fs, path: &str) -> Result<Attr, OpError> {
    fs.resolve(path).map_err(|error| OpError::Resolve {
        path: path.to_string(),
        error,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{Whence, FILE_PERM};
    use novafs::FileType;

    fn mounted() -> Runner {
        let region: Arc<dyn Region> = Arc::new(pm::MemRegion::new(12 << 20));
        let format = FormatOptions::default().shards(1);
        let mut r = Runner::new(region, format);
        r.apply(&Op::Mkfs).unwrap();
        r.apply(&Op::Mount).unwrap();
        r
    }

    fn attr(o: Observed) -> Attr {
        match o {
            Observed::Attr(a) => a,
            other => panic!("not attributes: {other:?}"),
        }
    }

    fn bytes(o: Observed) -> Vec<u8> {
        match o {
            Observed::Data(d) => d,
            other => panic!("not data: {other:?}"),
        }
    }

    fn errno(r: Result<Observed, OpError>) -> i32 {
        r.unwrap_err().fs_error().expect("the file system's error").errno()
    }

    #[test]
    fn a_handle_keeps_an_unlinked_file_readable_until_it_is_released() {
        let mut r = mounted();
        r.apply(&Op::mkdir("/d")).unwrap();
        let made = attr(r.apply(&Op::create("/d/f")).unwrap());
        assert_eq!(made.kind, FileType::RegularFile);
        assert_eq!((made.perm, made.uid, made.gid), (FILE_PERM, 1000, 1000));
        assert!(matches!(
            r.apply(&Op::write("/d/f", 10, 100, 5)).unwrap(),
            Observed::Written(100)
        ));
        assert_eq!(attr(r.apply(&Op::Open("/d/f".into())).unwrap()).ino, made.ino);
        r.apply(&Op::Unlink("/d/f".into())).unwrap();
        assert_eq!(errno(r.apply(&Op::Stat("/d/f".into()))), libc::ENOENT);
        let read = Op::Read {
            at: At::Handle(0),
            off: 0,
            len: 200,
        };
        let mut want = vec![0; 10];
        want.extend(data(5, 100));
        assert_eq!(bytes(r.apply(&read).unwrap()), want);
        r.apply(&Op::Release(At::Handle(0))).unwrap();
        assert!(matches!(r.apply(&read), Err(OpError::NotOpen(At::Handle(0)))));
        let fs = r.fs().unwrap();
        assert!(matches!(fs.getattr(made.ino), Err(Error::NotFound)), "freed at release");
    }

    #[test]
    fn release_by_path_releases_the_last_handle_that_path_opened() {
        let mut r = mounted();
        let a = attr(r.apply(&Op::create("/a")).unwrap()).ino;
        let b = attr(r.apply(&Op::create("/b")).unwrap()).ino;
        for p in ["/a", "/b", "/a"] {
            r.apply(&Op::Open(p.into())).unwrap();
        }
        r.apply(&Op::Release("/a".into())).unwrap();
        // Handles #0 (/a) and #1 (/b) are left.
        let ino = |r: &mut Runner, h| attr(r.apply(&Op::Stat(At::Handle(h))).unwrap()).ino;
        assert_eq!((ino(&mut r, 0), ino(&mut r, 1)), (a, b));
        assert!(matches!(r.apply(&Op::Stat(At::Handle(2))), Err(OpError::NotOpen(_))));
        r.apply(&Op::Release("/a".into())).unwrap();
        let e = r.apply(&Op::Release("/a".into())).unwrap_err();
        assert_eq!(e.to_string(), "/a is not open");
        // A remount closes every handle.
        r.apply(&Op::Remount).unwrap();
        assert!(matches!(r.apply(&Op::Release(At::Handle(0))), Err(OpError::NotOpen(_))));
    }

    #[test]
    fn errors_carry_the_errno_and_the_path_that_did_not_resolve() {
        let mut r = mounted();
        r.apply(&Op::create("/f")).unwrap();
        let e = r.apply(&Op::create("/missing/g")).unwrap_err();
        assert_eq!(e.to_string(), "/missing: no such file or directory");
        assert_eq!(e.fs_error().map(Error::errno), Some(libc::ENOENT));
        assert_eq!(errno(r.apply(&Op::create("/f"))), libc::EEXIST);
        assert_eq!(errno(r.apply(&Op::create("/f/g"))), libc::ENOTDIR);
        assert_eq!(errno(r.apply(&Op::Rmdir("/f".into()))), libc::ENOTDIR);
        assert_eq!(errno(r.apply(&Op::Readlink("/f".into()))), libc::EINVAL);
        let seek = Op::Lseek {
            at: "/f".into(),
            off: 0,
            whence: Whence::Data,
        };
        assert_eq!(errno(r.apply(&seek)), libc::ENXIO);
    }

    #[test]
    fn reads_return_what_the_file_holds_and_holes_as_zeros() {
        let mut r = mounted();
        r.apply(&Op::create("/f")).unwrap();
        r.apply(&Op::write("/f", 8192, 10, 0)).unwrap();
        let read = |r: &mut Runner, off, len| {
            bytes(
                r.apply(&Op::Read {
                    at: "/f".into(),
                    off,
                    len,
                })
                .unwrap(),
            )
        };
        assert_eq!(
            read(&mut r, 0, 9000),
            vec![0; 8202],
            "a hole and written zeros, to the end"
        );
        assert!(read(&mut r, 8202, 10).is_empty());
        let hole = Op::Lseek {
            at: "/f".into(),
            off: 0,
            whence: Whence::Data,
        };
        assert!(
            matches!(r.apply(&hole).unwrap(), Observed::Offset(8192)),
            "written zeros are data"
        );
        assert_eq!(data(0, 3), vec![0; 3]);
        assert_ne!(data(1, 16), data(2, 16));
        assert_eq!(data(1, 16)[..5], data(1, 5)[..]);
    }

    #[test]
    fn readdir_pages_through_a_directory_by_offset_and_limit() {
        let mut r = mounted();
        r.apply(&Op::mkdir("/d")).unwrap();
        for n in ["x", "y", "z"] {
            r.apply(&Op::create(format!("/d/{n}"))).unwrap();
        }
        let mut names = Vec::new();
        let mut offset = 0;
        loop {
            let page = Op::Readdir {
                path: "/d".into(),
                offset,
                limit: 2,
            };
            let Observed::Entries(es) = r.apply(&page).unwrap() else {
                panic!("not entries")
            };
            let Some(last) = es.last() else { break };
            assert!(es.len() <= 2);
            offset = last.next_offset;
            names.extend(es.into_iter().map(|e| String::from_utf8(e.name).unwrap()));
        }
        assert_eq!(names, [".", "..", "x", "y", "z"]);
    }

    #[test]
    fn the_image_life_cycle_refuses_what_the_state_does_not_allow() {
        let region: Arc<dyn Region> = Arc::new(pm::MemRegion::new(16 << 20));
        let mut r = Runner::new(region, FormatOptions::default());
        assert!(matches!(r.apply(&Op::create("/a")), Err(OpError::NotMounted)));
        assert!(matches!(r.apply(&Op::Unmount), Err(OpError::NotMounted)));
        assert_eq!(errno(r.apply(&Op::Mount)), libc::EIO, "not formatted yet");
        r.apply(&Op::Mkfs).unwrap();
        r.apply(&Op::Mount).unwrap();
        assert!(matches!(r.apply(&Op::Mount), Err(OpError::Mounted)));
        assert!(matches!(r.apply(&Op::Mkfs), Err(OpError::Mounted)));
        r.apply(&Op::create("/a")).unwrap();
        let Observed::Mounted(rep) = r.apply(&Op::Remount).unwrap() else {
            panic!("no mount report")
        };
        assert!(rep.clean);
        r.apply(&Op::Crash).unwrap();
        let Observed::Mounted(rep) = r.apply(&Op::MountReadOnly).unwrap() else {
            panic!("no mount report")
        };
        assert!(!rep.clean, "a crash leaves the image to recover");
        assert_eq!(errno(r.apply(&Op::create("/b"))), libc::EROFS);
        assert!(r.apply(&Op::Stat("/a".into())).is_ok());
        r.apply(&Op::Unmount).unwrap();
        r.apply(&Op::Mkfs).unwrap();
        r.apply(&Op::Mount).unwrap();
        assert_eq!(
            errno(r.apply(&Op::Stat("/a".into()))),
            libc::ENOENT,
            "mkfs made a new file system"
        );
    }
}
