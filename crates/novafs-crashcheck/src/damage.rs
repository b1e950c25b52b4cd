//! Media errors in crash images (`novafs crashcheck --media-errors`,
//! NOVA-Fortis §4.2): in a crash image, one copy — the primary or the
//! replica, chosen by the seed — of one cache line of metadata that the
//! interrupted (or just completed) operation wrote is damaged: its bytes
//! turn to garbage and, for a media error, reading them fails too. The
//! image must recover as the undamaged one does (a legal state, nothing
//! lost) and be whole again after a clean unmount.
//!
//! Which lines have two copies comes from the recording itself: a store to
//! a metadata line is followed, before any other store, by the same bytes
//! stored at its mirror (the mirroring view writes both before the fence);
//! the superblock's copies follow each other across one fence (rule R4).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use novafs::probe::layout::{
    decode, Bounds, Superblock, FEATURE_INCOMPAT_META_REPLICA, FEATURE_INCOMPAT_REPLICAS_STALE, PAGE_SIZE,
};
use pm::{CrashPoint, Event, Region, Trace, CACHELINE};

use crate::image::OverlayRegion;
use novafs_rng::SplitMix as Rng;

/// The two copies of one line of metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pair {
    pub primary: u64,
    pub replica: u64,
}

impl Pair {
    fn is_superblock(&self) -> bool {
        self.primary < PAGE_SIZE
    }
}

/// How a copy is damaged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The line reads as garbage (a scribble, or a media error the
    /// hardware does not report): only checksums and checks find it.
    Scribble,
    /// The line is garbage and reading it fails (a reported media error).
    MediaError,
}

/// One damaged copy.
#[derive(Clone, Copy, Debug)]
pub struct Damage {
    pub pair: Pair,
    /// The damaged copy is the replica (else the primary).
    pub replica: bool,
    pub kind: Kind,
}

impl Kind {
    /// The `novafs crashcheck` option that checks this kind.
    pub fn flag(self) -> &'static str {
        match self {
            Kind::Scribble => "--scribbles",
            Kind::MediaError => "--media-errors",
        }
    }
}

impl Damage {
    /// The offset of the damaged line.
    pub fn line(&self) -> u64 {
        if self.replica {
            self.pair.replica
        } else {
            self.pair.primary
        }
    }

    /// The crash image `base` + `patches` with this damage: its line's
    /// every byte changed (by `rng`), and poisoned for a media error.
    pub fn apply(&self, base: &std::sync::Arc<Vec<u8>>, patches: &[(u64, [u8; 64])], rng: &mut Rng) -> OverlayRegion {
        let line = self.line();
        let mut content = [0u8; 64];
        match patches.iter().find(|(off, _)| *off == line) {
            Some((_, c)) => content = *c,
            None => content.copy_from_slice(&base[line as usize..line as usize + 64]),
        }
        for b in content.iter_mut() {
            *b ^= 1 + rng.below(255) as u8;
        }
        let mut damaged: Vec<(u64, [u8; 64])> = patches.iter().copied().filter(|(off, _)| *off != line).collect();
        damaged.push((line, content));
        let img = OverlayRegion::new(base.clone(), damaged);
        if self.kind == Kind::MediaError {
            img.poison(line);
        }
        img
    }
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            Kind::Scribble => "garbage in",
            Kind::MediaError => "a media error in",
        };
        let copy = if self.replica { "replica" } else { "primary" };
        let what = if self.pair.is_superblock() {
            "superblock"
        } else {
            "metadata"
        };
        write!(
            f,
            "{kind} the {copy} of {what} line {:#x} (primary {:#x}, replica {:#x})",
            self.line(),
            self.pair.primary,
            self.pair.replica
        )
    }
}

/// One mirrored store: the pairs of lines it wrote (a whole structure,
/// or a part of one, written in one go).
pub type Store = Vec<Pair>;

/// The mirrored stores of each recorded operation.
#[derive(Debug, Default)]
pub struct Writes {
    /// Per operation: (event index of the first copy's store, the store).
    by_op: BTreeMap<u64, Vec<(usize, Store)>>,
}

impl Writes {
    /// Finds the mirrored stores of `trace`, whose starting image's
    /// superblock gives the geometry (none when it has no replicas).
    pub fn of(trace: &Trace) -> Writes {
        let mut w = Writes::default();
        let Some(sb) = superblock(&trace.base) else {
            return w;
        };
        let bounds = Bounds {
            data_start: sb.data_start,
            data_end: sb.data_end,
            replicas: sb.features_incompat & FEATURE_INCOMPAT_META_REPLICA != 0,
            dead_zone_pages: sb.dead_zone_pages,
            stale: false,
        };
        let sb_len = size_of::<Superblock>() as u64;
        let mirror = |off: u64| {
            if off < sb_len {
                Some(sb.replica_off + off)
            } else {
                bounds.mirror(off)
            }
        };
        let ev = &trace.events;
        let mut op = None;
        for (i, e) in ev.iter().enumerate() {
            let (off, len) = match e {
                Event::BeginOp(id) => {
                    op = Some(*id);
                    continue;
                }
                Event::Store { off, data } => (*off, data.len() as u64),
                Event::Zero { off, len } => (*off, *len),
                _ => continue,
            };
            let (Some(id), Some(m)) = (op, mirror(off)) else {
                continue;
            };
            // The next store, past flushes and fences, must be the same
            // bytes at the mirror.
            let next = ev[i + 1..]
                .iter()
                .find(|e| !matches!(e, Event::Flush { .. } | Event::Fence));
            let mirrored = match (e, next) {
                (Event::Store { data, .. }, Some(Event::Store { off: o, data: d })) => {
                    *o == m && data.get(..d.len()) == Some(&d[..])
                }
                (Event::Zero { .. }, Some(Event::Zero { off: o, .. })) => *o == m,
                _ => false,
            };
            if !mirrored {
                continue;
            }
            let first = off - off % CACHELINE;
            let store: Store = (first..off + len)
                .step_by(CACHELINE as usize)
                .filter_map(|line| {
                    Some(Pair {
                        primary: line,
                        replica: mirror(line)?,
                    })
                })
                .collect();
            w.by_op.entry(id).or_default().push((i, store));
        }
        w
    }

    /// The stores the operation of crash point `cp` (in flight, else the
    /// one just completed) made before the crash, each once.
    pub fn at(&self, cp: &CrashPoint<'_>) -> Vec<Store> {
        let Some(op) = cp.in_flight.or(cp.completed) else {
            return Vec::new();
        };
        let set: BTreeSet<&Store> = self
            .by_op
            .get(&op)
            .into_iter()
            .flatten()
            .filter(|(i, _)| *i < cp.event)
            .map(|(_, s)| s)
            .collect();
        set.into_iter().cloned().collect()
    }
}

/// The superblock at the start of `img`, if it is whole.
fn superblock(img: &[u8]) -> Option<Superblock> {
    let sb: Superblock = decode(img.get(..size_of::<Superblock>())?).ok()?;
    (sb.csum == sb.compute_csum()).then_some(sb)
}

/// The damage for one crash image (`region`) of `cp`: a line of one of the
/// `stores` the operation made, one copy, one of `kinds`, by `rng`. Never
/// the only whole copy: where the crash may have left one copy of the
/// store incomplete (a line of it is uncertain at `cp`) and the other is
/// durable, the damage goes to the incomplete one — damage to the one copy
/// that holds a whole version is a second fault no two copies survive
/// (Fortis §4.2: tick-tock keeps one whole copy at any moment, not two).
/// None when the
/// operation wrote no metadata with two copies or the image has no whole
/// superblock (an interrupted mkfs); only the superblock when the image's
/// replicas are stale (nothing reads them then, so they protect nothing).
pub fn choose(
    stores: &[Store],
    cp: &CrashPoint<'_>,
    region: &OverlayRegion,
    kinds: &[Kind],
    rng: &mut Rng,
) -> Option<Damage> {
    let stale = {
        let mut b = vec![0u8; size_of::<Superblock>()];
        let sb = region.read(0, &mut b).ok().and_then(|()| superblock(&b)).or_else(|| {
            let off = region.len().checked_sub(PAGE_SIZE)?;
            region.read(off, &mut b).ok().and_then(|()| superblock(&b))
        });
        sb?.features_incompat & FEATURE_INCOMPAT_REPLICAS_STALE != 0
    };
    let usable: Vec<&Store> = stores
        .iter()
        .filter(|s| !s.is_empty() && (s[0].is_superblock() || !stale))
        .collect();
    let store = *rng.pick(&usable)?;
    let pair = *rng.pick(store)?;
    let uncertain = |copy: fn(&Pair) -> u64| {
        store
            .iter()
            .any(|p| cp.lines.binary_search_by_key(&copy(p), |l| l.off).is_ok())
    };
    let replica = match (uncertain(|p| p.primary), uncertain(|p| p.replica)) {
        (true, false) => false,
        (false, true) => true,
        _ => rng.chance(1, 2),
    };
    Some(Damage {
        pair,
        replica,
        kind: *rng.pick(kinds)?,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::workload::{fresh_runner, REGION_SIZE};
    use pm::RecordingRegion;
    use std::sync::Arc;

    /// A formatted image, its geometry, and a primary metadata line with
    /// its mirror.
    fn formatted() -> (Vec<u8>, u64, u64) {
        let r = fresh_runner(REGION_SIZE, 1).unwrap();
        let mut img = vec![0u8; REGION_SIZE as usize];
        r.region().read(0, &mut img).unwrap();
        let sb = superblock(&img).unwrap();
        let bounds = Bounds {
            data_start: sb.data_start,
            data_end: sb.data_end,
            replicas: true,
            dead_zone_pages: sb.dead_zone_pages,
            stale: false,
        };
        let p = sb.data_start + 5 * PAGE_SIZE + 128;
        (img, p, bounds.mirror(p).unwrap())
    }

    /// Damage chosen where the op of `trace` ends, over `seeds`.
    fn damages(trace: &Trace, seeds: u64) -> Vec<Damage> {
        let writes = Writes::of(trace);
        let mut out = Vec::new();
        trace.crash_points(|cp| {
            if cp.kind == pm::PointKind::OpEnd {
                let region = OverlayRegion::new(cp.durable.clone(), []);
                for s in 0..seeds {
                    let kinds = [Kind::MediaError, Kind::Scribble];
                    out.extend(choose(&writes.at(cp), cp, &region, &kinds, &mut Rng::new(s)));
                }
            }
            true
        });
        out
    }

    #[test]
    fn stores_mirrored_before_one_fence_damage_either_copy() {
        let (img, p, m) = formatted();
        let rec = RecordingRegion::new(img);
        rec.begin_op(0);
        rec.write(p, &[7u8; 100]).unwrap();
        rec.write(m, &[7u8; 100]).unwrap();
        // A store whose mirror gets other bytes is not metadata.
        rec.write(p + 1024, &[1u8; 8]).unwrap();
        rec.write(m + 1024, &[2u8; 8]).unwrap();
        rec.end_op();
        let d = damages(&rec.trace(), 64);
        assert_eq!(d.len(), 64);
        // Bytes 128..228 of the page: two lines, each with its mirror line.
        let pairs: BTreeSet<(u64, u64)> = d.iter().map(|d| (d.pair.primary, d.pair.replica)).collect();
        assert_eq!(pairs, [(p, m), (p + 64, m + 64)].into_iter().collect());
        assert!(d
            .iter()
            .all(|d| d.line() == if d.replica { d.pair.replica } else { d.pair.primary }));
        assert!(d.iter().any(|d| d.replica) && d.iter().any(|d| !d.replica));
        assert!(d.iter().any(|d| d.kind == Kind::Scribble) && d.iter().any(|d| d.kind == Kind::MediaError));
    }

    #[test]
    fn the_only_whole_copy_is_never_damaged() {
        let (img, p, m) = formatted();
        let rec = RecordingRegion::new(img);
        rec.begin_op(0);
        // The primary durable (tick), the replica still uncertain (tock).
        rec.write(p, &[7u8; 64]).unwrap();
        rec.flush(p, 64).unwrap();
        rec.fence();
        rec.write(m, &[7u8; 64]).unwrap();
        rec.end_op();
        let d = damages(&rec.trace(), 32);
        assert_eq!(d.len(), 32);
        assert!(d.iter().all(|d| d.replica && d.line() == m), "{:?}", d[0]);
    }

    #[test]
    fn a_damaged_line_changes_every_byte_and_a_media_error_fails_reads() {
        let base = Arc::new(vec![5u8; 4096]);
        let pair = Pair {
            primary: 1024,
            replica: 3072,
        };
        for (kind, replica) in [(Kind::Scribble, false), (Kind::MediaError, true)] {
            let d = Damage { pair, replica, kind };
            let img = d.apply(&base, &[(1024, [6u8; 64])], &mut Rng::new(3));
            let v = img.to_vec();
            let at = d.line() as usize;
            let before = if replica { 5 } else { 6 };
            assert!(v[at..at + 64].iter().all(|&b| b != before), "{d}");
            assert_eq!(
                img.read(at as u64, &mut [0u8; 1]).is_err(),
                kind == Kind::MediaError,
                "{d}"
            );
            // The rest of the image, the patch included, is as it was.
            let other = if replica { 1024 } else { 3072 };
            assert_eq!(v[other], if replica { 6 } else { 5 });
        }
    }
}
