//! The reference model of `model.rs`: an in-memory tree with the POSIX
//! rules novafs must follow, the result it expects of each operation
//! (values, attributes, exact errnos) and the step that produced it.

use std::collections::BTreeMap;
use std::fmt;

use novafs::MAX_FILE_SIZE;
use novafs::{FileType, RENAME_EXCHANGE, RENAME_NOREPLACE};
use novafs_ops::{self as op, At, Op, Owner};

mod steps;

pub use steps::*;

pub const PAGE: u64 = 4096;
pub const NAME_MAX: usize = 255;
pub const POOL: [&str; 6] = ["a", "b", "c", "d", "d1", "d2"];
/// Owner of the nodes the model makes other than files.
pub const ROOT_OWNER: Owner = Owner { uid: 0, gid: 0 };

/// A model inode number; the harness maps it to the real one.
pub type Id = u64;
pub const ROOT: Id = 1;

// ---------------------------------------------------------------------------
// The reference model.

/// Sparse file contents: absent pages read as zeros.
#[derive(Clone, Default, PartialEq)]
pub struct Bytes {
    pub size: u64,
    pub pages: BTreeMap<u64, Vec<u8>>,
}

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Bytes(size {}, {} pages)", self.size, self.pages.len())
    }
}

impl Bytes {
    /// Applies `f(page, lo, hi)` to the byte range `[off, end)` page by page.
    pub fn each_page(off: u64, end: u64, mut f: impl FnMut(u64, usize, usize)) {
        let mut pos = off;
        while pos < end {
            let pg = pos / PAGE;
            let hi = end.min((pg + 1) * PAGE);
            f(pg, (pos - pg * PAGE) as usize, (hi - pg * PAGE) as usize);
            pos = hi;
        }
    }

    pub fn write(&mut self, off: u64, data: &[u8]) {
        let end = off + data.len() as u64;
        Self::each_page(off, end, |pg, lo, hi| {
            let page = self.pages.entry(pg).or_insert_with(|| vec![0; PAGE as usize]);
            let src = (pg * PAGE + lo as u64 - off) as usize;
            page[lo..hi].copy_from_slice(&data[src..src + hi - lo]);
        });
        self.size = self.size.max(end);
    }

    pub fn read(&self, off: u64, len: usize) -> Vec<u8> {
        if off >= self.size {
            return Vec::new();
        }
        let n = (self.size - off).min(len as u64);
        let mut out = vec![0u8; n as usize];
        for (&pg, page) in self.pages.range(off / PAGE..(off + n).div_ceil(PAGE)) {
            let lo = (pg * PAGE).max(off);
            let hi = ((pg + 1) * PAGE).min(off + n);
            out[(lo - off) as usize..(hi - off) as usize]
                .copy_from_slice(&page[(lo - pg * PAGE) as usize..(hi - pg * PAGE) as usize]);
        }
        out
    }

    /// Zeroes `[off, end)`: what a hole punch leaves.
    pub fn zero(&mut self, off: u64, end: u64) {
        let pages = &mut self.pages;
        Self::each_page(off, end, |pg, lo, hi| {
            if let Some(p) = pages.get_mut(&pg) {
                p[lo..hi].fill(0);
            }
        });
    }

    pub fn set_size(&mut self, size: u64) {
        if size < self.size {
            self.pages.split_off(&size.div_ceil(PAGE));
            if !size.is_multiple_of(PAGE) {
                if let Some(p) = self.pages.get_mut(&(size / PAGE)) {
                    p[(size % PAGE) as usize..].fill(0);
                }
            }
        }
        self.size = size;
    }

    /// The first non-zero byte in `[off, size)`.
    pub fn next_nonzero(&self, off: u64) -> Option<u64> {
        for (&pg, page) in self.pages.range(off / PAGE..) {
            let start = (pg * PAGE).max(off);
            let from = (start - pg * PAGE) as usize;
            if let Some(i) = page[from..].iter().position(|&b| b != 0) {
                let at = start + i as u64;
                return (at < self.size).then_some(at);
            }
        }
        None
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    File(Bytes),
    Dir(BTreeMap<String, Id>),
    Symlink(Vec<u8>),
    Special(FileType, u64),
}

#[derive(Clone, Debug)]
pub struct Node {
    pub body: Body,
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    /// Known only after a setattr that set it and until the next change
    /// that may move it.
    pub mtime: Option<i64>,
    /// Names of a non-directory.
    pub links: u32,
    /// Parent of a directory.
    pub parent: Id,
    /// Extended attributes.
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Node {
    pub fn kind(&self) -> FileType {
        match &self.body {
            Body::File(_) => FileType::RegularFile,
            Body::Dir(_) => FileType::Directory,
            Body::Symlink(_) => FileType::Symlink,
            Body::Special(k, _) => *k,
        }
    }
    pub fn children(&self) -> Option<&BTreeMap<String, Id>> {
        match &self.body {
            Body::Dir(c) => Some(c),
            _ => None,
        }
    }
    pub fn is_dir(&self) -> bool {
        self.children().is_some()
    }
}

/// What a remount step expects.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Remount {
    /// Unmounted cleanly (else dropped: a crash).
    pub clean: bool,
    /// Mounted read-only once in between.
    pub read_only: bool,
    /// Unlinked-but-open files that the unmount or the crash scan reclaims.
    pub orphans: u64,
    /// Live inodes before that, root included: what a crash scan visits.
    pub live: u64,
    /// Snapshots exist: every mount scans, to rebuild their manifests.
    pub snapshots: bool,
}

/// What the last transition must return.
#[derive(Clone, Debug, PartialEq)]
pub enum Expect {
    /// Before the first transition.
    None,
    /// Success with no value.
    Ok,
    /// Success returning (or producing) this node's attributes.
    Node(Id),
    /// `write` wrote this many bytes.
    Written(usize),
    /// `read` or `readlink` returned these bytes.
    Data(Vec<u8>),
    /// An lseek on this file; checked against its bytes.
    Seek(Id),
    /// An open handle: kept when the node is a regular file, else released
    /// at once.
    Opened(Id, bool),
    /// A full readdir of this directory.
    Listing(Id),
    Statfs,
    /// A remount, checked as [`Remount`] says.
    Remounted(Remount),
    /// Any of these errnos.
    Err(Vec<i32>),
    /// The harness does not run this one: data calls on a symlink, which
    /// the library allows (targets are stored as data) but no kernel sends.
    Skip,
}

#[derive(Clone, Debug)]
pub struct Model {
    pub nodes: BTreeMap<Id, Node>,
    pub next_id: Id,
    /// Open handles, by node.
    pub handles: Vec<Id>,
    pub expect: Expect,
    /// Nodes the last transition freed.
    pub freed: Vec<Id>,
    /// Names of the live snapshots, oldest first.
    pub snapshots: Vec<String>,
}

pub fn err<T>(e: i32) -> Result<T, Expect> {
    Err(Expect::Err(vec![e]))
}

/// What listxattr gives for `n`: every name, NUL-terminated, in byte order.
pub fn xattr_list(n: &Node) -> Vec<u8> {
    n.xattrs.keys().flat_map(|k| k.iter().copied().chain([0])).collect()
}

pub fn dots(name: &str) -> bool {
    name == "." || name == ".."
}

/// "/d" and "x" → "/d/x".
pub fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

impl Model {
    pub fn new() -> Model {
        let root = Node {
            body: Body::Dir(BTreeMap::new()),
            perm: 0o755,
            uid: 0,
            gid: 0,
            mtime: None,
            links: 0,
            parent: ROOT,
            xattrs: BTreeMap::new(),
        };
        Model {
            nodes: BTreeMap::from([(ROOT, root)]),
            next_id: ROOT + 1,
            handles: Vec::new(),
            expect: Expect::None,
            freed: Vec::new(),
            snapshots: Vec::new(),
        }
    }

    pub fn node(&self, id: Id) -> &Node {
        &self.nodes[&id]
    }

    pub fn node_mut(&mut self, id: Id) -> &mut Node {
        self.nodes.get_mut(&id).unwrap()
    }

    pub fn children_mut(&mut self, id: Id) -> &mut BTreeMap<String, Id> {
        match &mut self.node_mut(id).body {
            Body::Dir(c) => c,
            _ => unreachable!("not a directory"),
        }
    }

    pub fn nlink(&self, id: Id) -> u32 {
        let n = self.node(id);
        match &n.body {
            Body::Dir(c) => 2 + c.values().filter(|&&c| self.node(c).is_dir()).count() as u32,
            _ => n.links,
        }
    }

    /// `lookup(dir, name)` as novafs orders its checks.
    pub fn lookup(&self, dir: Id, name: &str) -> Result<Id, Expect> {
        if name.len() > NAME_MAX {
            return err(libc::ENAMETOOLONG);
        }
        let Some(children) = self.node(dir).children() else {
            return err(libc::ENOTDIR);
        };
        match name {
            "." => Ok(dir),
            ".." => Ok(self.node(dir).parent),
            _ => children.get(name).copied().ok_or(Expect::Err(vec![libc::ENOENT])),
        }
    }

    /// A path, one lookup per component from the root.
    pub fn resolve(&self, path: &str) -> Result<Id, Expect> {
        path.split('/')
            .filter(|c| !c.is_empty())
            .try_fold(ROOT, |d, c| self.lookup(d, c))
    }

    pub fn target(&self, at: &At) -> Result<Id, Expect> {
        match at {
            At::Path(p) => self.resolve(p),
            At::Handle(i) => Ok(self.handles[*i]),
        }
    }

    /// True when directory `dir` is `ancestor` or lies below it.
    pub fn within(&self, mut dir: Id, ancestor: Id) -> bool {
        loop {
            if dir == ancestor {
                return true;
            }
            if dir == ROOT {
                return false;
            }
            dir = self.node(dir).parent;
        }
    }

    pub fn touch(&mut self, id: Id) {
        self.node_mut(id).mtime = None;
    }

    /// Drops one link of `id`, freeing it when nothing holds it any more.
    pub fn drop_link(&mut self, id: Id) {
        let n = self.node_mut(id);
        if n.is_dir() {
            self.nodes.remove(&id);
            self.freed.push(id);
            return;
        }
        n.links -= 1;
        if n.links == 0 && !self.handles.contains(&id) {
            self.nodes.remove(&id);
            self.freed.push(id);
        }
    }

    pub fn orphans(&self) -> Vec<Id> {
        let mut v: Vec<Id> = self
            .nodes
            .iter()
            .filter(|(_, n)| !n.is_dir() && n.links == 0)
            .map(|(&id, _)| id)
            .collect();
        v.sort_unstable();
        v
    }

    /// Paths of every reachable directory, "/" first.
    pub fn dir_paths(&self) -> Vec<String> {
        let mut out = vec!["/".to_string()];
        let mut i = 0;
        while i < out.len() {
            let id = self.resolve(&out[i]).unwrap();
            for (name, &c) in self.node(id).children().unwrap() {
                if self.node(c).is_dir() {
                    out.push(join(&out[i], name));
                }
            }
            i += 1;
        }
        out
    }

    /// Every name in the tree as (parent path, name, node).
    pub fn entries(&self) -> Vec<(String, String, Id)> {
        let mut out = Vec::new();
        for p in self.dir_paths() {
            let id = self.resolve(&p).unwrap();
            for (name, &c) in self.node(id).children().unwrap() {
                out.push((p.clone(), name.clone(), c));
            }
        }
        out
    }

    pub fn add(&mut self, parent: Id, name: &str, body: Body, perm: u32, owner: Owner) -> Id {
        let id = self.next_id;
        self.next_id += 1;
        let dir = matches!(body, Body::Dir(_));
        self.nodes.insert(
            id,
            Node {
                body,
                perm: perm & 0o7777,
                uid: owner.uid,
                gid: owner.gid,
                mtime: None,
                links: u32::from(!dir),
                parent,
                xattrs: BTreeMap::new(),
            },
        );
        self.children_mut(parent).insert(name.to_string(), id);
        self.touch(parent);
        id
    }

    pub fn step(&mut self, step: &Step) -> Expect {
        self.freed.clear();
        match self.transition(step) {
            Ok(e) | Err(e) => e,
        }
    }

    pub fn op(&mut self, op: &Op) -> Result<Expect, Expect> {
        Ok(match op {
            Op::Create { path, perm, owner } => self.make(path, Body::File(Bytes::default()), *perm, *owner, None)?,
            Op::Mkdir { path, perm, owner } => self.make(path, Body::Dir(BTreeMap::new()), *perm, *owner, None)?,
            Op::Mknod {
                path,
                mode,
                rdev,
                owner,
            } => {
                let kind = FileType::from_mode(*mode).unwrap();
                self.make(path, Body::Special(kind, *rdev), *mode, *owner, None)?
            }
            Op::Symlink { path, target, owner } => {
                let body = Body::Symlink(target.clone());
                self.make(path, body, 0o777, *owner, Some(target))?
            }
            Op::Readlink(at) => match &self.node(self.target(at)?).body {
                Body::Symlink(target) => Expect::Data(target.clone()),
                _ => return err(libc::EINVAL),
            },
            Op::Link { from, to } | Op::Relink { from, to } => {
                let relink = matches!(op, Op::Relink { .. });
                let src = self.target(from)?;
                let (dir, name) = op::split(to);
                let parent = self.resolve(dir)?;
                let mut errs = Vec::new();
                if name.len() > NAME_MAX {
                    errs.push(libc::ENAMETOOLONG);
                }
                if dots(name) {
                    errs.extend([libc::EINVAL, libc::EEXIST]);
                }
                if self.node(src).is_dir() {
                    errs.push(libc::EPERM);
                } else if (self.node(src).links == 0) != relink || (relink && !self.handles.contains(&src)) {
                    errs.push(libc::ENOENT);
                }
                match self.node(parent).children() {
                    None => errs.push(libc::ENOTDIR),
                    Some(c) if c.contains_key(name) => errs.push(libc::EEXIST),
                    Some(_) => {}
                }
                if !errs.is_empty() {
                    return Err(Expect::Err(errs));
                }
                self.node_mut(src).links += 1;
                self.children_mut(parent).insert(name.to_string(), src);
                self.touch(parent);
                Expect::Node(src)
            }
            Op::Unlink(path) => self.remove(path, false)?,
            Op::Rmdir(path) => self.remove(path, true)?,
            Op::Rename { from, to, flags } => self.rename(from, to, *flags)?,
            Op::Stat(at) => Expect::Node(self.target(at)?),
            Op::Write { at, off, len, seed } => {
                let id = self.target(at)?;
                let Body::File(bytes) = self.file_body(id)? else {
                    return Ok(Expect::Skip);
                };
                if *len > 0 {
                    if off + len > MAX_FILE_SIZE {
                        return err(libc::EFBIG);
                    }
                    bytes.write(*off, &op::data(*seed, *len));
                    self.touch(id);
                }
                Expect::Written(*len as usize)
            }
            Op::MappedWrite { at, stores } => {
                let id = self.target(at)?;
                let Body::File(bytes) = self.file_body(id)? else {
                    return Ok(Expect::Skip);
                };
                let size = bytes.size;
                let mut stored = false;
                for &(off, len, seed) in stores {
                    let end = off.saturating_add(len).min(size);
                    if off < end {
                        bytes.write(off, &op::data(seed, len)[..(end - off) as usize]);
                        stored = true;
                    }
                }
                if stored {
                    self.touch(id);
                }
                Expect::Ok
            }
            Op::Read { at, off, len } => {
                let id = self.target(at)?;
                let Body::File(bytes) = self.file_body(id)? else {
                    return Ok(Expect::Skip);
                };
                Expect::Data(bytes.read(*off, *len as usize))
            }
            Op::Setattr { at, set } => {
                let id = self.target(at)?;
                if let Some(size) = set.size {
                    match &mut self.node_mut(id).body {
                        Body::File(_) if size > MAX_FILE_SIZE => {
                            return Err(Expect::Err(vec![libc::EFBIG, libc::EINVAL]))
                        }
                        Body::File(bytes) => {
                            if bytes.size != size {
                                bytes.set_size(size);
                                self.touch(id);
                            }
                        }
                        Body::Dir(_) => return err(libc::EISDIR),
                        _ => return err(libc::EINVAL),
                    }
                }
                let n = self.node_mut(id);
                if let Some(m) = set.mode {
                    n.perm = m & 0o7777;
                }
                n.uid = set.uid.unwrap_or(n.uid);
                n.gid = set.gid.unwrap_or(n.gid);
                if set.mtime.is_some() {
                    n.mtime = set.mtime;
                }
                Expect::Node(id)
            }
            Op::Fallocate { at, mode, off, len } => {
                let id = self.target(at)?;
                let Body::File(bytes) = self.file_body(id)? else {
                    return Ok(Expect::Skip);
                };
                let mut errs = Vec::new();
                if off + len > MAX_FILE_SIZE {
                    errs.push(libc::EFBIG);
                }
                if *len == 0 {
                    errs.push(libc::EINVAL);
                }
                if !errs.is_empty() {
                    return Err(Expect::Err(errs));
                }
                match *mode {
                    0 => bytes.size = bytes.size.max(off + len),
                    1 => {}
                    _ => bytes.zero(*off, off + len),
                }
                self.touch(id);
                Expect::Ok
            }
            Op::Lseek { at, .. } => {
                let id = self.target(at)?;
                match &self.node(id).body {
                    Body::File(_) => Expect::Seek(id),
                    Body::Dir(_) => return Err(Expect::Err(vec![libc::EISDIR, libc::EINVAL])),
                    Body::Symlink(_) => Expect::Skip,
                    Body::Special(..) => return err(libc::EINVAL),
                }
            }
            Op::Fsync(at) => {
                self.target(at)?;
                Expect::Ok
            }
            Op::Open(at) => {
                let id = self.target(at)?;
                let keep = matches!(self.node(id).body, Body::File(_));
                if keep {
                    self.handles.push(id);
                }
                Expect::Opened(id, keep)
            }
            Op::Release(at) => {
                let i = at.handle().expect("the model releases by handle");
                let id = self.handles.remove(i);
                if self.node(id).links == 0 && !self.handles.contains(&id) {
                    self.nodes.remove(&id);
                    self.freed.push(id);
                }
                Expect::Ok
            }
            Op::Readdir { path, .. } => {
                let id = self.resolve(path)?;
                if !self.node(id).is_dir() {
                    return err(libc::ENOTDIR);
                }
                Expect::Listing(id)
            }
            Op::Statfs => Expect::Statfs,
            Op::SetXattr { at, name, value, flags } => {
                let id = self.target(at)?;
                if value.len() > 65_536 && !name.is_empty() && name.len() <= 255 {
                    return err(libc::E2BIG);
                }
                let present = self.xattr_checks(id, name, true)?;
                match (*flags, present) {
                    (novafs::XATTR_CREATE, true) => return err(libc::EEXIST),
                    (novafs::XATTR_REPLACE, false) => return err(libc::ENODATA),
                    _ => {}
                }
                self.node_mut(id).xattrs.insert(name.clone(), value.clone());
                Expect::Ok
            }
            Op::RemoveXattr { at, name } => {
                let id = self.target(at)?;
                if !self.xattr_checks(id, name, true)? {
                    return err(libc::ENODATA);
                }
                self.node_mut(id).xattrs.remove(name);
                Expect::Ok
            }
            Op::GetXattr { at, name } => {
                let id = self.target(at)?;
                self.xattr_checks(id, name, false)?;
                match self.node(id).xattrs.get(name) {
                    Some(v) => Expect::Data(v.clone()),
                    None => return err(libc::ENODATA),
                }
            }
            Op::ListXattr(at) => Expect::Data(xattr_list(self.node(self.target(at)?))),
            Op::Snapshot(name) => {
                if self.snapshots.contains(name) {
                    return err(libc::EEXIST);
                }
                self.snapshots.push(name.clone());
                Expect::Ok
            }
            Op::DeleteSnapshot(name) => {
                let i = self.snapshots.iter().position(|n| n == name);
                self.snapshots.remove(i.ok_or(Expect::Err(vec![libc::ENOENT]))?);
                Expect::Ok
            }
            Op::Mount | Op::MountReadOnly | Op::MountUnprotected | Op::Unmount | Op::Crash | Op::Remount | Op::Mkfs => {
                unreachable!("the model remounts by Step::Remount, Step::Crash and Step::ReadOnly")
            }
        })
    }

    /// The name checks of the xattr calls, in novafs's order: ERANGE for
    /// an empty or long name, EOPNOTSUPP for another namespace, EINVAL
    /// for a bare prefix; `user.` only on files and directories (EPERM to
    /// change, ENODATA to read). Returns whether the name has a value.
    pub fn xattr_checks(&self, id: Id, name: &[u8], changing: bool) -> Result<bool, Expect> {
        if name.is_empty() || name.len() > 255 {
            return err(libc::ERANGE);
        }
        let Some(prefix) = [&b"user."[..], b"trusted.", b"security."]
            .into_iter()
            .find(|p| name.starts_with(p))
        else {
            return err(libc::EOPNOTSUPP);
        };
        if name.len() == prefix.len() {
            return err(libc::EINVAL);
        }
        let n = self.node(id);
        if prefix == b"user." && !matches!(n.body, Body::File(_) | Body::Dir(_)) {
            return err(if changing { libc::EPERM } else { libc::ENODATA });
        }
        Ok(n.xattrs.contains_key(name))
    }

    pub fn transition(&mut self, step: &Step) -> Result<Expect, Expect> {
        Ok(match step {
            Step::Op(op) => self.op(op)?,
            Step::WriteMany { at, seed, count } => {
                let id = self.target(at)?;
                let Body::File(bytes) = self.file_body(id)? else {
                    return Ok(Expect::Skip);
                };
                for (off, len, seed) in many_writes(*seed, *count) {
                    bytes.write(off, &op::data(seed, len));
                }
                self.touch(id);
                Expect::Ok
            }
            Step::DirChurn { dir, base, count } => {
                let parent = self.resolve(dir)?;
                if !self.node(parent).is_dir() {
                    return err(libc::ENOTDIR);
                }
                for i in 0..*count {
                    let name = churn_name(*base, i);
                    if self.node(parent).children().unwrap().contains_key(&name) {
                        return err(libc::EEXIST);
                    }
                    let id = self.add(parent, &name, Body::File(Bytes::default()), 0o600, ROOT_OWNER);
                    if i % 8 != 0 {
                        self.children_mut(parent).remove(&name);
                        self.drop_link(id);
                    }
                }
                Expect::Ok
            }
            Step::Remount | Step::Crash | Step::ReadOnly { .. } => {
                // Handles die with the mount; orphans are reclaimed either
                // by the clean unmount or by the crash scan.
                let live = self.nodes.len() as u64;
                self.handles.clear();
                let orphans = self.orphans();
                for &id in &orphans {
                    self.nodes.remove(&id);
                    self.freed.push(id);
                }
                Expect::Remounted(Remount {
                    clean: matches!(step, Step::Remount | Step::ReadOnly { crash: false }),
                    read_only: matches!(step, Step::ReadOnly { .. }),
                    orphans: orphans.len() as u64,
                    live,
                    snapshots: !self.snapshots.is_empty(),
                })
            }
        })
    }

    /// The data of a file node, or the errno its type gives (directories
    /// EISDIR, special files EINVAL). Symlinks return their node to skip.
    pub fn file_body(&mut self, id: Id) -> Result<&mut Body, Expect> {
        match &self.node(id).body {
            Body::Dir(_) => err(libc::EISDIR),
            Body::Special(..) => err(libc::EINVAL),
            _ => Ok(&mut self.node_mut(id).body),
        }
    }

    pub fn make(
        &mut self,
        path: &str,
        body: Body,
        perm: u32,
        owner: Owner,
        target: Option<&Vec<u8>>,
    ) -> Result<Expect, Expect> {
        let (dir, name) = op::split(path);
        let parent = self.resolve(dir)?;
        let mut errs = Vec::new();
        if let Some(t) = target {
            if t.is_empty() {
                errs.push(libc::EINVAL);
            }
            if t.len() > 4095 {
                errs.push(libc::ENAMETOOLONG);
            }
        }
        if name.len() > NAME_MAX {
            errs.push(libc::ENAMETOOLONG);
        }
        if dots(name) {
            errs.extend([libc::EINVAL, libc::EEXIST]);
        }
        match self.node(parent).children() {
            None => errs.push(libc::ENOTDIR),
            Some(c) if c.contains_key(name) => errs.push(libc::EEXIST),
            Some(_) => {}
        }
        if !errs.is_empty() {
            return Err(Expect::Err(errs));
        }
        Ok(Expect::Node(self.add(parent, name, body, perm, owner)))
    }

    pub fn remove(&mut self, path: &str, want_dir: bool) -> Result<Expect, Expect> {
        let (dir, name) = op::split(path);
        let parent = self.resolve(dir)?;
        if dots(name) {
            return Err(Expect::Err(if want_dir {
                vec![libc::EINVAL, libc::EBUSY, libc::ENOTEMPTY]
            } else {
                vec![libc::EISDIR, libc::EINVAL, libc::EPERM]
            }));
        }
        if name.len() > NAME_MAX {
            return err(libc::ENAMETOOLONG);
        }
        let Some(children) = self.node(parent).children() else {
            return err(libc::ENOTDIR);
        };
        let Some(&id) = children.get(name) else {
            return err(libc::ENOENT);
        };
        let child = self.node(id);
        match (want_dir, child.children()) {
            (false, Some(_)) => return err(libc::EISDIR),
            (true, None) => return err(libc::ENOTDIR),
            (true, Some(c)) if !c.is_empty() => return err(libc::ENOTEMPTY),
            _ => {}
        }
        self.children_mut(parent).remove(name);
        self.touch(parent);
        self.drop_link(id);
        Ok(Expect::Ok)
    }

    pub fn rename(&mut self, from: &str, to: &str, flags: u32) -> Result<Expect, Expect> {
        let ((from, name), (to, newname)) = (op::split(from), op::split(to));
        let sp = self.resolve(from)?;
        let dp = self.resolve(to)?;
        let exchange = flags & RENAME_EXCHANGE != 0;
        // Stage 1: names and parents.
        let mut errs = Vec::new();
        if dots(name) || dots(newname) {
            errs.extend([libc::EINVAL, libc::EBUSY]);
        }
        if name.len() > NAME_MAX || newname.len() > NAME_MAX {
            errs.push(libc::ENAMETOOLONG);
        }
        let src = match self.node(sp).children() {
            None => {
                errs.push(libc::ENOTDIR);
                None
            }
            Some(c) => {
                let s = c.get(name).copied();
                if s.is_none() {
                    errs.push(libc::ENOENT);
                }
                s
            }
        };
        let Some(dchildren) = self.node(dp).children() else {
            errs.push(libc::ENOTDIR);
            return Err(Expect::Err(errs));
        };
        let dst = dchildren.get(newname).copied();
        let Some(src) = src.filter(|_| errs.is_empty()) else {
            return Err(Expect::Err(errs));
        };
        // Stage 2: the flags.
        if flags & RENAME_NOREPLACE != 0 && dst.is_some() {
            return err(libc::EEXIST);
        }
        if exchange && dst.is_none() {
            return err(libc::ENOENT);
        }
        if dst == Some(src) {
            return Ok(Expect::Ok); // Two names of one inode: nothing happens.
        }
        // Stage 3: types and loops.
        let src_dir = self.node(src).is_dir();
        let dst_dir = dst.is_some_and(|d| self.node(d).is_dir());
        if let Some(d) = dst.filter(|_| !exchange) {
            if src_dir && !dst_dir {
                errs.push(libc::ENOTDIR);
            }
            if !src_dir && dst_dir {
                errs.push(libc::EISDIR);
            }
            if dst_dir && !self.node(d).children().unwrap().is_empty() {
                errs.push(libc::ENOTEMPTY);
            }
        }
        if src_dir && self.within(dp, src) {
            errs.push(libc::EINVAL);
        }
        if exchange && dst_dir && self.within(sp, dst.unwrap()) {
            errs.push(libc::EINVAL);
        }
        if !errs.is_empty() {
            return Err(Expect::Err(errs));
        }
        let cross = sp != dp;
        if exchange {
            let d = dst.unwrap();
            self.children_mut(sp).insert(name.to_string(), d);
            self.children_mut(dp).insert(newname.to_string(), src);
            if cross && dst_dir {
                self.node_mut(d).parent = sp;
                self.touch(d); // Its ".." changed.
            }
        } else {
            self.children_mut(sp).remove(name);
            if let Some(d) = dst {
                self.drop_link(d);
            }
            self.children_mut(dp).insert(newname.to_string(), src);
        }
        if cross && src_dir {
            self.node_mut(src).parent = dp;
            self.touch(src);
        }
        self.touch(sp);
        self.touch(dp);
        Ok(Expect::Ok)
    }
}
