//! The DRAM inode cache (NOVA §4.7: an inode's state is rebuilt from its
//! log on first access) and the lock ordering every operation follows:
//! each inode has its own lock, there is no global lock on the data path,
//! and an operation on several inodes locks them in inode-number order.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use pm::latency::{self, Part};

use crate::lock::{Mutex, Rank, RwLock, RwLockWriteGuard};

use crate::commit::{Ctx, Fate};
use crate::error::{Error, Result};
use crate::hash::U64Map;
use crate::inode::{Ino, InodeState};
use crate::journal::Durable;
use crate::snapshot::Kept;

const CACHE_SHARDS: usize = 256;

/// The in-DRAM inode: its state behind a lock, plus the parent of a
/// directory readable without the lock (for rename's loop check).
pub(crate) struct Cell {
    pub state: RwLock<InodeState>,
    pub parent: AtomicU64,
}

/// Inode number → cell, sharded to keep lookups off one lock.
pub(crate) struct Cache {
    shards: Vec<Mutex<U64Map<Arc<Cell>>>>,
    /// The kernel's lookups of non-directories (FUSE: each stands until
    /// its FORGET), and whether the inode was freed meanwhile: a freed
    /// file's number is not reused while the kernel holds one, or its late
    /// FORGET would land on the new inode of that number.
    held: Mutex<U64Map<Held>>,
    /// The snapshot epoch a read-only view of a snapshot sees; `None` for
    /// the live file system.
    view: Option<u64>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Held {
    lookups: u64,
    freed: bool,
}

/// ENOENT for an inode freed under a holder of a stale reference.
pub(crate) fn alive(st: &InodeState) -> Result<()> {
    if st.dead {
        Err(Error::NotFound)
    } else {
        Ok(())
    }
}

/// Whether `e` says an object has no good copy left (damage the checksums
/// caught, or a media error): it answers EIO, and a name that leads to it
/// stays, so that the loss shows (as ext4 answers EIO for an inode that
/// fails its checksum) until `fsck --repair` removes the name.
pub(crate) fn is_loss(e: &Error) -> bool {
    matches!(e, Error::Corrupt(_) | Error::Pm(_))
}

impl Cache {
    /// The cache of the live file system (`view` `None`) or of a view of
    /// snapshot `view`.
    pub(crate) fn new(view: Option<u64>) -> Cache {
        Cache {
            shards: (0..CACHE_SHARDS)
                .map(|_| Mutex::new(Rank::CacheShard, U64Map::default()))
                .collect(),
            held: Mutex::new(Rank::CacheHeld, U64Map::default()),
            view,
        }
    }

    fn shard(&self, ino: Ino) -> &Mutex<U64Map<Arc<Cell>>> {
        &self.shards[ino as usize % CACHE_SHARDS]
    }

    /// The DRAM inode, rebuilt from its log on first access (NOVA §4.7 lazy
    /// rebuild). Loading under the cache-shard lock makes "not cached" and
    /// "load" atomic with respect to deletion, which evicts under it too.
    pub(crate) fn get(&self, ctx: &Ctx, ino: Ino) -> Result<Arc<Cell>> {
        let _span = latency::enter(Part::Lookup);
        let mut shard = self.shard(ino).lock();
        if let Some(c) = shard.get(&ino) {
            return Ok(c.clone());
        }
        let off = ctx.tables().locate(ino)?;
        let st = match self.view {
            None => ctx.live_record(off, ino).and_then(|rec| ctx.load_inode(off, &rec)),
            Some(epoch) => ctx
                .record_at(off, ino, epoch)
                .and_then(|rec| ctx.load_inode_at(off, &rec, epoch)),
        }
        .inspect_err(|e| {
            if is_loss(e) {
                ctx.health().lost(ino, e);
            }
        })?;
        let parent = st.dir().map_or(0, |d| d.parent());
        let cell = Arc::new(Cell {
            state: RwLock::new(Rank::Inode, st),
            parent: AtomicU64::new(parent),
        });
        shard.insert(ino, cell.clone());
        Ok(cell)
    }

    /// `(ino, cell)` for each of `inos`.
    pub(crate) fn get_all(&self, ctx: &Ctx, inos: &[Ino]) -> Result<Vec<(Ino, Arc<Cell>)>> {
        inos.iter().map(|&i| Ok((i, self.get(ctx, i)?))).collect()
    }

    /// Caches a brand-new inode; `parent` is a directory's parent, else 0.
    pub(crate) fn insert(&self, st: InodeState, parent: Ino) {
        let ino = st.meta.attr.ino;
        let cell = Arc::new(Cell {
            state: RwLock::new(Rank::Inode, st),
            parent: AtomicU64::new(parent),
        });
        self.shard(ino).lock().insert(ino, cell);
    }

    /// Every cached inode.
    pub(crate) fn cells(&self) -> Vec<Arc<Cell>> {
        self.shards
            .iter()
            .flat_map(|s| s.lock().values().cloned().collect::<Vec<_>>())
            .collect()
    }

    /// The kernel looked up non-directory `ino` once more.
    pub(crate) fn hold(&self, ino: Ino) {
        self.held.lock().entry(ino).or_default().lookups += 1;
    }

    /// The kernel forgot `n` lookups of `ino`. Returns false when it held
    /// none (a directory's, counted in its state). The number of a freed
    /// inode goes back to the table with the last.
    pub(crate) fn unhold(&self, ctx: &Ctx, ino: Ino, n: u64) -> bool {
        let mut held = self.held.lock();
        let Some(h) = held.get_mut(&ino) else {
            return false;
        };
        h.lookups = h.lookups.saturating_sub(n);
        if h.lookups == 0 {
            if h.freed {
                ctx.tables().release(ino);
            }
            held.remove(&ino);
        }
        true
    }

    /// Marks an inode whose life ended dead: `proof` is the commit of its
    /// ending (R3). A freed inode's pages and slot go back; a kept one
    /// keeps them all and is listed in its snapshot's manifest.
    pub(crate) fn forget(&self, ctx: &Ctx, st: &mut InodeState, proof: &Durable, fate: Fate) {
        let ino = st.meta.attr.ino;
        st.dead = true;
        // Evict before the slot can be claimed again: a create reusing the
        // number must not have its new cache entry removed here.
        self.shard(ino).lock().remove(&ino);
        match fate {
            Fate::Free => {
                let _span = latency::enter(Part::Free);
                let (log, data) = st.take_pages();
                ctx.release_log(proof, &log);
                ctx.alloc().release(proof, &data);
                match self.held.lock().get_mut(&ino) {
                    Some(h) => h.freed = true, // released by the last FORGET
                    None => ctx.tables().release(ino),
                }
            }
            Fate::Keep { snapshot } => {
                let item = Kept::Inode {
                    birth: st.born,
                    ino,
                    off: st.off,
                    pages: st.pages(ctx.bounds()).len() as u64,
                };
                ctx.snapshots().keep(snapshot, item);
            }
        }
    }
}

/// Write locks on a set of inodes taken in inode-number order.
pub(crate) struct Locked<'a> {
    inos: Vec<Ino>,
    guards: Vec<RwLockWriteGuard<'a, InodeState>>,
}

impl Locked<'_> {
    /// Locks `cells` (deduplicated) for writing in inode-number order.
    pub(crate) fn lock(cells: &[(Ino, Arc<Cell>)]) -> Result<Locked<'_>> {
        let mut order: Vec<&(Ino, Arc<Cell>)> = cells.iter().collect();
        order.sort_by_key(|(ino, _)| *ino);
        order.dedup_by_key(|(ino, _)| *ino);
        let mut l = Locked {
            inos: Vec::new(),
            guards: Vec::new(),
        };
        for (ino, cell) in order {
            let g = cell.state.write();
            alive(&g)?;
            l.inos.push(*ino);
            l.guards.push(g);
        }
        Ok(l)
    }

    /// The locked state of `ino`. Every caller asks only for inodes it put
    /// in the set, so a miss is a bug in this crate, never bad input.
    pub(crate) fn get(&mut self, ino: Ino) -> &mut InodeState {
        let i = self
            .inos
            .iter()
            .position(|&x| x == ino)
            .expect("inode not locked by this operation");
        &mut self.guards[i]
    }
}
