//! Model-based property test of the POSIX surface (DESIGN.md §4): random
//! operation sequences run on novafs and on an in-memory reference tree, and
//! every result is compared — values, attributes and exact errnos. Clean and
//! crash remounts are part of the sequence; after each one the whole tree is
//! compared, the free-space count is checked for leaks and fsck must be clean.
//!
//! The operations are novafs's own vocabulary ([`novafs_ops::Op`]), run on
//! novafs by its one interpreter ([`novafs_ops::Runner`]); the reference
//! model is this file's own. The checks after each step read the whole
//! tree through `Fs` by inode number.
//!
//! Where POSIX lets several errors apply to one call, the model accepts any
//! of them; otherwise it expects exactly one. Scale with `PROPTEST_CASES`.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use common::assert_fsck_clean;
use novafs::MAX_FILE_SIZE;
use novafs::{
    Attr, DirEntry, Error, FileType, FormatOptions, Fs, Ino, MountReport, SetAttr, RENAME_EXCHANGE, RENAME_NOREPLACE,
    ROOT_INO, SEEK_DATA,
};
use novafs_ops::{self as op, At, Observed, Op, OpError, Owner, Runner, Whence};
use pm::MemRegion;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::Union;
use proptest::test_runner::Config;
use proptest_state_machine::{prop_state_machine, ReferenceStateMachine, StateMachineTest};

const PAGE: u64 = 4096;
const NAME_MAX: usize = 255;
const POOL: [&str; 6] = ["a", "b", "c", "d", "d1", "d2"];
/// Owner of the nodes the model makes other than files.
const ROOT_OWNER: Owner = Owner { uid: 0, gid: 0 };

/// A model inode number; the harness maps it to the real one.
type Id = u64;
const ROOT: Id = 1;

// ---------------------------------------------------------------------------
// The reference model.

/// Sparse file contents: absent pages read as zeros.
#[derive(Clone, Default, PartialEq)]
struct Bytes {
    size: u64,
    pages: BTreeMap<u64, Vec<u8>>,
}

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Bytes(size {}, {} pages)", self.size, self.pages.len())
    }
}

impl Bytes {
    /// Applies `f(page, lo, hi)` to the byte range `[off, end)` page by page.
    fn each_page(off: u64, end: u64, mut f: impl FnMut(u64, usize, usize)) {
        let mut pos = off;
        while pos < end {
            let pg = pos / PAGE;
            let hi = end.min((pg + 1) * PAGE);
            f(pg, (pos - pg * PAGE) as usize, (hi - pg * PAGE) as usize);
            pos = hi;
        }
    }

    fn write(&mut self, off: u64, data: &[u8]) {
        let end = off + data.len() as u64;
        Self::each_page(off, end, |pg, lo, hi| {
            let page = self.pages.entry(pg).or_insert_with(|| vec![0; PAGE as usize]);
            let src = (pg * PAGE + lo as u64 - off) as usize;
            page[lo..hi].copy_from_slice(&data[src..src + hi - lo]);
        });
        self.size = self.size.max(end);
    }

    fn read(&self, off: u64, len: usize) -> Vec<u8> {
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
    fn zero(&mut self, off: u64, end: u64) {
        let pages = &mut self.pages;
        Self::each_page(off, end, |pg, lo, hi| {
            if let Some(p) = pages.get_mut(&pg) {
                p[lo..hi].fill(0);
            }
        });
    }

    fn set_size(&mut self, size: u64) {
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
    fn next_nonzero(&self, off: u64) -> Option<u64> {
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
enum Body {
    File(Bytes),
    Dir(BTreeMap<String, Id>),
    Symlink(Vec<u8>),
    Special(FileType, u64),
}

#[derive(Clone, Debug)]
struct Node {
    body: Body,
    perm: u32,
    uid: u32,
    gid: u32,
    /// Known only after a setattr that set it and until the next change
    /// that may move it.
    mtime: Option<i64>,
    /// Names of a non-directory.
    links: u32,
    /// Parent of a directory.
    parent: Id,
    /// Extended attributes.
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Node {
    fn kind(&self) -> FileType {
        match &self.body {
            Body::File(_) => FileType::RegularFile,
            Body::Dir(_) => FileType::Directory,
            Body::Symlink(_) => FileType::Symlink,
            Body::Special(k, _) => *k,
        }
    }
    fn children(&self) -> Option<&BTreeMap<String, Id>> {
        match &self.body {
            Body::Dir(c) => Some(c),
            _ => None,
        }
    }
    fn is_dir(&self) -> bool {
        self.children().is_some()
    }
}

/// What a remount step expects.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Remount {
    /// Unmounted cleanly (else dropped: a crash).
    clean: bool,
    /// Mounted read-only once in between.
    read_only: bool,
    /// Unlinked-but-open files that the unmount or the crash scan reclaims.
    orphans: u64,
    /// Live inodes before that, root included: what a crash scan visits.
    live: u64,
    /// Snapshots exist: every mount scans, to rebuild their manifests.
    snapshots: bool,
}

/// What the last transition must return.
#[derive(Clone, Debug, PartialEq)]
enum Expect {
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
struct Model {
    nodes: BTreeMap<Id, Node>,
    next_id: Id,
    /// Open handles, by node.
    handles: Vec<Id>,
    expect: Expect,
    /// Nodes the last transition freed.
    freed: Vec<Id>,
    /// Names of the live snapshots, oldest first.
    snapshots: Vec<String>,
}

fn err<T>(e: i32) -> Result<T, Expect> {
    Err(Expect::Err(vec![e]))
}

/// What listxattr gives for `n`: every name, NUL-terminated, in byte order.
fn xattr_list(n: &Node) -> Vec<u8> {
    n.xattrs.keys().flat_map(|k| k.iter().copied().chain([0])).collect()
}

fn dots(name: &str) -> bool {
    name == "." || name == ".."
}

/// "/d" and "x" → "/d/x".
fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

impl Model {
    fn new() -> Model {
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

    fn node(&self, id: Id) -> &Node {
        &self.nodes[&id]
    }

    fn node_mut(&mut self, id: Id) -> &mut Node {
        self.nodes.get_mut(&id).unwrap()
    }

    fn children_mut(&mut self, id: Id) -> &mut BTreeMap<String, Id> {
        match &mut self.node_mut(id).body {
            Body::Dir(c) => c,
            _ => unreachable!("not a directory"),
        }
    }

    fn nlink(&self, id: Id) -> u32 {
        let n = self.node(id);
        match &n.body {
            Body::Dir(c) => 2 + c.values().filter(|&&c| self.node(c).is_dir()).count() as u32,
            _ => n.links,
        }
    }

    /// `lookup(dir, name)` as novafs orders its checks.
    fn lookup(&self, dir: Id, name: &str) -> Result<Id, Expect> {
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
    fn resolve(&self, path: &str) -> Result<Id, Expect> {
        path.split('/')
            .filter(|c| !c.is_empty())
            .try_fold(ROOT, |d, c| self.lookup(d, c))
    }

    fn target(&self, at: &At) -> Result<Id, Expect> {
        match at {
            At::Path(p) => self.resolve(p),
            At::Handle(i) => Ok(self.handles[*i]),
        }
    }

    /// True when directory `dir` is `ancestor` or lies below it.
    fn within(&self, mut dir: Id, ancestor: Id) -> bool {
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

    fn touch(&mut self, id: Id) {
        self.node_mut(id).mtime = None;
    }

    /// Drops one link of `id`, freeing it when nothing holds it any more.
    fn drop_link(&mut self, id: Id) {
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

    fn orphans(&self) -> Vec<Id> {
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
    fn dir_paths(&self) -> Vec<String> {
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
    fn entries(&self) -> Vec<(String, String, Id)> {
        let mut out = Vec::new();
        for p in self.dir_paths() {
            let id = self.resolve(&p).unwrap();
            for (name, &c) in self.node(id).children().unwrap() {
                out.push((p.clone(), name.clone(), c));
            }
        }
        out
    }

    fn add(&mut self, parent: Id, name: &str, body: Body, perm: u32, owner: Owner) -> Id {
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

    fn step(&mut self, step: &Step) -> Expect {
        self.freed.clear();
        match self.transition(step) {
            Ok(e) | Err(e) => e,
        }
    }

    fn op(&mut self, op: &Op) -> Result<Expect, Expect> {
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
            Op::Link { from, to } => {
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
                } else if self.node(src).links == 0 {
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
    fn xattr_checks(&self, id: Id, name: &[u8], changing: bool) -> Result<bool, Expect> {
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

    fn transition(&mut self, step: &Step) -> Result<Expect, Expect> {
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
    fn file_body(&mut self, id: Id) -> Result<&mut Body, Expect> {
        match &self.node(id).body {
            Body::Dir(_) => err(libc::EISDIR),
            Body::Special(..) => err(libc::EINVAL),
            _ => Ok(&mut self.node_mut(id).body),
        }
    }

    fn make(
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

    fn remove(&mut self, path: &str, want_dir: bool) -> Result<Expect, Expect> {
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

    fn rename(&mut self, from: &str, to: &str, flags: u32) -> Result<Expect, Expect> {
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

// ---------------------------------------------------------------------------
// Transitions.

/// One step of a sequence: an operation of novafs's vocabulary, a few
/// operations at once, or a remount.
#[derive(Clone, Debug)]
enum Step {
    Op(Op),
    /// Many small writes at scattered offsets, one [`Op::Write`] each:
    /// grows the file's log until garbage collection runs (NOVA §4.6).
    WriteMany {
        at: At,
        seed: u8,
        count: usize,
    },
    /// Creates `count` files named after `base`, unlinking seven of every
    /// eight at once: grows the directory's log with dead entries.
    DirChurn {
        dir: String,
        base: u64,
        count: usize,
    },
    Remount,
    Crash,
    /// Unmount (or crash), mount read-only and compare everything; every
    /// change must give EROFS; then mount read-write again.
    ReadOnly {
        crash: bool,
    },
}

impl Step {
    /// The open handle the step names, if any.
    fn handle(&self) -> Option<usize> {
        match self {
            Step::Op(op) => op.handle(),
            Step::WriteMany { at, .. } => at.handle(),
            Step::DirChurn { .. } | Step::Remount | Step::Crash | Step::ReadOnly { .. } => None,
        }
    }
}

/// File offsets: mostly small, some near page boundaries, a few far out
/// (sparse files), a few at the largest file size (EFBIG).
fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => 0..20_000u64,
        3 => (0..6u64, 0..7u64).prop_map(|(k, d)| (k * PAGE + d).saturating_sub(3)),
        1 => (0..20_000u64).prop_map(|x| (1 << 20) + x),
        1 => (0..8192u64).prop_map(|x| (1 << 30) - PAGE + x),
        1 => (0..8192u64).prop_map(|x| MAX_FILE_SIZE - PAGE + x),
    ]
}

fn length() -> impl Strategy<Value = u64> {
    prop_oneof![
        5 => 0..20_000u64,
        3 => (1..6u64, 0..7u64).prop_map(|(k, d)| (k * PAGE + d).saturating_sub(3)),
        2 => 1..64u64,
    ]
}

/// The writes of [`Step::WriteMany`] as (offset, length, data seed):
/// offsets within 64 KiB, 1 to 300 bytes.
fn many_writes(seed: u8, count: usize) -> Vec<(u64, u64, u64)> {
    let mut rng = novafs_rng::SplitMix::new(u64::from(seed));
    (0..count)
        .map(|i| {
            let off = rng.below(65_536);
            let len = 1 + rng.below(300);
            (off, len, u64::from(seed.wrapping_add(i as u8) | 1))
        })
        .collect()
}

fn churn_name(base: u64, i: usize) -> String {
    format!("t{base}_{i}")
}

fn long_name() -> String {
    "x".repeat(NAME_MAX + 1)
}

fn name() -> BoxedStrategy<String> {
    prop_oneof![
        30 => select(&POOL[..]).prop_map(str::to_string),
        1 => Just(long_name()),
        1 => Just(NAME_MAX).prop_map(|n| "y".repeat(n)),
        1 => select(&[".", ".."][..]).prop_map(str::to_string),
    ]
    .boxed()
}

/// Attribute names: a few of each namespace kept, now and then one that
/// is refused.
fn xattr_name() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        20 => select(&["user.a", "user.b", "trusted.t", "security.s"][..]).prop_map(|n| n.as_bytes().to_vec()),
        1 => select(&["foo.x", "user.", ""][..]).prop_map(|n| n.as_bytes().to_vec()),
        1 => Just([b"user.".as_slice(), &[b'n'; 251]].concat()),
    ]
    .boxed()
}

fn weighted<T: fmt::Debug + 'static>(arms: Vec<(u32, BoxedStrategy<T>)>) -> BoxedStrategy<T> {
    Union::new_weighted(arms).boxed()
}

struct Reference;

impl ReferenceStateMachine for Reference {
    type State = Model;
    type Transition = Step;

    fn init_state() -> BoxedStrategy<Model> {
        Just(Model::new()).boxed()
    }

    fn transitions(s: &Model) -> BoxedStrategy<Step> {
        let dirs = s.dir_paths();
        let entries = s.entries();
        let files: Vec<_> = entries
            .iter()
            .filter(|e| matches!(s.node(e.2).body, Body::File(_)))
            .cloned()
            .collect();
        let subdirs: Vec<_> = entries.iter().filter(|e| s.node(e.2).is_dir()).cloned().collect();
        let nhandles = s.handles.len();
        let path_of = |(dir, name, _): (String, String, Id)| join(&dir, &name);

        // Parents: mostly real directories, sometimes any name (ENOTDIR).
        let mut dir_arms = vec![(9, select(dirs.clone()).boxed())];
        if !entries.is_empty() {
            dir_arms.push((1, select(entries.clone()).prop_map(path_of).boxed()));
        }
        let dir = weighted(dir_arms);
        // A path in a parent: mostly a fresh name.
        let fresh = (dir.clone(), name()).prop_map(|(d, n)| join(&d, &n)).boxed();
        let mut target_arms = vec![(1, fresh.clone().prop_map(At::Path).boxed())];
        if !entries.is_empty() {
            target_arms.push((3, select(entries.clone()).prop_map(path_of).prop_map(At::Path).boxed()));
        }
        if !files.is_empty() {
            target_arms.push((8, select(files.clone()).prop_map(path_of).prop_map(At::Path).boxed()));
        }
        if nhandles > 0 {
            target_arms.push((3, (0..nhandles).prop_map(At::Handle).boxed()));
        }
        let target = weighted(target_arms);
        // An existing name (for unlink, rename sources), or a fresh one.
        let mut existing_arms = vec![(1, fresh.clone().boxed())];
        if !entries.is_empty() {
            existing_arms.push((4, select(entries.clone()).prop_map(path_of).boxed()));
        }
        let existing = weighted(existing_arms);

        let op = |s: BoxedStrategy<Op>| s.prop_map(Step::Op).boxed();
        let perm = select(&[0o644u32, 0o600, 0o755, 0o4755][..]);
        let owner = select(&[0u32, 1000][..]);
        let mut arms: Vec<(u32, BoxedStrategy<Step>)> = vec![
            (
                10,
                op((fresh.clone(), perm.clone(), owner.clone(), owner.clone())
                    .prop_map(|(path, perm, uid, gid)| Op::Create {
                        path,
                        perm,
                        owner: Owner { uid, gid },
                    })
                    .boxed()),
            ),
            (
                5,
                op((fresh.clone(), perm)
                    .prop_map(|(path, perm)| Op::Mkdir {
                        path,
                        perm,
                        owner: ROOT_OWNER,
                    })
                    .boxed()),
            ),
            (
                2,
                op((fresh.clone(), any::<bool>(), 0..0x1_0000u64)
                    .prop_map(|(path, fifo, rdev)| {
                        let (mode, rdev) = if fifo {
                            (libc::S_IFIFO, 0)
                        } else {
                            (libc::S_IFCHR, rdev)
                        };
                        Op::Mknod {
                            path,
                            mode: mode | 0o640,
                            rdev,
                            owner: ROOT_OWNER,
                        }
                    })
                    .boxed()),
            ),
            (
                2,
                op((
                    fresh.clone(),
                    prop_oneof![
                        8 => "[a-z/.]{1,40}".prop_map(String::into_bytes),
                        1 => Just(Vec::new()),
                        1 => Just(vec![b'L'; 4095]),
                        1 => Just(vec![b'L'; 4096]),
                    ],
                )
                    .prop_map(|(path, target)| Op::Symlink {
                        path,
                        target,
                        owner: ROOT_OWNER,
                    })
                    .boxed()),
            ),
            (2, op(target.clone().prop_map(Op::Readlink).boxed())),
            (2, op(target.clone().prop_map(Op::Stat).boxed())),
            (
                4,
                op((target.clone(), fresh.clone())
                    .prop_map(|(from, to)| Op::Link { from, to })
                    .boxed()),
            ),
            (6, op(existing.clone().prop_map(Op::Unlink).boxed())),
            (3, op(existing.clone().prop_map(Op::Rmdir).boxed())),
            (
                10,
                op((
                    existing.clone(),
                    prop_oneof![2 => fresh.clone(), 1 => existing.clone()],
                    select(&[0, 0, RENAME_NOREPLACE, RENAME_EXCHANGE][..]),
                )
                    .prop_map(|(from, to, flags)| Op::Rename { from, to, flags })
                    .boxed()),
            ),
            (
                12,
                op((target.clone(), offset(), length(), any::<u8>())
                    .prop_map(|(at, off, len, seed)| Op::Write {
                        at,
                        off,
                        len,
                        seed: seed.into(),
                    })
                    .boxed()),
            ),
            (
                6,
                op((target.clone(), offset(), length())
                    .prop_map(|(at, off, len)| Op::Read { at, off, len })
                    .boxed()),
            ),
            (
                4,
                op((target.clone(), offset())
                    .prop_map(|(at, size)| Op::truncate(at, size))
                    .boxed()),
            ),
            (
                3,
                op((
                    target.clone(),
                    proptest::option::of(select(&[0o600u32, 0o777, 0o1777, 0o4711, 0o100644][..])),
                    proptest::option::of(0..3u32),
                    proptest::option::of(0..3u32),
                    proptest::option::of(0..1_000_000_000_000i64),
                )
                    .prop_map(|(at, mode, uid, gid, mtime)| Op::Setattr {
                        at,
                        set: SetAttr {
                            mode,
                            uid,
                            gid,
                            mtime,
                            ..SetAttr::default()
                        },
                    })
                    .boxed()),
            ),
            (
                4,
                op((target.clone(), select(&[0u32, 1, 3][..]), offset(), length())
                    .prop_map(|(at, mode, off, len)| Op::Fallocate { at, mode, off, len })
                    .boxed()),
            ),
            (
                4,
                op((target.clone(), offset(), select(&[Whence::Data, Whence::Hole][..]))
                    .prop_map(|(at, off, whence)| Op::Lseek { at, off, whence })
                    .boxed()),
            ),
            (1, op(target.clone().prop_map(Op::Fsync).boxed())),
            (
                4,
                op((
                    target.clone(),
                    xattr_name(),
                    select(&[0usize, 10, 900, 5000, 65_536, 65_537][..]),
                    any::<u8>(),
                    select(&[0u32, 0, novafs::XATTR_CREATE, novafs::XATTR_REPLACE][..]),
                )
                    .prop_map(|(at, name, len, seed, flags)| Op::SetXattr {
                        at,
                        name,
                        value: op::data(u64::from(seed) + 1, len as u64),
                        flags,
                    })
                    .boxed()),
            ),
            (
                2,
                op((target.clone(), xattr_name())
                    .prop_map(|(at, name)| Op::RemoveXattr { at, name })
                    .boxed()),
            ),
            (
                2,
                op((target.clone(), xattr_name())
                    .prop_map(|(at, name)| Op::GetXattr { at, name })
                    .boxed()),
            ),
            (1, op(target.clone().prop_map(Op::ListXattr).boxed())),
            (
                2,
                (target.clone(), 1..=255u8, 50..300usize)
                    .prop_map(|(at, seed, count)| Step::WriteMany { at, seed, count })
                    .boxed(),
            ),
            (
                1,
                (dir.clone(), Just(s.next_id), 20..200usize)
                    .prop_map(|(dir, base, count)| Step::DirChurn { dir, base, count })
                    .boxed(),
            ),
            (3, op(target.prop_map(Op::Open).boxed())),
            (
                3,
                op((dir, 1..5usize)
                    .prop_map(|(path, limit)| Op::Readdir { path, offset: 0, limit })
                    .boxed()),
            ),
            (1, Just(Step::Op(Op::Statfs)).boxed()),
            (
                1,
                op(select(&POOL[..]).prop_map(|n| Op::Snapshot(format!("s-{n}"))).boxed()),
            ),
            (
                1,
                op(select(&POOL[..])
                    .prop_map(|n| Op::DeleteSnapshot(format!("s-{n}")))
                    .boxed()),
            ),
            (2, Just(Step::Remount).boxed()),
            (2, Just(Step::Crash).boxed()),
            (1, any::<bool>().prop_map(|crash| Step::ReadOnly { crash }).boxed()),
        ];
        if nhandles > 0 {
            arms.push((6, op((0..nhandles).prop_map(|i| Op::Release(At::Handle(i))).boxed())));
        }
        if !subdirs.is_empty() {
            arms.push((
                3,
                op(select(subdirs.clone()).prop_map(path_of).prop_map(Op::Rmdir).boxed()),
            ));
            // A directory into itself or below itself.
            arms.push((
                2,
                op((select(subdirs), select(&POOL[..]), any::<bool>())
                    .prop_map(move |(e, newname, deeper)| {
                        let from = path_of(e);
                        let mut to = join(&from, newname);
                        if deeper {
                            to = join(&to, newname);
                        }
                        Op::rename(from, to, 0)
                    })
                    .boxed()),
            ));
        }
        weighted(arms)
    }

    fn preconditions(s: &Model, step: &Step) -> bool {
        step.handle().is_none_or(|i| i < s.handles.len())
    }

    fn apply(mut s: Model, step: &Step) -> Model {
        s.expect = s.step(step);
        s
    }
}

// ---------------------------------------------------------------------------
// The system under test.

/// [`Step::DirChurn`] on novafs: tells `kept` the index and inode number
/// of each file it keeps.
fn churn(
    runner: &mut Runner,
    dir: &str,
    base: u64,
    count: usize,
    mut kept: impl FnMut(usize, Ino),
) -> Result<(), OpError> {
    for i in 0..count {
        let path = join(dir, &churn_name(base, i));
        let create = Op::Create {
            path: path.clone(),
            perm: 0o600,
            owner: ROOT_OWNER,
        };
        let Observed::Attr(a) = runner.apply(&create)? else {
            unreachable!("create observes attributes")
        };
        if i % 8 != 0 {
            runner.apply(&Op::Unlink(path))?;
        } else {
            kept(i, a.ino);
        }
    }
    Ok(())
}

/// A full readdir: `chunk(offset)` reads the entries after `offset`, each
/// chunk resuming from the last one's offset.
fn read_all(mut chunk: impl FnMut(u64) -> Vec<DirEntry>, ctx: &dyn fmt::Debug) -> Vec<DirEntry> {
    let mut all = Vec::new();
    let mut off = 0;
    loop {
        let got = chunk(off);
        let Some(last) = got.last() else { break };
        assert!(last.next_offset > off, "readdir offsets go forward ({ctx:?})");
        off = last.next_offset;
        all.extend(got);
    }
    all
}

struct Sut {
    runner: Runner,
    inos: HashMap<Id, Ino>,
    /// The model after the last transition, for the teardown's check.
    model: Option<Model>,
}

impl Sut {
    /// The mounted file system, for the checks that read everything by
    /// inode number.
    fn fs(&self) -> &Fs {
        self.runner.fs().unwrap()
    }

    /// Runs `step` through the interpreter; `first_id` is the model number
    /// its first new node gets.
    fn run(&mut self, step: &Step, first_id: Id) -> Result<Observed, OpError> {
        match step {
            Step::Op(op) => self.runner.apply(op),
            Step::WriteMany { at, seed, count } => {
                for (off, len, seed) in many_writes(*seed, *count) {
                    self.runner.apply(&Op::write(at.clone(), off, len, seed))?;
                }
                Ok(Observed::Done)
            }
            Step::DirChurn { dir, base, count } => {
                // The model numbers the files in creation order from
                // `first_id`; the kept ones need their inode numbers.
                let mut kept = Vec::new();
                let r = churn(&mut self.runner, dir, *base, *count, |i, ino| {
                    kept.push((first_id + i as u64, ino));
                });
                self.inos.extend(kept);
                r.map(|()| Observed::Done)
            }
            Step::Remount | Step::Crash | Step::ReadOnly { .. } => unreachable!("checked by the harness directly"),
        }
    }

    /// Compares a node's attributes with the model.
    fn check_attr(&self, m: &Model, id: Id, a: &Attr, ctx: &dyn fmt::Debug) {
        let n = m.node(id);
        if let Some(&ino) = self.inos.get(&id) {
            assert_eq!(a.ino, ino, "inode number of model node {id} after {ctx:?}");
        }
        let want_size = match &n.body {
            Body::File(b) => Some(b.size),
            Body::Symlink(t) => Some(t.len() as u64),
            Body::Special(..) => Some(0),
            Body::Dir(_) => None,
        };
        let rdev = match n.body {
            Body::Special(_, r) => r,
            _ => 0,
        };
        assert_eq!(
            (a.kind, a.perm, a.uid, a.gid, a.nlink, a.rdev),
            (n.kind(), n.perm, n.uid, n.gid, m.nlink(id), rdev),
            "attributes of model node {id} (ino {}) after {ctx:?}",
            a.ino
        );
        if let Some(size) = want_size {
            assert_eq!(a.size, size, "size of model node {id} after {ctx:?}");
        }
        if let Some(t) = n.mtime {
            assert_eq!(a.mtime, t, "mtime of model node {id} after {ctx:?}");
        }
    }

    /// Every live node's attributes and every directory's names.
    fn check_shape(&self, m: &Model, ctx: &dyn fmt::Debug) {
        let fs = self.fs();
        for (&id, n) in &m.nodes {
            let ino = self.inos[&id];
            let a = fs
                .getattr(ino)
                .unwrap_or_else(|e| panic!("getattr of model node {id} (ino {ino}) after {ctx:?}: {e}"));
            self.check_attr(m, id, &a, ctx);
            assert_eq!(
                fs.listxattr(ino).unwrap(),
                xattr_list(n),
                "xattr names of model node {id} after {ctx:?}"
            );
            for (name, v) in &n.xattrs {
                assert!(
                    fs.getxattr(ino, name).unwrap() == *v,
                    "xattr {} of model node {id} after {ctx:?}",
                    String::from_utf8_lossy(name)
                );
            }
            if let Some(children) = n.children() {
                let want: Vec<(Vec<u8>, Ino)> = children
                    .iter()
                    .map(|(name, c)| (name.clone().into_bytes(), self.inos[c]))
                    .collect();
                let all = read_all(
                    |off| {
                        let mut got = Vec::new();
                        fs.readdir(ino, off, |e| {
                            got.push(e);
                            false
                        })
                        .unwrap();
                        got
                    },
                    ctx,
                );
                let got = self.check_listing(ino, all, ctx);
                assert_eq!(got, want, "names in model directory {id} after {ctx:?}");
                assert_eq!(
                    fs.lookup(ino, b"..").unwrap().ino,
                    self.inos[&n.parent],
                    "'..' of model directory {id} after {ctx:?}"
                );
            }
        }
    }

    /// Checks the full listing `all` of directory `ino` ("." and "..",
    /// kinds, no name twice); returns its names sorted, without "." and "..".
    fn check_listing(&self, ino: Ino, all: Vec<DirEntry>, ctx: &dyn fmt::Debug) -> Vec<(Vec<u8>, Ino)> {
        let fs = self.fs();
        let parent = fs.lookup(ino, b"..").unwrap().ino;
        assert_eq!(
            all.iter()
                .filter(|e| e.name == b"." || e.name == b"..")
                .map(|e| (e.name.clone(), e.ino))
                .collect::<Vec<_>>(),
            vec![(b".".to_vec(), ino), (b"..".to_vec(), parent)],
            "'.' and '..' of ino {ino} ({ctx:?})"
        );
        let mut v: Vec<(Vec<u8>, Ino)> = all
            .into_iter()
            .filter(|e| e.name != b"." && e.name != b"..")
            .map(|e| {
                let a = fs.getattr(e.ino).unwrap();
                assert_eq!(a.kind, e.kind, "readdir kind of {:?} ({ctx:?})", e.name);
                (e.name, e.ino)
            })
            .collect();
        let n = v.len();
        v.sort();
        v.dedup_by(|a, b| a.0 == b.0);
        assert_eq!(v.len(), n, "readdir listed a name twice ({ctx:?})");
        v
    }

    /// File contents and symlink targets of every node.
    fn check_contents(&self, m: &Model, ctx: &dyn fmt::Debug) {
        let fs = self.fs();
        for (&id, n) in &m.nodes {
            let ino = self.inos[&id];
            match &n.body {
                Body::Symlink(t) => assert_eq!(&fs.readlink(ino).unwrap(), t, "{ctx:?}"),
                Body::File(b) => {
                    // Read in 1 MiB chunks, skipping chunks that are holes
                    // in both the model and novafs.
                    const CHUNK: u64 = 1 << 20;
                    let mut pos = 0;
                    while pos < b.size {
                        let model_next = b
                            .pages
                            .range(pos / PAGE..)
                            .next()
                            .map_or(b.size, |(&p, _)| (p * PAGE).max(pos));
                        let fs_next = fs.lseek(ino, pos, SEEK_DATA).unwrap_or(b.size);
                        let start = model_next.min(fs_next) / PAGE * PAGE;
                        let start = start.max(pos);
                        if start >= b.size {
                            break;
                        }
                        let end = (start + CHUNK).min(b.size);
                        let mut buf = vec![0xEE; (end - start) as usize];
                        let got = fs.read(ino, start, &mut buf).unwrap();
                        assert_eq!(got, buf.len(), "short read of node {id} ({ctx:?})");
                        let want = b.read(start, buf.len());
                        if buf != want {
                            let i = buf.iter().zip(&want).position(|(x, y)| x != y).unwrap();
                            panic!(
                                "contents of model node {id} differ at byte {} \
                                 (novafs {:#x}, model {:#x}) after {ctx:?}",
                                start + i as u64,
                                buf[i],
                                want[i]
                            );
                        }
                        pos = end;
                    }
                }
                _ => {}
            }
        }
    }

    fn check_seek(&self, b: &Bytes, off: u64, whence: Whence, got: &Result<Observed, OpError>, step: &Step) {
        let data = whence == Whence::Data;
        let size = b.size;
        if off >= size {
            assert!(
                matches!(got, Err(OpError::Fs(Error::NoSuchOffset))),
                "lseek at/after EOF must be ENXIO: {step:?} gave {got:?}"
            );
            return;
        }
        let nz = b.next_nonzero(off);
        match got {
            Ok(Observed::Offset(r)) if data => {
                assert!(
                    (off..size).contains(r),
                    "SEEK_DATA result {r} outside [{off}, {size}): {step:?}"
                );
                if let Some(nz) = nz {
                    assert!(*r <= nz, "SEEK_DATA {r} skips data at {nz}: {step:?}");
                }
            }
            Ok(Observed::Offset(r)) => {
                assert!(
                    (off..=size).contains(r),
                    "SEEK_HOLE result {r} outside [{off}, {size}]: {step:?}"
                );
                let page_end = ((r / PAGE + 1) * PAGE).min(size);
                if *r < size {
                    assert!(
                        b.read(*r, (page_end - r) as usize).iter().all(|&x| x == 0),
                        "SEEK_HOLE {r} points at data: {step:?}"
                    );
                }
            }
            Err(OpError::Fs(Error::NoSuchOffset)) if data => {
                assert!(nz.is_none(), "SEEK_DATA ENXIO but data at {nz:?}: {step:?}");
            }
            other => panic!("{step:?} gave {other:?}"),
        }
    }

    fn remount(&mut self, m: &Model, r: &Remount, step: &dyn fmt::Debug) {
        let before = self.fs().statfs();
        self.runner
            .apply(if r.clean { &Op::Unmount } else { &Op::Crash })
            .unwrap();
        assert_fsck_clean(self.runner.region());
        if r.read_only {
            let rep = mount_report(self.runner.apply(&Op::MountReadOnly));
            assert_eq!(rep.clean, r.clean, "read-only mount after {step:?}");
            self.check_shape(m, step);
            self.check_contents(m, step);
            self.check_read_only(m, step);
            self.runner.apply(&Op::Unmount).unwrap();
            assert_fsck_clean(self.runner.region());
        }
        let rep = mount_report(self.runner.apply(&Op::Mount));
        // A clean unmount saved the allocators and the snapshots'
        // manifests, and ended the orphans (freed, or kept for a snapshot):
        // no scan.
        let (scanned, reclaimed) = if r.clean { (0, 0) } else { (r.live, r.orphans) };
        assert_eq!(
            (rep.clean, rep.scanned_inodes, rep.orphans_reclaimed),
            (r.clean, scanned, reclaimed),
            "mount report (clean, scanned, orphans) after {step:?}"
        );
        let after = self.fs().statfs();
        if r.orphans == 0 {
            assert_eq!(after, before, "statfs across {step:?}: space leaked or invented");
        } else if r.snapshots {
            // An orphan a snapshot may see is kept, pages and all.
            assert!(after.blocks_free >= before.blocks_free, "{step:?}");
        } else {
            assert!(after.blocks_free > before.blocks_free, "{step:?}");
        }
        self.check_shape(m, step);
        self.check_contents(m, step);
    }

    /// On a read-only mount every change gives EROFS and changes nothing.
    fn check_read_only(&mut self, m: &Model, step: &dyn fmt::Debug) {
        let file = m
            .entries()
            .into_iter()
            .find(|(_, _, id)| matches!(m.node(*id).body, Body::File(_)))
            .map_or_else(|| "/".to_string(), |(dir, name, _)| join(&dir, &name));
        let set = SetAttr {
            mode: Some(0o600),
            size: Some(1),
            ..SetAttr::default()
        };
        let changes = [
            Op::create("/ro"),
            Op::mkdir("/ro"),
            Op::mknod("/ro", libc::S_IFIFO | 0o644, 0),
            Op::symlink("/ro", "t"),
            Op::link(file.as_str(), "/ro"),
            Op::Unlink("/a".into()),
            Op::Rmdir("/d1".into()),
            Op::rename("/a", "/b", 0),
            Op::Setattr {
                at: file.as_str().into(),
                set,
            },
            Op::write(file.as_str(), 0, 2, 1),
            Op::fallocate(file.as_str(), 0, 0, 4096),
            Op::setxattr("/", "user.ro", 3, 1),
            Op::removexattr("/", "user.ro"),
        ];
        for op in &changes {
            match self.runner.apply(op) {
                Err(e) => assert_eq!(
                    e.fs_error().map(Error::errno),
                    Some(libc::EROFS),
                    "{op} on a read-only mount: {e:?}"
                ),
                Ok(o) => panic!("{op} succeeded ({o:?}) on a read-only mount after {step:?}"),
            }
        }
        self.check_shape(m, step);
    }
}

/// The report of a mount that must have succeeded.
fn mount_report(r: Result<Observed, OpError>) -> MountReport {
    match r {
        Ok(Observed::Mounted(rep)) => rep,
        other => panic!("mount: {other:?}"),
    }
}

struct NovaTest;

impl StateMachineTest for NovaTest {
    type SystemUnderTest = Sut;
    type Reference = Reference;

    fn init_test(_: &Model) -> Sut {
        // Every other case on an image without metadata replicas (an image
        // made before they existed, or with `mkfs --no-meta-replicas`).
        static CASES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let case = CASES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let format = FormatOptions {
            shards: Some(2),
            meta_replicas: case.is_multiple_of(2),
            ..FormatOptions::default()
        };
        let mut runner = Runner::new(Arc::new(MemRegion::new(64 << 20)), format);
        runner.apply(&Op::Mkfs).unwrap();
        runner.apply(&Op::Mount).unwrap();
        Sut {
            runner,
            inos: HashMap::from([(ROOT, ROOT_INO)]),
            model: None,
        }
    }

    fn apply(sut: Sut, m: &Model, step: Step) -> Sut {
        let mut sut = run_step(sut, m, step);
        sut.model = Some(m.clone());
        sut
    }

    fn check_invariants(sut: &Sut, m: &Model) {
        let fs = sut.fs();
        // Files a churn created and removed were never given numbers: their
        // slots may be reused within the churn.
        for id in m.freed.iter().filter(|id| sut.inos.contains_key(id)) {
            let ino = sut.inos[id];
            assert!(
                matches!(fs.getattr(ino), Err(Error::NotFound)),
                "model node {id} (ino {ino}) was freed but novafs still has it"
            );
        }
        sut.check_shape(m, &"the last transition");
        sut.check_contents(m, &"the last transition");
        let names: Vec<String> = fs
            .snapshots()
            .into_iter()
            .map(|s| String::from_utf8(s.name).unwrap())
            .collect();
        assert_eq!(names, m.snapshots, "the snapshot list after the last transition");
    }

    fn teardown(mut sut: Sut) {
        // A last clean remount, compared in full.
        let Some(mut m) = sut.model.take() else {
            return;
        };
        let Expect::Remounted(r) = m.step(&Step::Remount) else {
            unreachable!()
        };
        sut.remount(&m, &r, &"teardown");
        sut.runner.apply(&Op::Unmount).unwrap();
        assert_fsck_clean(sut.runner.region());
    }
}

/// Runs `step` on novafs and compares its result with the model's.
fn run_step(mut sut: Sut, m: &Model, step: Step) -> Sut {
    {
        match (&m.expect, &step) {
            (Expect::Skip, _) => return sut,
            (Expect::Remounted(r), _) => {
                sut.remount(m, r, &step);
                return sut;
            }
            (Expect::Listing(id), Step::Op(Op::Readdir { path, limit, .. })) => {
                // The whole directory, chunk by chunk, from this first one.
                let all = read_all(
                    |offset| {
                        let page = Op::Readdir {
                            path: path.clone(),
                            offset,
                            limit: *limit,
                        };
                        match sut.runner.apply(&page) {
                            Ok(Observed::Entries(es)) => es,
                            other => panic!("{page}: {other:?}"),
                        }
                    },
                    &step,
                );
                let want: Vec<(Vec<u8>, Ino)> = m
                    .node(*id)
                    .children()
                    .unwrap()
                    .iter()
                    .map(|(name, c)| (name.clone().into_bytes(), sut.inos[c]))
                    .collect();
                assert_eq!(sut.check_listing(sut.inos[id], all, &step), want, "{step:?}");
                return sut;
            }
            _ => {}
        }
        let first_id = sut.model.as_ref().map_or(ROOT + 1, |p| p.next_id);
        let got = sut.run(&step, first_id);
        match (&m.expect, &got) {
            (Expect::Err(want), Err(e)) => {
                let errno = e.fs_error().map(Error::errno);
                assert!(
                    errno.is_some_and(|n| want.contains(&n)),
                    "{step:?}: got {e:?} (errno {errno:?}), want one of {want:?}"
                );
            }
            (Expect::Ok, Ok(Observed::Done)) => {}
            (Expect::Statfs, Ok(Observed::Statfs(s))) => {
                assert_eq!((s.block_size, s.name_max), (4096, 255));
                assert!(s.blocks_free <= s.blocks && s.files_free <= s.files, "{s:?}");
                assert!(s.blocks > 14_000, "64 MiB region: {s:?}");
            }
            (Expect::Written(n), Ok(Observed::Written(k))) => assert_eq!(n, k, "{step:?}"),
            (Expect::Data(d), Ok(Observed::Data(g))) => {
                assert_eq!(g.len(), d.len(), "length of {step:?}");
                assert!(g == d, "bytes of {step:?} differ from the model");
            }
            (Expect::Seek(id), _) => {
                let Body::File(b) = &m.node(*id).body else {
                    unreachable!()
                };
                let Step::Op(Op::Lseek { off, whence, .. }) = step else {
                    unreachable!()
                };
                sut.check_seek(b, off, whence, &got, &step);
            }
            (Expect::Opened(id, keep), Ok(Observed::Attr(a))) => {
                sut.check_attr(m, *id, a, &step);
                if !keep {
                    // Kept by the model for files only: the new handle is
                    // the one after those the model holds.
                    let last = At::Handle(m.handles.len());
                    sut.runner.apply(&Op::Release(last)).unwrap();
                }
            }
            (Expect::Node(id), Ok(Observed::Attr(a))) => {
                if let Some(&ino) = sut.inos.get(id) {
                    assert_eq!(ino, a.ino, "{step:?} acted on the wrong inode");
                } else {
                    assert!(
                        !sut.inos.iter().any(|(k, &i)| i == a.ino && m.nodes.contains_key(k)),
                        "{step:?} reused live inode {}",
                        a.ino
                    );
                    sut.inos.insert(*id, a.ino);
                }
                sut.check_attr(m, *id, a, &step);
            }
            (want, got) => panic!("{step:?}: got {got:?}, want {want:?}"),
        }
    }
    sut
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512)
}

prop_state_machine! {
    #![proptest_config(Config {
        cases: cases(),
        failure_persistence: None,
        max_shrink_iters: 4096,
        ..Config::default()
    })]

    /// Random operation sequences with remounts and crashes agree with the
    /// reference model at every step.
    #[test]
    fn random_operations_match_the_reference_model(sequential 1..80 => NovaTest);
}
