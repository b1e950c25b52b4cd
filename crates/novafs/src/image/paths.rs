//! Names of inodes, found by walking the tree from the root: how scrub
//! reports what it could not repair by path, as `zpool status -v` lists
//! the files with permanent errors. Inodes carry no back pointer to their
//! names (NOVA §4.3: a name lives only in its directory's log), so the
//! walk is the one way; it runs only when there is something to name.

use std::collections::{HashMap, VecDeque};

use crate::cache::{alive, Cache};
use crate::commit::Ctx;
use crate::inode::{Ino, ROOT_INO};
use crate::layout::ftype_of_mode;

/// A path to each of `inos` that a name leads to (the first the walk
/// meets, breadth first: a shortest one) and how many other names it
/// has. Directories that cannot be read (lost, or removed meanwhile) are
/// passed over: what lies below them is left out.
pub(crate) fn names(ctx: &Ctx, cache: &Cache, inos: impl IntoIterator<Item = Ino>) -> HashMap<Ino, (Vec<u8>, u64)> {
    let mut found: HashMap<Ino, Option<(Vec<u8>, u64)>> = inos.into_iter().map(|i| (i, None)).collect();
    if found.is_empty() {
        return HashMap::new();
    }
    if let Some(root) = found.get_mut(&ROOT_INO) {
        *root = Some((b"/".to_vec(), 0));
    }
    let dir_type = ftype_of_mode(libc::S_IFDIR);
    let mut queue = VecDeque::from([(ROOT_INO, Vec::new())]);
    while let Some((dir, path)) = queue.pop_front() {
        // The entries are copied out: no directory stays locked while
        // others are loaded (a rename locks them in inode order).
        let entries: Vec<(Vec<u8>, Ino, u8)> = match cache.get(ctx, dir) {
            Ok(cell) => {
                let st = cell.state.read();
                match (alive(&st), st.dir()) {
                    (Ok(()), Ok(d)) => d.iter().map(|(n, e)| (n.to_vec(), e.ino, e.ftype)).collect(),
                    _ => continue,
                }
            }
            Err(_) => continue,
        };
        for (n, ino, ftype) in entries {
            let mut full = path.clone();
            full.push(b'/');
            full.extend_from_slice(&n);
            if let Some(slot) = found.get_mut(&ino) {
                match slot {
                    Some((_, others)) => *others += 1,
                    None => *slot = Some((full.clone(), 0)),
                }
            }
            if ftype == dir_type {
                queue.push_back((ino, full));
            }
        }
    }
    found.into_iter().filter_map(|(i, p)| Some((i, p?))).collect()
}
