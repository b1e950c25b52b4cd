//! The visible state of a mounted file system: every path from the root with
//! what a program can observe of it. Two states are equal when no program
//! could tell them apart through the API (inode numbers aside: hard links
//! are compared by which paths share an inode). Relaxed mode's torn
//! overwrites are the one state besides these (`torn`,
//! [`Tree::torn_write`]).

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::{Hash, Hasher};

use novafs::{FileType, Fs, Ino, ROOT_INO};

mod torn;

pub use torn::Overwrite;

/// File contents up to this size are kept in full (for readable diffs);
/// larger ones as a hash ([`Tree::capture_keeping`] keeps more).
pub const KEEP_BYTES: usize = 4096;

/// What a file holds.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Content {
    None,
    Bytes(Vec<u8>),
    /// Length and hash of a large file.
    Hash(u64, u64),
}

impl fmt::Debug for Content {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Content::None => write!(f, "-"),
            Content::Bytes(b) if b.len() <= 32 => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Content::Bytes(b) => write!(f, "{} bytes, hash {:016x}", b.len(), hash_bytes(b)),
            Content::Hash(n, h) => write!(f, "{n} bytes, hash {h:016x}"),
        }
    }
}

fn hash_bytes(b: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    b.hash(&mut h);
    h.finish()
}

/// One path's observable state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    pub kind: String,
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    pub blocks: u64,
    pub rdev: u64,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    /// The first path (in order) naming the same inode: hard links share it.
    pub first_name: String,
    pub content: Content,
    /// Symlink target.
    pub target: Option<String>,
    /// Extended attributes by name.
    pub xattrs: Vec<(String, Content)>,
}

/// Which attributes take part in comparisons.
#[derive(Clone, Copy, Debug)]
pub struct Compare {
    /// Compare atime/mtime/ctime. Every state of one run is captured from
    /// the same run, so times are exact and comparable.
    pub times: bool,
}

impl Default for Compare {
    fn default() -> Self {
        Compare { times: true }
    }
}

/// The whole visible tree, by path ("/" is the root).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Tree {
    pub nodes: BTreeMap<String, Node>,
    /// The snapshot list: names, epochs and a digest of what each shows
    /// (its view's tree), oldest first.
    pub snapshots: Vec<(String, u64, u64)>,
}

impl fmt::Debug for Tree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (p, n) in &self.nodes {
            writeln!(f, "  {p}: {}", brief(n))?;
        }
        if !self.snapshots.is_empty() {
            writeln!(f, "  snapshots {:?}", self.snapshots)?;
        }
        Ok(())
    }
}

fn brief(n: &Node) -> String {
    let mut s = format!(
        "{} {:o} uid {} gid {} nlink {} size {} blocks {}",
        n.kind, n.perm, n.uid, n.gid, n.nlink, n.size, n.blocks
    );
    if n.rdev != 0 {
        s += &format!(" rdev {}", n.rdev);
    }
    if let Some(t) = &n.target {
        s += &format!(" -> {t:?}");
    }
    if n.content != Content::None {
        s += &format!(" data {:?}", n.content);
    }
    for (name, v) in &n.xattrs {
        s += &format!(" {name}={v:?}");
    }
    s += &format!(" times {}/{}/{}", n.atime, n.mtime, n.ctime);
    s
}

impl Tree {
    /// Walks `fs` from the root. Every entry readdir lists must also be
    /// found by lookup and read back whole; any error is returned as text.
    pub fn capture(fs: &Fs) -> Result<Tree, String> {
        Tree::capture_keeping(fs, KEEP_BYTES)
    }

    /// [`Tree::capture`] keeping the contents of files up to `keep` bytes
    /// in full ([`KEEP_BYTES`] by default), larger ones as a hash. Trees
    /// compared with each other must keep the same.
    pub fn capture_keeping(fs: &Fs, keep: usize) -> Result<Tree, String> {
        let mut tree = Tree::default();
        let mut first: HashMap<Ino, String> = HashMap::new();
        let mut stack = vec![(ROOT_INO, "/".to_string())];
        let root = fs.getattr(ROOT_INO).map_err(|e| format!("getattr /: {e}"))?;
        tree.nodes.insert("/".into(), node(fs, &root, "/", keep, &mut first)?);
        while let Some((dir, path)) = stack.pop() {
            let mut names = Vec::new();
            fs.readdir(dir, 0, |e| {
                if e.name != b"." && e.name != b".." {
                    names.push((e.name, e.kind, e.ino));
                }
                false
            })
            .map_err(|e| format!("readdir {path}: {e}"))?;
            for (name, kind, ino) in names {
                let name_s = String::from_utf8_lossy(&name).into_owned();
                let p = if path == "/" {
                    format!("/{name_s}")
                } else {
                    format!("{path}/{name_s}")
                };
                let a = fs.lookup(dir, &name).map_err(|e| format!("lookup {p}: {e}"))?;
                if a.ino != ino || a.kind != kind {
                    return Err(format!(
                        "{p}: readdir says inode {ino} ({kind:?}), lookup says {} ({:?})",
                        a.ino, a.kind
                    ));
                }
                if tree.nodes.contains_key(&p) {
                    return Err(format!("{p} is listed twice"));
                }
                let n = node(fs, &a, &p, keep, &mut first)?;
                tree.nodes.insert(p.clone(), n);
                if a.kind == FileType::Directory {
                    stack.push((a.ino, p));
                }
            }
        }
        // Paths were visited depth-first, not in order: name each link
        // group after its smallest path.
        let mut smallest: HashMap<String, String> = HashMap::new();
        for (p, n) in &tree.nodes {
            smallest.entry(n.first_name.clone()).or_insert_with(|| p.clone());
        }
        for n in tree.nodes.values_mut() {
            n.first_name = smallest[&n.first_name].clone();
        }
        if fs.snapshot_epoch().is_none() {
            // A view lists the same snapshots: only the live tree shows them.
            tree.snapshots = fs
                .snapshots()
                .into_iter()
                .map(|s| {
                    let name = String::from_utf8_lossy(&s.name).into_owned();
                    let view = fs.open_snapshot(&s.name).map_err(|e| format!("snapshot {name}: {e}"))?;
                    let seen = Tree::capture(&view).map_err(|e| format!("snapshot {name}: {e}"))?;
                    Ok((name, s.epoch, seen.digest(Compare::default())))
                })
                .collect::<Result<_, String>>()?;
        }
        Ok(tree)
    }

    /// A hash of the tree under `cmp`.
    pub fn digest(&self, cmp: Compare) -> u64 {
        let mut h = DefaultHasher::new();
        for (p, n) in &self.nodes {
            p.hash(&mut h);
            masked(n, cmp).hash(&mut h);
        }
        self.snapshots.hash(&mut h);
        h.finish()
    }

    /// Equality under `cmp`.
    pub fn same(&self, other: &Tree, cmp: Compare) -> bool {
        self.snapshots == other.snapshots
            && self.nodes.len() == other.nodes.len()
            && self
                .nodes
                .iter()
                .zip(&other.nodes)
                .all(|((pa, a), (pb, b))| pa == pb && masked(a, cmp) == masked(b, cmp))
    }

    /// Human-readable differences from `other` (what `self` shows that
    /// `other` does not), at most `max` lines.
    pub fn diff(&self, other: &Tree, cmp: Compare, max: usize) -> Vec<String> {
        let mut out = Vec::new();
        if self.snapshots != other.snapshots {
            out.push(format!(
                "snapshots {:?} (expected {:?})",
                self.snapshots, other.snapshots
            ));
        }
        for (p, a) in &self.nodes {
            match other.nodes.get(p) {
                None => out.push(format!("{p} exists ({})", brief(a))),
                Some(b) if masked(a, cmp) != masked(b, cmp) => {
                    out.push(format!("{p}: {}\n      expected {}", describe_diff(a, b), brief(b)))
                }
                _ => {}
            }
        }
        for (p, b) in &other.nodes {
            if !self.nodes.contains_key(p) {
                out.push(format!("{p} is missing ({})", brief(b)));
            }
        }
        out.truncate(max);
        out
    }
}

fn masked(n: &Node, cmp: Compare) -> Node {
    let mut n = n.clone();
    if !cmp.times {
        n.atime = 0;
        n.mtime = 0;
        n.ctime = 0;
    }
    n
}

fn describe_diff(a: &Node, b: &Node) -> String {
    let mut d = Vec::new();
    macro_rules! field {
        ($f:ident) => {
            if a.$f != b.$f {
                d.push(format!("{} {:?} (expected {:?})", stringify!($f), a.$f, b.$f));
            }
        };
    }
    field!(kind);
    field!(perm);
    field!(uid);
    field!(gid);
    field!(nlink);
    field!(size);
    field!(blocks);
    field!(rdev);
    field!(atime);
    field!(mtime);
    field!(ctime);
    field!(first_name);
    field!(target);
    field!(xattrs);
    if a.content != b.content {
        let mut s = format!("content {:?} (expected {:?})", a.content, b.content);
        if let (Content::Bytes(x), Content::Bytes(y)) = (&a.content, &b.content) {
            if let Some(i) = x.iter().zip(y).position(|(p, q)| p != q) {
                s += &format!(", first difference at byte {i}");
            }
        }
        d.push(s);
    }
    d.join(", ")
}

fn node(fs: &Fs, a: &novafs::Attr, path: &str, keep: usize, first: &mut HashMap<Ino, String>) -> Result<Node, String> {
    let first_name = first.entry(a.ino).or_insert_with(|| path.to_string()).clone();
    let mut content = Content::None;
    let mut target = None;
    match a.kind {
        FileType::RegularFile => {
            let mut buf = vec![0u8; a.size as usize];
            let n = fs.read(a.ino, 0, &mut buf).map_err(|e| format!("read {path}: {e}"))?;
            if n != buf.len() {
                return Err(format!("{path}: read {n} of {} bytes", buf.len()));
            }
            content = content_of(buf, keep);
        }
        FileType::Symlink => {
            let t = fs.readlink(a.ino).map_err(|e| format!("readlink {path}: {e}"))?;
            target = Some(String::from_utf8_lossy(&t).into_owned());
        }
        _ => {}
    }
    let list = fs.listxattr(a.ino).map_err(|e| format!("listxattr {path}: {e}"))?;
    let mut xattrs = Vec::new();
    for name in list.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let v = fs
            .getxattr(a.ino, name)
            .map_err(|e| format!("getxattr {path} {}: {e}", String::from_utf8_lossy(name)))?;
        xattrs.push((String::from_utf8_lossy(name).into_owned(), content_of(v, KEEP_BYTES)));
    }
    // A directory's size and blocks count its log pages, which log growth
    // and GC change apart from anything a program does: not part of the
    // state an operation must change atomically.
    let (size, blocks) = match a.kind {
        FileType::Directory => (0, 0),
        _ => (a.size, a.blocks),
    };
    Ok(Node {
        kind: format!("{:?}", a.kind),
        perm: a.perm,
        uid: a.uid,
        gid: a.gid,
        nlink: a.nlink,
        size,
        blocks,
        rdev: a.rdev,
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
        first_name,
        content,
        target,
        xattrs,
    })
}

/// Contents up to `keep` bytes in full, larger ones as a hash.
fn content_of(buf: Vec<u8>, keep: usize) -> Content {
    if buf.len() <= keep {
        Content::Bytes(buf)
    } else {
        Content::Hash(buf.len() as u64, hash_bytes(&buf))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::workload::{fresh_runner, tree_of, REGION_SIZE};
    use novafs_ops::Op;

    #[test]
    fn hard_links_share_a_name_and_differences_are_spelled_out() {
        let mut r = fresh_runner(REGION_SIZE, 1).unwrap();
        for op in [
            Op::Mount,
            Op::mkdir("/d"),
            Op::create("/d/f"),
            Op::write("/d/f", 0, 10, 1),
            Op::link("/d/f", "/a"),
            Op::symlink("/s", "d/f"),
        ] {
            r.apply(&op).unwrap();
        }
        let t1 = tree_of(&r).unwrap();
        assert_eq!(t1.nodes["/d/f"].first_name, "/a");
        assert_eq!(t1.nodes["/a"].nlink, 2);
        assert_eq!(t1.nodes["/s"].target.as_deref(), Some("d/f"));
        r.apply(&Op::write("/a", 5, 1, 2)).unwrap();
        let t2 = tree_of(&r).unwrap();
        let cmp = Compare { times: false };
        assert!(!t1.same(&t2, cmp));
        assert_ne!(t1.digest(cmp), t2.digest(cmp));
        let d = t2.diff(&t1, cmp, 10);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d[0].contains("first difference at byte 5"), "{d:?}");
    }
}
