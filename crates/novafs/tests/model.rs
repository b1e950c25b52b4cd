//! Model-based property test of the POSIX surface (DESIGN.md §4): random
//! operation sequences run on novafs and on an in-memory reference tree, and
//! every result is compared — values, attributes and exact errnos. Clean and
//! crash remounts are part of the sequence; after each one the whole tree is
//! compared, the free-space count is checked for leaks and fsck must be clean.
//!
//! Where POSIX lets several errors apply to one call, the model accepts any
//! of them; otherwise it expects exactly one. Scale with `PROPTEST_CASES`.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use common::{assert_fsck_clean, fresh, mount};
use novafs::MAX_FILE_SIZE;
use novafs::{
    Attr, Error, FileType, Fs, Ino, MountOptions, SetAttr, RENAME_EXCHANGE, RENAME_NOREPLACE, ROOT_INO, SEEK_DATA,
    SEEK_HOLE,
};
use pm::Region;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::Union;
use proptest::test_runner::Config;
use proptest_state_machine::{prop_state_machine, ReferenceStateMachine, StateMachineTest};

const PAGE: u64 = 4096;
const NAME_MAX: usize = 255;
const POOL: [&str; 6] = ["a", "b", "c", "d", "d1", "d2"];

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
}

fn err<T>(e: i32) -> Result<T, Expect> {
    Err(Expect::Err(vec![e]))
}

fn dots(name: &str) -> bool {
    name == "." || name == ".."
}

fn pattern(seed: u8, off: u64, len: usize) -> Vec<u8> {
    if seed == 0 {
        return vec![0; len];
    }
    (0..len as u64)
        .map(|i| ((u64::from(seed) + (off + i) * 7) % 255 + 1) as u8)
        .collect()
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
        };
        Model {
            nodes: BTreeMap::from([(ROOT, root)]),
            next_id: ROOT + 1,
            handles: Vec::new(),
            expect: Expect::None,
            freed: Vec::new(),
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

    fn resolve(&self, path: &[String]) -> Result<Id, Expect> {
        path.iter().try_fold(ROOT, |d, c| self.lookup(d, c))
    }

    fn target(&self, t: &Target) -> Result<Id, Expect> {
        match t {
            Target::Path(p, n) => self.lookup(self.resolve(p)?, n),
            Target::Handle(i) => Ok(self.handles[i % self.handles.len()]),
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

    /// Paths of every reachable directory (root is the empty path).
    fn dir_paths(&self) -> Vec<Vec<String>> {
        let mut out = vec![Vec::new()];
        let mut i = 0;
        while i < out.len() {
            let id = self.resolve(&out[i]).unwrap();
            for (name, &c) in self.node(id).children().unwrap() {
                if self.node(c).is_dir() {
                    let mut p = out[i].clone();
                    p.push(name.clone());
                    out.push(p);
                }
            }
            i += 1;
        }
        out
    }

    /// Every name in the tree as (parent path, name, node).
    fn entries(&self) -> Vec<(Vec<String>, String, Id)> {
        let mut out = Vec::new();
        for p in self.dir_paths() {
            let id = self.resolve(&p).unwrap();
            for (name, &c) in self.node(id).children().unwrap() {
                out.push((p.clone(), name.clone(), c));
            }
        }
        out
    }

    fn add(&mut self, parent: Id, name: &str, body: Body, perm: u32, uid: u32, gid: u32) -> Id {
        let id = self.next_id;
        self.next_id += 1;
        let dir = matches!(body, Body::Dir(_));
        self.nodes.insert(
            id,
            Node {
                body,
                perm: perm & 0o7777,
                uid,
                gid,
                mtime: None,
                links: u32::from(!dir),
                parent,
            },
        );
        self.children_mut(parent).insert(name.to_string(), id);
        self.touch(parent);
        id
    }

    fn step(&mut self, op: &Op) -> Expect {
        self.freed.clear();
        match self.step_inner(op) {
            Ok(e) | Err(e) => e,
        }
    }

    fn step_inner(&mut self, op: &Op) -> Result<Expect, Expect> {
        Ok(match op {
            Op::Create {
                dir,
                name,
                perm,
                uid,
                gid,
            } => self.make(dir, name, Body::File(Bytes::default()), *perm, *uid, *gid, None)?,
            Op::Mkdir { dir, name, perm } => self.make(dir, name, Body::Dir(BTreeMap::new()), *perm, 0, 0, None)?,
            Op::Mknod { dir, name, fifo, rdev } => {
                let body = if *fifo {
                    Body::Special(FileType::NamedPipe, 0)
                } else {
                    Body::Special(FileType::CharDevice, *rdev)
                };
                self.make(dir, name, body, 0o640, 0, 0, None)?
            }
            Op::Symlink { dir, name, target } => {
                let body = Body::Symlink(target.clone());
                self.make(dir, name, body, 0o777, 0, 0, Some(target))?
            }
            Op::Readlink(t) => match &self.node(self.target(t)?).body {
                Body::Symlink(target) => Expect::Data(target.clone()),
                _ => return err(libc::EINVAL),
            },
            Op::Link { src, dir, name } => {
                let src = self.target(src)?;
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
                self.children_mut(parent).insert(name.clone(), src);
                self.touch(parent);
                Expect::Node(src)
            }
            Op::Unlink { dir, name } => self.remove(dir, name, false)?,
            Op::Rmdir { dir, name } => self.remove(dir, name, true)?,
            Op::Rename {
                from,
                name,
                to,
                newname,
                flags,
            } => self.rename(from, name, to, newname, *flags)?,
            Op::Write { at, off, len, seed } => {
                let id = self.target(at)?;
                let Body::File(bytes) = self.file_body(id)? else {
                    return Ok(Expect::Skip);
                };
                if *len > 0 {
                    if off + *len as u64 > MAX_FILE_SIZE {
                        return err(libc::EFBIG);
                    }
                    bytes.write(*off, &pattern(*seed, *off, *len));
                    self.touch(id);
                }
                Expect::Written(*len)
            }
            Op::Read { at, off, len } => {
                let id = self.target(at)?;
                let Body::File(bytes) = self.file_body(id)? else {
                    return Ok(Expect::Skip);
                };
                Expect::Data(bytes.read(*off, *len))
            }
            Op::Truncate { at, size } => {
                let id = self.target(at)?;
                match &mut self.node_mut(id).body {
                    Body::File(_) if *size > MAX_FILE_SIZE => return Err(Expect::Err(vec![libc::EFBIG, libc::EINVAL])),
                    Body::File(bytes) => {
                        if bytes.size != *size {
                            bytes.set_size(*size);
                            self.touch(id);
                        }
                    }
                    Body::Dir(_) => return err(libc::EISDIR),
                    _ => return err(libc::EINVAL),
                }
                Expect::Node(id)
            }
            Op::Chattr {
                at,
                mode,
                uid,
                gid,
                mtime,
            } => {
                let id = self.target(at)?;
                let n = self.node_mut(id);
                if let Some(m) = mode {
                    n.perm = m & 0o7777;
                }
                n.uid = uid.unwrap_or(n.uid);
                n.gid = gid.unwrap_or(n.gid);
                if mtime.is_some() {
                    n.mtime = *mtime;
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
            Op::WriteMany { at, seed, count } => {
                let id = self.target(at)?;
                let Body::File(bytes) = self.file_body(id)? else {
                    return Ok(Expect::Skip);
                };
                for (off, data) in many_writes(*seed, *count) {
                    bytes.write(off, &data);
                }
                self.touch(id);
                Expect::Ok
            }
            Op::DirChurn { dir, base, count } => {
                let parent = self.resolve(dir)?;
                if !self.node(parent).is_dir() {
                    return err(libc::ENOTDIR);
                }
                for i in 0..*count {
                    let name = churn_name(*base, i);
                    if self.node(parent).children().unwrap().contains_key(&name) {
                        return err(libc::EEXIST);
                    }
                    let id = self.add(parent, &name, Body::File(Bytes::default()), 0o600, 0, 0);
                    if i % 8 != 0 {
                        self.children_mut(parent).remove(&name);
                        self.drop_link(id);
                    }
                }
                Expect::Ok
            }
            Op::Open(t) => {
                let id = self.target(t)?;
                let keep = matches!(self.node(id).body, Body::File(_));
                if keep {
                    self.handles.push(id);
                }
                Expect::Opened(id, keep)
            }
            Op::Release(i) => {
                let id = self.handles.remove(i % self.handles.len());
                if self.node(id).links == 0 && !self.handles.contains(&id) {
                    self.nodes.remove(&id);
                    self.freed.push(id);
                }
                Expect::Ok
            }
            Op::Readdir { dir, .. } => {
                let id = self.resolve(dir)?;
                if !self.node(id).is_dir() {
                    return err(libc::ENOTDIR);
                }
                Expect::Listing(id)
            }
            Op::Statfs => Expect::Statfs,
            Op::Remount | Op::Crash | Op::ReadOnly { .. } => {
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
                    clean: matches!(op, Op::Remount | Op::ReadOnly { crash: false }),
                    read_only: matches!(op, Op::ReadOnly { .. }),
                    orphans: orphans.len() as u64,
                    live,
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

    #[allow(clippy::too_many_arguments)]
    fn make(
        &mut self,
        dir: &[String],
        name: &str,
        body: Body,
        perm: u32,
        uid: u32,
        gid: u32,
        target: Option<&Vec<u8>>,
    ) -> Result<Expect, Expect> {
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
        Ok(Expect::Node(self.add(parent, name, body, perm, uid, gid)))
    }

    fn remove(&mut self, dir: &[String], name: &str, want_dir: bool) -> Result<Expect, Expect> {
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

    fn rename(
        &mut self,
        from: &[String],
        name: &str,
        to: &[String],
        newname: &str,
        flags: u32,
    ) -> Result<Expect, Expect> {
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

/// A node to act on: a path (parent components and a final name) or an
/// open handle (index into the open handles, modulo their count).
#[derive(Clone, Debug)]
enum Target {
    Path(Vec<String>, String),
    Handle(usize),
}

#[derive(Clone, Debug)]
enum Op {
    Create {
        dir: Vec<String>,
        name: String,
        perm: u32,
        uid: u32,
        gid: u32,
    },
    Mkdir {
        dir: Vec<String>,
        name: String,
        perm: u32,
    },
    Mknod {
        dir: Vec<String>,
        name: String,
        fifo: bool,
        rdev: u64,
    },
    Symlink {
        dir: Vec<String>,
        name: String,
        target: Vec<u8>,
    },
    Readlink(Target),
    Link {
        src: Target,
        dir: Vec<String>,
        name: String,
    },
    Unlink {
        dir: Vec<String>,
        name: String,
    },
    Rmdir {
        dir: Vec<String>,
        name: String,
    },
    Rename {
        from: Vec<String>,
        name: String,
        to: Vec<String>,
        newname: String,
        flags: u32,
    },
    Write {
        at: Target,
        off: u64,
        len: usize,
        seed: u8,
    },
    Read {
        at: Target,
        off: u64,
        len: usize,
    },
    Truncate {
        at: Target,
        size: u64,
    },
    Chattr {
        at: Target,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        mtime: Option<i64>,
    },
    Fallocate {
        at: Target,
        mode: u32,
        off: u64,
        len: u64,
    },
    Lseek {
        at: Target,
        off: u64,
        data: bool,
    },
    /// Many small writes at scattered offsets: grows the file's log until
    /// garbage collection runs (NOVA §4.6).
    WriteMany {
        at: Target,
        seed: u8,
        count: usize,
    },
    /// Creates `count` files named after `base`, unlinking seven of every
    /// eight at once: grows the directory's log with dead entries.
    DirChurn {
        dir: Vec<String>,
        base: u64,
        count: usize,
    },
    Open(Target),
    Release(usize),
    Readdir {
        dir: Vec<String>,
        chunk: usize,
    },
    Statfs,
    Remount,
    Crash,
    /// Unmount (or crash), mount read-only and compare everything; every
    /// change must give EROFS; then mount read-write again.
    ReadOnly {
        crash: bool,
    },
}

impl Op {
    fn uses_handle(&self) -> bool {
        let t = match self {
            Op::Release(_) => return true,
            Op::Readlink(t) | Op::Open(t) => t,
            Op::Link { src, .. } => src,
            Op::Write { at, .. }
            | Op::Read { at, .. }
            | Op::Truncate { at, .. }
            | Op::Chattr { at, .. }
            | Op::Fallocate { at, .. }
            | Op::Lseek { at, .. }
            | Op::WriteMany { at, .. } => at,
            _ => return false,
        };
        matches!(t, Target::Handle(_))
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

fn length() -> impl Strategy<Value = usize> {
    prop_oneof![
        5 => 0..20_000usize,
        3 => (1..6usize, 0..7usize).prop_map(|(k, d)| (k * 4096 + d).saturating_sub(3)),
        2 => 1..64usize,
    ]
}

/// The writes of [`Op::WriteMany`]: offsets within 64 KiB, 1 to 300 bytes.
fn many_writes(seed: u8, count: usize) -> Vec<(u64, Vec<u8>)> {
    let mut x = u64::from(seed) * 0x9E37_79B9 + 1;
    (0..count)
        .map(|i| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let off = (x >> 33) % 65_536;
            let len = 1 + (x >> 17) as usize % 300;
            (off, pattern(seed.wrapping_add(i as u8) | 1, off, len))
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

fn weighted<T: fmt::Debug + 'static>(arms: Vec<(u32, BoxedStrategy<T>)>) -> BoxedStrategy<T> {
    Union::new_weighted(arms).boxed()
}

struct Reference;

impl ReferenceStateMachine for Reference {
    type State = Model;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<Model> {
        Just(Model::new()).boxed()
    }

    fn transitions(s: &Model) -> BoxedStrategy<Op> {
        let dirs = s.dir_paths();
        let entries = s.entries();
        let files: Vec<_> = entries
            .iter()
            .filter(|e| matches!(s.node(e.2).body, Body::File(_)))
            .cloned()
            .collect();
        let subdirs: Vec<_> = entries.iter().filter(|e| s.node(e.2).is_dir()).cloned().collect();
        let nhandles = s.handles.len();

        // Parents: mostly real directories, sometimes any name (ENOTDIR).
        let mut dir_arms = vec![(9, select(dirs.clone()).boxed())];
        if !entries.is_empty() {
            let e = entries.clone();
            dir_arms.push((
                1,
                select(e)
                    .prop_map(|(mut p, n, _)| {
                        p.push(n);
                        p
                    })
                    .boxed(),
            ));
        }
        let dir = weighted(dir_arms);
        let fresh_path = (dir.clone(), name()).prop_map(|(d, n)| Target::Path(d, n));
        let mut target_arms = vec![(1, fresh_path.boxed())];
        let to_path = |(p, n, _): (Vec<String>, String, Id)| Target::Path(p, n);
        if !entries.is_empty() {
            target_arms.push((3, select(entries.clone()).prop_map(to_path).boxed()));
        }
        if !files.is_empty() {
            target_arms.push((8, select(files.clone()).prop_map(to_path).boxed()));
        }
        if nhandles > 0 {
            target_arms.push((3, any::<usize>().prop_map(Target::Handle).boxed()));
        }
        let target = weighted(target_arms);
        // An existing name (for unlink, rename sources), or a fresh one.
        let mut existing_arms = vec![(1, (dir.clone(), name()).boxed())];
        if !entries.is_empty() {
            existing_arms.push((4, select(entries.clone()).prop_map(|(p, n, _)| (p, n)).boxed()));
        }
        let existing = weighted(existing_arms);

        let perm = select(&[0o644u32, 0o600, 0o755, 0o4755][..]);
        let owner = select(&[0u32, 1000][..]);
        let mut arms: Vec<(u32, BoxedStrategy<Op>)> = vec![
            (
                10,
                (dir.clone(), name(), perm.clone(), owner.clone(), owner.clone())
                    .prop_map(|(dir, name, perm, uid, gid)| Op::Create {
                        dir,
                        name,
                        perm,
                        uid,
                        gid,
                    })
                    .boxed(),
            ),
            (
                5,
                (dir.clone(), name(), perm)
                    .prop_map(|(dir, name, perm)| Op::Mkdir { dir, name, perm })
                    .boxed(),
            ),
            (
                2,
                (dir.clone(), name(), any::<bool>(), 0..0x1_0000u64)
                    .prop_map(|(dir, name, fifo, rdev)| Op::Mknod { dir, name, fifo, rdev })
                    .boxed(),
            ),
            (
                2,
                (
                    dir.clone(),
                    name(),
                    prop_oneof![
                        8 => "[a-z/.]{1,40}".prop_map(String::into_bytes),
                        1 => Just(Vec::new()),
                        1 => Just(vec![b'L'; 4095]),
                        1 => Just(vec![b'L'; 4096]),
                    ],
                )
                    .prop_map(|(dir, name, target)| Op::Symlink { dir, name, target })
                    .boxed(),
            ),
            (2, target.clone().prop_map(Op::Readlink).boxed()),
            (
                4,
                (target.clone(), dir.clone(), name())
                    .prop_map(|(src, dir, name)| Op::Link { src, dir, name })
                    .boxed(),
            ),
            (
                6,
                existing
                    .clone()
                    .prop_map(|(dir, name)| Op::Unlink { dir, name })
                    .boxed(),
            ),
            (
                3,
                existing.clone().prop_map(|(dir, name)| Op::Rmdir { dir, name }).boxed(),
            ),
            (
                10,
                (
                    existing.clone(),
                    prop_oneof![
                        2 => (dir.clone(), name()).boxed(),
                        1 => existing.clone(),
                    ],
                    select(&[0, 0, RENAME_NOREPLACE, RENAME_EXCHANGE][..]),
                )
                    .prop_map(|((from, name), (to, newname), flags)| Op::Rename {
                        from,
                        name,
                        to,
                        newname,
                        flags,
                    })
                    .boxed(),
            ),
            (
                12,
                (target.clone(), offset(), length(), any::<u8>())
                    .prop_map(|(at, off, len, seed)| Op::Write { at, off, len, seed })
                    .boxed(),
            ),
            (
                6,
                (target.clone(), offset(), length())
                    .prop_map(|(at, off, len)| Op::Read { at, off, len })
                    .boxed(),
            ),
            (
                4,
                (target.clone(), offset())
                    .prop_map(|(at, size)| Op::Truncate { at, size })
                    .boxed(),
            ),
            (
                3,
                (
                    target.clone(),
                    proptest::option::of(select(&[0o600u32, 0o777, 0o1777, 0o4711, 0o100644][..])),
                    proptest::option::of(0..3u32),
                    proptest::option::of(0..3u32),
                    proptest::option::of(0..1_000_000_000_000i64),
                )
                    .prop_map(|(at, mode, uid, gid, mtime)| Op::Chattr {
                        at,
                        mode,
                        uid,
                        gid,
                        mtime,
                    })
                    .boxed(),
            ),
            (
                4,
                (
                    target.clone(),
                    select(&[0u32, 1, 3][..]),
                    offset(),
                    length().prop_map(|l| l as u64),
                )
                    .prop_map(|(at, mode, off, len)| Op::Fallocate { at, mode, off, len })
                    .boxed(),
            ),
            (
                4,
                (target.clone(), offset(), any::<bool>())
                    .prop_map(|(at, off, data)| Op::Lseek { at, off, data })
                    .boxed(),
            ),
            (
                2,
                (target.clone(), 1..=255u8, 50..300usize)
                    .prop_map(|(at, seed, count)| Op::WriteMany { at, seed, count })
                    .boxed(),
            ),
            (
                1,
                (dir.clone(), Just(s.next_id), 20..200usize)
                    .prop_map(|(dir, base, count)| Op::DirChurn { dir, base, count })
                    .boxed(),
            ),
            (3, target.prop_map(Op::Open).boxed()),
            (
                3,
                (dir.clone(), 1..5usize)
                    .prop_map(|(dir, chunk)| Op::Readdir { dir, chunk })
                    .boxed(),
            ),
            (1, Just(Op::Statfs).boxed()),
            (2, Just(Op::Remount).boxed()),
            (2, Just(Op::Crash).boxed()),
            (1, any::<bool>().prop_map(|crash| Op::ReadOnly { crash }).boxed()),
        ];
        if nhandles > 0 {
            arms.push((6, any::<usize>().prop_map(Op::Release).boxed()));
        }
        if !subdirs.is_empty() {
            arms.push((
                3,
                select(subdirs.clone())
                    .prop_map(|(dir, name, _)| Op::Rmdir { dir, name })
                    .boxed(),
            ));
            // A directory into itself or below itself.
            arms.push((
                2,
                (select(subdirs), select(&POOL[..]), any::<bool>())
                    .prop_map(|((from, name, _), newname, deeper)| {
                        let mut to = from.clone();
                        to.push(name.clone());
                        if deeper {
                            to.push(newname.to_string());
                        }
                        Op::Rename {
                            from,
                            name,
                            to,
                            newname: newname.to_string(),
                            flags: 0,
                        }
                    })
                    .boxed(),
            ));
        }
        weighted(arms)
    }

    fn preconditions(s: &Model, op: &Op) -> bool {
        !op.uses_handle() || !s.handles.is_empty()
    }

    fn apply(mut s: Model, op: &Op) -> Model {
        s.expect = s.step(op);
        s
    }
}

// ---------------------------------------------------------------------------
// The system under test.

struct Sut {
    region: Arc<dyn Region>,
    fs: Option<Fs>,
    inos: HashMap<Id, Ino>,
    /// Inode numbers of the open handles, parallel to the model's.
    handles: Vec<Ino>,
    /// The model after the last transition, for the teardown's check.
    model: Option<Model>,
}

/// What a call returned, for comparison with [`Expect`].
#[derive(Debug)]
enum Got {
    Unit,
    Attr(Attr),
    Len(usize),
    Data(Vec<u8>),
    Offset(u64),
}

impl Sut {
    fn fs(&self) -> &Fs {
        self.fs.as_ref().unwrap()
    }

    fn resolve(&self, path: &[String]) -> Result<Ino, Error> {
        path.iter()
            .try_fold(ROOT_INO, |d, c| Ok(self.fs().lookup(d, c.as_bytes())?.ino))
    }

    fn target(&self, t: &Target) -> Result<Ino, Error> {
        match t {
            Target::Path(p, n) => Ok(self.fs().lookup(self.resolve(p)?, n.as_bytes())?.ino),
            Target::Handle(i) => Ok(self.handles[i % self.handles.len()]),
        }
    }

    /// Runs `op`; `first_id` is the model number its first new node gets.
    fn run(&mut self, op: &Op, first_id: Id) -> Result<Got, Error> {
        let fs = self.fs();
        let attr = |r: Result<Attr, Error>| r.map(Got::Attr);
        match op {
            Op::Create {
                dir,
                name,
                perm,
                uid,
                gid,
            } => attr(fs.create(self.resolve(dir)?, name.as_bytes(), *perm, *uid, *gid)),
            Op::Mkdir { dir, name, perm } => attr(fs.mkdir(self.resolve(dir)?, name.as_bytes(), *perm, 0, 0)),
            Op::Mknod { dir, name, fifo, rdev } => {
                let (mode, rdev) = if *fifo {
                    (libc::S_IFIFO, 0)
                } else {
                    (libc::S_IFCHR, *rdev)
                };
                attr(fs.mknod(self.resolve(dir)?, name.as_bytes(), mode | 0o640, rdev, 0, 0))
            }
            Op::Symlink { dir, name, target } => attr(fs.symlink(self.resolve(dir)?, name.as_bytes(), target, 0, 0)),
            Op::Readlink(t) => fs.readlink(self.target(t)?).map(Got::Data),
            Op::Link { src, dir, name } => {
                let src = self.target(src)?;
                attr(fs.link(src, self.resolve(dir)?, name.as_bytes()))
            }
            Op::Unlink { dir, name } => fs.unlink(self.resolve(dir)?, name.as_bytes()).map(|()| Got::Unit),
            Op::Rmdir { dir, name } => fs.rmdir(self.resolve(dir)?, name.as_bytes()).map(|()| Got::Unit),
            Op::Rename {
                from,
                name,
                to,
                newname,
                flags,
            } => {
                let sp = self.resolve(from)?;
                let dp = self.resolve(to)?;
                fs.rename(sp, name.as_bytes(), dp, newname.as_bytes(), *flags)
                    .map(|()| Got::Unit)
            }
            Op::Write { at, off, len, seed } => fs
                .write(self.target(at)?, *off, &pattern(*seed, *off, *len))
                .map(Got::Len),
            Op::Read { at, off, len } => {
                let mut buf = vec![0xEE; *len];
                let n = fs.read(self.target(at)?, *off, &mut buf)?;
                buf.truncate(n);
                Ok(Got::Data(buf))
            }
            Op::Truncate { at, size } => {
                let set = SetAttr {
                    size: Some(*size),
                    ..SetAttr::default()
                };
                attr(fs.setattr(self.target(at)?, &set))
            }
            Op::Chattr {
                at,
                mode,
                uid,
                gid,
                mtime,
            } => {
                let set = SetAttr {
                    mode: *mode,
                    uid: *uid,
                    gid: *gid,
                    mtime: *mtime,
                    ..SetAttr::default()
                };
                attr(fs.setattr(self.target(at)?, &set))
            }
            Op::Fallocate { at, mode, off, len } => {
                fs.fallocate(self.target(at)?, *mode, *off, *len).map(|()| Got::Unit)
            }
            Op::Lseek { at, off, data } => {
                let whence = if *data { SEEK_DATA } else { SEEK_HOLE };
                fs.lseek(self.target(at)?, *off, whence).map(Got::Offset)
            }
            Op::WriteMany { at, seed, count } => {
                let ino = self.target(at)?;
                for (off, data) in many_writes(*seed, *count) {
                    fs.write(ino, off, &data)?;
                }
                Ok(Got::Unit)
            }
            Op::DirChurn { dir, base, count } => {
                let parent = self.resolve(dir)?;
                // The model numbers the files in creation order from
                // `first_id`; the kept ones need their inode numbers.
                let mut kept = Vec::new();
                let mut churn = || -> Result<(), Error> {
                    for i in 0..*count {
                        let name = churn_name(*base, i);
                        let a = fs.create(parent, name.as_bytes(), 0o600, 0, 0)?;
                        if i % 8 != 0 {
                            fs.unlink(parent, name.as_bytes())?;
                        } else {
                            kept.push((first_id + i as u64, a.ino));
                        }
                    }
                    Ok(())
                };
                let r = churn();
                self.inos.extend(kept);
                r.map(|()| Got::Unit)
            }
            Op::Open(t) => attr(fs.open_handle(self.target(t)?)),
            Op::Release(i) => {
                let ino = self.handles.remove(i % self.handles.len());
                self.fs().release_handle(ino).map(|()| Got::Unit)
            }
            // Only the error cases get here; listings are compared apart.
            Op::Readdir { dir, .. } => fs.readdir(self.resolve(dir)?, 0, |_| true).map(|()| Got::Unit),
            Op::Statfs | Op::Remount | Op::Crash | Op::ReadOnly { .. } => {
                unreachable!("checked by the harness directly")
            }
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
            if let Some(children) = n.children() {
                let want: Vec<(Vec<u8>, Ino)> = children
                    .iter()
                    .map(|(name, c)| (name.clone().into_bytes(), self.inos[c]))
                    .collect();
                let got = self.listing(ino, usize::MAX, ctx);
                assert_eq!(got, want, "names in model directory {id} after {ctx:?}");
                assert_eq!(
                    fs.lookup(ino, b"..").unwrap().ino,
                    self.inos[&n.parent],
                    "'..' of model directory {id} after {ctx:?}"
                );
            }
        }
    }

    /// A full readdir in chunks of `chunk` entries, resuming from each
    /// chunk's last offset: sorted names, without "." and "..".
    fn listing(&self, ino: Ino, chunk: usize, ctx: &dyn fmt::Debug) -> Vec<(Vec<u8>, Ino)> {
        let fs = self.fs();
        let mut all = Vec::new();
        let mut off = 0;
        loop {
            let mut got = Vec::new();
            fs.readdir(ino, off, |e| {
                got.push(e);
                got.len() >= chunk
            })
            .unwrap();
            let Some(last) = got.last() else { break };
            assert!(last.next_offset > off, "readdir offsets go forward ({ctx:?})");
            off = last.next_offset;
            all.extend(got);
        }
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

    fn check_seek(&self, b: &Bytes, off: u64, data: bool, got: &Result<Got, Error>, op: &Op) {
        let size = b.size;
        if off >= size {
            assert!(
                matches!(got, Err(Error::NoSuchOffset)),
                "lseek at/after EOF must be ENXIO: {op:?} gave {got:?}"
            );
            return;
        }
        let nz = b.next_nonzero(off);
        match got {
            Ok(Got::Offset(r)) if data => {
                assert!(
                    (off..size).contains(r),
                    "SEEK_DATA result {r} outside [{off}, {size}): {op:?}"
                );
                if let Some(nz) = nz {
                    assert!(*r <= nz, "SEEK_DATA {r} skips data at {nz}: {op:?}");
                }
            }
            Ok(Got::Offset(r)) => {
                assert!(
                    (off..=size).contains(r),
                    "SEEK_HOLE result {r} outside [{off}, {size}]: {op:?}"
                );
                let page_end = ((r / PAGE + 1) * PAGE).min(size);
                if *r < size {
                    assert!(
                        b.read(*r, (page_end - r) as usize).iter().all(|&x| x == 0),
                        "SEEK_HOLE {r} points at data: {op:?}"
                    );
                }
            }
            Err(Error::NoSuchOffset) if data => {
                assert!(nz.is_none(), "SEEK_DATA ENXIO but data at {nz:?}: {op:?}");
            }
            other => panic!("{op:?} gave {other:?}"),
        }
    }

    fn remount(&mut self, m: &Model, r: &Remount, op: &dyn fmt::Debug) {
        let fs = self.fs.take().unwrap();
        let before = fs.statfs();
        if r.clean {
            fs.unmount().unwrap();
        } else {
            drop(fs);
        }
        self.handles.clear();
        assert_fsck_clean(&self.region);
        if r.read_only {
            let ro = Fs::open(self.region.clone(), MountOptions { read_only: true }).unwrap();
            assert_eq!(ro.mount_report().clean, r.clean, "read-only mount after {op:?}");
            self.fs = Some(ro);
            self.check_shape(m, op);
            self.check_contents(m, op);
            self.check_read_only(m, op);
            drop(self.fs.take());
            assert_fsck_clean(&self.region);
        }
        let fs = mount(&self.region);
        let rep = fs.mount_report();
        let (scanned, reclaimed) = if r.clean { (0, 0) } else { (r.live, r.orphans) };
        assert_eq!(
            (rep.clean, rep.scanned_inodes, rep.orphans_reclaimed),
            (r.clean, scanned, reclaimed),
            "mount report (clean, scanned, orphans) after {op:?}"
        );
        let after = fs.statfs();
        if r.orphans == 0 {
            assert_eq!(after, before, "statfs across {op:?}: space leaked or invented");
        } else {
            assert!(after.blocks_free > before.blocks_free, "{op:?}");
        }
        self.fs = Some(fs);
        self.check_shape(m, op);
        self.check_contents(m, op);
    }

    /// On a read-only mount every change gives EROFS and changes nothing.
    fn check_read_only(&self, m: &Model, op: &dyn fmt::Debug) {
        let fs = self.fs();
        let file = m
            .nodes
            .iter()
            .find(|(_, n)| matches!(n.body, Body::File(_)))
            .map_or(ROOT_INO, |(id, _)| self.inos[id]);
        let set = SetAttr {
            mode: Some(0o600),
            size: Some(1),
            ..SetAttr::default()
        };
        let calls: Vec<(&str, Result<(), Error>)> = vec![
            ("create", fs.create(ROOT_INO, b"ro", 0o644, 0, 0).map(drop)),
            ("mkdir", fs.mkdir(ROOT_INO, b"ro", 0o755, 0, 0).map(drop)),
            (
                "mknod",
                fs.mknod(ROOT_INO, b"ro", libc::S_IFIFO | 0o644, 0, 0, 0).map(drop),
            ),
            ("symlink", fs.symlink(ROOT_INO, b"ro", b"t", 0, 0).map(drop)),
            ("link", fs.link(file, ROOT_INO, b"ro").map(drop)),
            ("unlink", fs.unlink(ROOT_INO, b"a")),
            ("rmdir", fs.rmdir(ROOT_INO, b"d1")),
            ("rename", fs.rename(ROOT_INO, b"a", ROOT_INO, b"b", 0)),
            ("setattr", fs.setattr(file, &set).map(drop)),
            ("write", fs.write(file, 0, b"ro").map(drop)),
            ("fallocate", fs.fallocate(file, 0, 0, 4096)),
        ];
        for (what, r) in calls {
            match r {
                Err(e) => assert_eq!(e.errno(), libc::EROFS, "{what} on a read-only mount: {e:?}"),
                Ok(()) => panic!("{what} succeeded on a read-only mount after {op:?}"),
            }
        }
        self.check_shape(m, op);
    }
}

struct NovaTest;

impl StateMachineTest for NovaTest {
    type SystemUnderTest = Sut;
    type Reference = Reference;

    fn init_test(_: &Model) -> Sut {
        let region = fresh(64, 2);
        let fs = mount(&region);
        Sut {
            region,
            fs: Some(fs),
            inos: HashMap::from([(ROOT, ROOT_INO)]),
            handles: Vec::new(),
            model: None,
        }
    }

    fn apply(sut: Sut, m: &Model, op: Op) -> Sut {
        let mut sut = step(sut, m, op);
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
    }

    fn teardown(mut sut: Sut) {
        // A last clean remount, compared in full.
        let Some(mut m) = sut.model.take() else {
            return;
        };
        let Expect::Remounted(r) = m.step(&Op::Remount) else {
            unreachable!()
        };
        sut.remount(&m, &r, &"teardown");
        sut.fs.take().unwrap().unmount().unwrap();
        assert_fsck_clean(&sut.region);
    }
}

/// Runs `op` on novafs and compares its result with the model's.
fn step(mut sut: Sut, m: &Model, op: Op) -> Sut {
    {
        match (&m.expect, &op) {
            (Expect::Skip, _) => return sut,
            (Expect::Remounted(r), _) => {
                sut.remount(m, r, &op);
                return sut;
            }
            (Expect::Statfs, _) => {
                let s = sut.fs().statfs();
                assert_eq!((s.block_size, s.name_max), (4096, 255));
                assert!(s.blocks_free <= s.blocks && s.files_free <= s.files, "{s:?}");
                assert!(s.blocks > 14_000, "64 MiB region: {s:?}");
                return sut;
            }
            (Expect::Listing(id), Op::Readdir { dir, chunk }) => {
                let ino = sut.resolve(dir).unwrap();
                assert_eq!(ino, sut.inos[id]);
                let want: Vec<(Vec<u8>, Ino)> = m
                    .node(*id)
                    .children()
                    .unwrap()
                    .iter()
                    .map(|(name, c)| (name.clone().into_bytes(), sut.inos[c]))
                    .collect();
                assert_eq!(sut.listing(ino, *chunk, &op), want, "{op:?}");
                return sut;
            }
            _ => {}
        }
        let first_id = sut.model.as_ref().map_or(ROOT + 1, |p| p.next_id);
        let got = sut.run(&op, first_id);
        match (&m.expect, &got) {
            (Expect::Err(want), Err(e)) => {
                assert!(
                    want.contains(&e.errno()),
                    "{op:?}: got {e:?} (errno {}), want one of {want:?}",
                    e.errno()
                );
            }
            (Expect::Ok, Ok(Got::Unit)) => {}
            (Expect::Written(n), Ok(Got::Len(k))) => assert_eq!(n, k, "{op:?}"),
            (Expect::Data(d), Ok(Got::Data(g))) => {
                assert_eq!(g.len(), d.len(), "length of {op:?}");
                assert!(g == d, "bytes of {op:?} differ from the model");
            }
            (Expect::Seek(id), _) => {
                let Body::File(b) = &m.node(*id).body else {
                    unreachable!()
                };
                let Op::Lseek { off, data, .. } = op else {
                    unreachable!()
                };
                sut.check_seek(b, off, data, &got, &op);
            }
            (Expect::Opened(id, keep), Ok(Got::Attr(a))) => {
                sut.check_attr(m, *id, a, &op);
                if *keep {
                    sut.handles.push(a.ino);
                } else {
                    sut.fs().release_handle(a.ino).unwrap();
                }
            }
            (Expect::Node(id), Ok(Got::Attr(a))) => {
                if let Some(&ino) = sut.inos.get(id) {
                    assert_eq!(ino, a.ino, "{op:?} acted on the wrong inode");
                } else {
                    assert!(
                        !sut.inos.iter().any(|(k, &i)| i == a.ino && m.nodes.contains_key(k)),
                        "{op:?} reused live inode {}",
                        a.ino
                    );
                    sut.inos.insert(*id, a.ino);
                }
                sut.check_attr(m, *id, a, &op);
            }
            (want, got) => panic!("{op:?}: got {got:?}, want {want:?}"),
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
