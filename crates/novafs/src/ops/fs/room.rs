//! Space on demand (issue 28). Thorough GC lets a growing log's dead
//! entries wait longer for fast GC than NOVA does (`gc::Patience`), which
//! costs log pages; an operation that finds the file system full takes
//! those pages back before it answers ENOSPC.

use std::cmp::Reverse;
use std::sync::Arc;

use super::Fs;
use crate::cache::Cell;
use crate::error::{Error, Result};
use crate::gc::{self, Patience};

impl Fs {
    /// Runs `op`, an operation that writes, inside the epoch gate
    /// (`Fs::writable`). If it found no space, compacts the logs NOVA's
    /// half would have compacted ([`Fs::compact_for_space`]) and runs it
    /// once more if space came back. An operation that fails with ENOSPC
    /// has changed nothing, so running it again is safe; the second try
    /// holds no lock the first took.
    pub(super) fn writing<T>(&self, op: impl Fn() -> Result<T>) -> Result<T> {
        let attempt = || {
            let _op = self.writable()?;
            op()
        };
        match attempt() {
            Err(Error::NoSpace) if self.compact_for_space() => attempt(),
            r => r,
        }
    }

    /// Compacts cached logs that thorough GC left waiting for fast GC
    /// though NOVA's half would have compacted them, those that give the
    /// most pages back first, until an eighth of the reserve has come
    /// back: the others wait on for fast GC. Each is compacted under its
    /// own lock as its own operations take it (`gc::compact_for_space`),
    /// one pass at a time. Returns whether free space grew meanwhile, by
    /// this pass or by anything else while this one waited for its turn.
    fn compact_for_space(&self) -> bool {
        let alloc = self.ctx.alloc();
        let free = alloc.free_pages();
        let _one = self.space_pass.lock();
        let goal = alloc.free_pages() + (alloc.reserved_pages() / 8).max(1);
        let mut due: Vec<(u64, Arc<Cell>)> = self
            .cache
            .cells()
            .into_iter()
            .filter_map(|cell| {
                let back = gc::pages_back(&cell.state.read(), Patience::Half)?;
                Some((back, cell))
            })
            .collect();
        due.sort_unstable_by_key(|(pages, _)| Reverse(*pages));
        for (_, cell) in due {
            if alloc.free_pages() >= goal {
                break;
            }
            let _op = self.ctx.snapshots().epochs.enter();
            let mut st = cell.state.write();
            match gc::compact_for_space(&self.ctx, &mut st) {
                Ok(()) => {}
                // The rest would not fit either.
                Err(Error::NoSpace) => break,
                Err(e) => tracing::debug!(ino = st.meta.attr.ino, error = %e, "log not compacted for space"),
            }
        }
        alloc.free_pages() > free
    }
}
