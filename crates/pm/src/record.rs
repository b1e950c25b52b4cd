//! A [`Region`] that records every store, flush and fence, and the crash
//! images the x86 persistence model allows at each point of the recording
//! (DESIGN.md §4, crash tests).
//!
//! Owns [`RecordingRegion`] (a live [`MemRegion`] plus an event log) and
//! [`Trace`] (the log replayed into [`CrashPoint`]s). Nothing here is
//! durable: the region only remembers what a real CPU would have sent to
//! media, and when.
//!
//! # Persistence model
//!
//! The unit of persistence is a 64-byte cache line. Each line is *durable*
//! (its media content is known) or *uncertain*: since its durable content it
//! has been stored to, giving a history of versions (one per store event
//! that touched it, the last one being the current content).
//!
//! - A store ([`Region::write`], [`Region::store_u64`]) appends a version to
//!   every line it touches. Until the line is flushed and fenced, the media
//!   may hold the durable content or *any* version of its history: a cache
//!   may write the line back at any moment, and stores to one line reach the
//!   cache in program order.
//! - A flush ([`Region::flush`]) captures the current version: the next
//!   fence makes it durable. Stores after the flush stay uncertain.
//! - Non-temporal stores ([`Region::write_nt`], [`Region::zero_nt`]) are
//!   stores followed by a flush of their lines.
//! - A fence ([`Region::fence`]) makes every captured version durable.
//! - Power failure may also tear a line at 8-byte granularity: each aligned
//!   word comes from the durable content or from a version (aligned 8-byte
//!   stores are never torn, rule R5).
//!
//! A crash point is taken just before every fence (where the most lines are
//! uncertain: every earlier crash since the previous fence is one of its
//! images), at every operation end (marked with
//! [`RecordingRegion::end_op`]), and at the end of the trace. Its images are
//! the durable image with each uncertain line set to one of its choices.
//!
//! Limits: fences are global (one `sfence` orders everything, as with one
//! thread); reads are not recorded, so a crash image never depends on what
//! the program read; the model does not reorder a flush before an earlier
//! store to the same line (x86 does not either).

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::{MemRegion, PmError, Region, RegionKind, CACHELINE};

const LINE: usize = CACHELINE as usize;

/// One recorded event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Cached stores of `data` at `off`.
    Store {
        /// Region offset of the first byte.
        off: u64,
        /// The bytes stored.
        data: Box<[u8]>,
    },
    /// Cached stores of `len` zero bytes at `off`.
    Zero {
        /// Region offset of the first byte.
        off: u64,
        /// Number of bytes zeroed.
        len: u64,
    },
    /// Write-back of every line overlapping `[off, off + len)`.
    Flush {
        /// Region offset of the first byte.
        off: u64,
        /// Number of bytes.
        len: u64,
    },
    /// Store fence.
    Fence,
    /// The workload starts operation `id`.
    BeginOp(u64),
    /// The operation started last has returned.
    EndOp,
}

/// A region that records every store, flush and fence made through it.
///
/// Starts from `base`, taken to be durable (e.g. a formatted image after a
/// clean unmount). Reads and writes go to a live [`MemRegion`].
pub struct RecordingRegion {
    live: MemRegion,
    base: Vec<u8>,
    /// The event log. Held across the live write too, so the log's order is
    /// the order of the stores.
    events: Mutex<Vec<Event>>,
}

impl std::fmt::Debug for RecordingRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingRegion")
            .field("len", &self.live.len())
            .field("events", &self.events().len())
            .finish()
    }
}

impl RecordingRegion {
    /// A recording region whose durable starting content is `base`.
    pub fn new(base: Vec<u8>) -> RecordingRegion {
        RecordingRegion {
            live: MemRegion::from_bytes(base.clone()),
            base,
            events: Mutex::new(Vec::new()),
        }
    }

    fn events(&self) -> MutexGuard<'_, Vec<Event>> {
        // The log stays consistent even if a holder panicked.
        self.events.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks the start of workload operation `id`.
    pub fn begin_op(&self, id: u64) {
        self.events().push(Event::BeginOp(id));
    }

    /// Marks the end of the operation started last.
    pub fn end_op(&self) {
        self.events().push(Event::EndOp);
    }

    /// Number of events recorded so far.
    pub fn event_count(&self) -> usize {
        self.events().len()
    }

    /// The current (not necessarily durable) content of every byte.
    pub fn snapshot(&self) -> Vec<u8> {
        self.live.snapshot()
    }

    /// The recording so far: the starting image and every event.
    pub fn trace(&self) -> Trace {
        Trace {
            base: self.base.clone(),
            events: self.events().clone(),
        }
    }
}

impl Region for RecordingRegion {
    fn len(&self) -> u64 {
        self.live.len()
    }

    fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), PmError> {
        self.live.read(off, buf)
    }

    fn write(&self, off: u64, data: &[u8]) -> Result<(), PmError> {
        let mut ev = self.events();
        self.live.write(off, data)?;
        if !data.is_empty() {
            ev.push(Event::Store { off, data: data.into() });
        }
        Ok(())
    }

    fn write_nt(&self, off: u64, data: &[u8]) -> Result<(), PmError> {
        let mut ev = self.events();
        self.live.write_nt(off, data)?;
        if !data.is_empty() {
            let len = data.len() as u64;
            ev.push(Event::Store { off, data: data.into() });
            ev.push(Event::Flush { off, len });
        }
        Ok(())
    }

    fn zero_nt(&self, off: u64, len: u64) -> Result<(), PmError> {
        let mut ev = self.events();
        self.live.zero_nt(off, len)?;
        if len > 0 {
            ev.push(Event::Zero { off, len });
            ev.push(Event::Flush { off, len });
        }
        Ok(())
    }

    fn flush(&self, off: u64, len: u64) -> Result<(), PmError> {
        let mut ev = self.events();
        self.live.flush(off, len)?;
        if len > 0 {
            ev.push(Event::Flush { off, len });
        }
        Ok(())
    }

    fn fence(&self) {
        self.events().push(Event::Fence);
    }

    fn store_u64(&self, off: u64, val: u64) -> Result<(), PmError> {
        let mut ev = self.events();
        self.live.store_u64(off, val)?;
        ev.push(Event::Store {
            off,
            data: val.to_ne_bytes().into(),
        });
        Ok(())
    }

    fn load_u64(&self, off: u64) -> Result<u64, PmError> {
        self.live.load_u64(off)
    }

    fn kind(&self) -> RegionKind {
        RegionKind::Memory
    }
}

/// A recording: the durable starting image and the events after it.
#[derive(Clone, Debug)]
pub struct Trace {
    /// The durable image the recording started from.
    pub base: Vec<u8>,
    /// Every event, in program order.
    pub events: Vec<Event>,
}

/// Why a crash point was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointKind {
    /// Just before the fence at this event index.
    Fence,
    /// Just after an operation returned (its `EndOp` event).
    OpEnd,
    /// After the last event.
    End,
}

/// A cache line whose media content is uncertain at a crash point.
#[derive(Clone, Debug)]
pub struct UncertainLine {
    /// Offset of the line (a multiple of 64).
    pub off: u64,
    /// Contents after each store since the durable one, oldest first; the
    /// last is the current content. Choice `k` (1-based) picks `versions[k-1]`,
    /// choice 0 the durable content.
    pub versions: Vec<[u8; LINE]>,
}

impl UncertainLine {
    /// How many contents the media may hold: durable plus each version.
    pub fn choices(&self) -> usize {
        self.versions.len() + 1
    }
}

/// A line torn at 8-byte granularity: word `i` comes from version
/// `version` (1-based) when bit `i` of `mask` is set, else from the durable
/// content.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Torn {
    /// Index into [`CrashPoint::lines`].
    pub line: usize,
    /// The version (1-based) whose words may have reached media.
    pub version: usize,
    /// Bit `i` set: word `i` (bytes `8i..8i+8`) holds the version's bytes.
    pub mask: u8,
}

/// One crash image of a crash point: a choice for each uncertain line
/// (0 = durable, k = version k), and optionally one torn line (which
/// overrides that line's choice).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Choice {
    /// Per uncertain line (in [`CrashPoint::lines`] order): 0 = durable
    /// content, k = version k. Missing entries mean 0.
    pub lines: Vec<usize>,
    /// One line torn at 8-byte granularity, overriding its entry above.
    pub torn: Option<Torn>,
}

/// A moment at which power may fail, with what the media may hold.
#[derive(Debug)]
pub struct CrashPoint<'a> {
    /// Ordinal of this crash point in the trace (0-based).
    pub index: usize,
    /// Index of the event at which it was taken (`events.len()` at the end).
    pub event: usize,
    /// Why the crash point was taken.
    pub kind: PointKind,
    /// The operation running at the crash, if any.
    pub in_flight: Option<u64>,
    /// The last operation that had returned before the crash.
    pub completed: Option<u64>,
    /// Increases whenever a fence changes the durable image.
    pub durable_gen: u64,
    /// Content every line not in `lines` has on media. Shared with the
    /// replay: hold it past the visit only if a copy at the next fence is
    /// acceptable.
    pub durable: Arc<Vec<u8>>,
    _trace: std::marker::PhantomData<&'a Trace>,
    /// The uncertain lines, by offset.
    pub lines: Vec<UncertainLine>,
}

impl CrashPoint<'_> {
    /// Number of distinct images (product of the lines' choices), saturating.
    pub fn image_count(&self) -> u128 {
        self.lines
            .iter()
            .fold(1u128, |n, l| n.saturating_mul(l.choices() as u128))
    }

    /// The line content `choice` selects for line `i`.
    fn content(&self, choice: &Choice, i: usize) -> [u8; LINE] {
        let l = &self.lines[i];
        let at = l.off as usize;
        let mut durable = [0u8; LINE];
        let n = LINE.min(self.durable.len() - at);
        durable[..n].copy_from_slice(&self.durable[at..at + n]);
        if let Some(t) = choice.torn.filter(|t| t.line == i) {
            let v = &l.versions[t.version.clamp(1, l.versions.len()) - 1];
            let mut out = durable;
            for w in 0..LINE / 8 {
                if t.mask & (1 << w) != 0 {
                    out[w * 8..w * 8 + 8].copy_from_slice(&v[w * 8..w * 8 + 8]);
                }
            }
            return out;
        }
        match choice.lines.get(i).copied().unwrap_or(0) {
            0 => durable,
            k => l.versions[k.min(l.versions.len()) - 1],
        }
    }

    /// Builds the crash image `choice` describes.
    pub fn image(&self, choice: &Choice) -> Vec<u8> {
        let mut img = self.durable.to_vec();
        for (off, c) in self.patches(choice) {
            let at = off as usize;
            let n = LINE.min(img.len() - at);
            img[at..at + n].copy_from_slice(&c[..n]);
        }
        img
    }

    /// The lines in which the image `choice` describes differs from
    /// [`CrashPoint::durable`], with their content: a crash image without a
    /// full copy.
    pub fn patches(&self, choice: &Choice) -> Vec<(u64, [u8; LINE])> {
        (0..self.lines.len())
            .filter_map(|i| {
                let c = self.content(choice, i);
                let at = self.lines[i].off as usize;
                let n = LINE.min(self.durable.len() - at);
                (self.durable[at..at + n] != c[..n]).then_some((self.lines[i].off, c))
            })
            .collect()
    }

    /// A hash identifying the image `choice` builds: equal images of one
    /// trace (same durable generation, same line contents) get equal keys.
    pub fn key(&self, choice: &Choice) -> u64 {
        let mut h = DefaultHasher::new();
        self.durable_gen.hash(&mut h);
        for (off, c) in self.patches(choice) {
            off.hash(&mut h);
            c.hash(&mut h);
        }
        h.finish()
    }
}

#[derive(Debug, Default)]
struct LineState {
    versions: Vec<[u8; LINE]>,
    /// Versions `..=k` are captured by a flush: durable at the next fence.
    flushed: Option<usize>,
}

/// Replays a trace, tracking the current and durable images.
struct Replay<'t> {
    trace: &'t Trace,
    cur: Vec<u8>,
    durable: Arc<Vec<u8>>,
    lines: BTreeMap<u64, LineState>,
    durable_gen: u64,
    in_flight: Option<u64>,
    completed: Option<u64>,
}

impl Replay<'_> {
    fn line_of(&self, off: u64) -> [u8; LINE] {
        let mut l = [0u8; LINE];
        let at = off as usize;
        let n = LINE.min(self.cur.len() - at);
        l[..n].copy_from_slice(&self.cur[at..at + n]);
        l
    }

    fn lines_in(&self, off: u64, len: u64) -> std::ops::Range<u64> {
        let end = (off + len).min(self.cur.len() as u64);
        let first = off / CACHELINE;
        let last = end.div_ceil(CACHELINE);
        first..last.max(first)
    }

    fn stored(&mut self, off: u64, len: u64) {
        for l in self.lines_in(off, len) {
            let loff = l * CACHELINE;
            let now = self.line_of(loff);
            let at = loff as usize;
            let n = LINE.min(self.cur.len() - at);
            let st = self.lines.entry(loff).or_default();
            let same = match st.versions.last() {
                Some(v) => *v == now,
                None => self.durable[at..at + n] == now[..n],
            };
            if !same {
                st.versions.push(now);
            }
            if st.versions.is_empty() {
                self.lines.remove(&loff);
            }
        }
    }

    fn flushed(&mut self, off: u64, len: u64) {
        for l in self.lines_in(off, len) {
            if let Some(st) = self.lines.get_mut(&(l * CACHELINE)) {
                st.flushed = Some(st.versions.len() - 1);
            }
        }
    }

    /// Applies a fence; true when the durable image changed.
    fn fenced(&mut self) -> bool {
        let mut changed = false;
        let mut clean = Vec::new();
        for (&off, st) in self.lines.iter_mut() {
            if let Some(k) = st.flushed.take() {
                let at = off as usize;
                // No copy unless a visitor kept the previous point's image.
                let durable = Arc::make_mut(&mut self.durable);
                let n = LINE.min(durable.len() - at);
                durable[at..at + n].copy_from_slice(&st.versions[k][..n]);
                st.versions.drain(..=k);
                changed = true;
                if st.versions.is_empty() {
                    clean.push(off);
                }
            }
        }
        for off in clean {
            self.lines.remove(&off);
        }
        if changed {
            self.durable_gen += 1;
        }
        changed
    }

    fn point(&self, index: usize, event: usize, kind: PointKind) -> CrashPoint<'_> {
        CrashPoint {
            index,
            event,
            kind,
            in_flight: self.in_flight,
            completed: self.completed,
            durable_gen: self.durable_gen,
            durable: self.durable.clone(),
            _trace: std::marker::PhantomData,
            lines: self
                .lines
                .iter()
                .map(|(&off, st)| UncertainLine {
                    off,
                    versions: st.versions.clone(),
                })
                .collect(),
        }
    }
}

impl Trace {
    /// Replays the trace, calling `visit` at every crash point in order;
    /// `visit` returns false to stop. Returns the number of crash points
    /// visited.
    ///
    /// A fence is a crash point only when something changed since the
    /// previous crash point (a store, a flush that will make a line durable,
    /// or an operation boundary); otherwise its images are the previous
    /// point's.
    pub fn crash_points(&self, mut visit: impl FnMut(&CrashPoint<'_>) -> bool) -> usize {
        let mut r = Replay {
            trace: self,
            cur: self.base.clone(),
            durable: Arc::new(self.base.clone()),
            lines: BTreeMap::new(),
            durable_gen: 0,
            in_flight: None,
            completed: None,
        };
        let mut index = 0;
        let mut changed = true;
        for (i, ev) in r.trace.events.iter().enumerate() {
            match ev {
                Event::Store { off, data } => {
                    let at = *off as usize;
                    r.cur[at..at + data.len()].copy_from_slice(data);
                    r.stored(*off, data.len() as u64);
                    changed = true;
                }
                Event::Zero { off, len } => {
                    let at = *off as usize;
                    r.cur[at..at + *len as usize].fill(0);
                    r.stored(*off, *len);
                    changed = true;
                }
                Event::Flush { off, len } => r.flushed(*off, *len),
                Event::Fence => {
                    if changed {
                        if !visit(&r.point(index, i, PointKind::Fence)) {
                            return index + 1;
                        }
                        index += 1;
                        changed = false;
                    }
                    changed |= r.fenced();
                }
                Event::BeginOp(id) => {
                    r.in_flight = Some(*id);
                    changed = true;
                }
                Event::EndOp => {
                    r.completed = r.in_flight.take();
                    if !visit(&r.point(index, i, PointKind::OpEnd)) {
                        return index + 1;
                    }
                    index += 1;
                    changed = false;
                }
            }
        }
        if changed {
            visit(&r.point(index, self.events.len(), PointKind::End));
            index += 1;
        }
        index
    }

    /// The current image after every event: what the live region held.
    pub fn final_image(&self) -> Vec<u8> {
        let mut cur = self.base.clone();
        for ev in &self.events {
            match ev {
                Event::Store { off, data } => cur[*off as usize..*off as usize + data.len()].copy_from_slice(data),
                Event::Zero { off, len } => cur[*off as usize..(*off + *len) as usize].fill(0),
                _ => {}
            }
        }
        cur
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Per crash point: its kind, (line, versions) of its uncertain lines,
    /// and its durable generation.
    type Summary = (PointKind, Vec<(u64, usize)>, u64);

    fn points(t: &Trace) -> Vec<Summary> {
        let mut v = Vec::new();
        t.crash_points(|cp| {
            v.push((
                cp.kind,
                cp.lines.iter().map(|l| (l.off, l.versions.len())).collect(),
                cp.durable_gen,
            ));
            true
        });
        v
    }

    #[test]
    fn records_stores_flushes_and_fences_in_order() {
        let r = RecordingRegion::new(vec![0; 4096]);
        r.begin_op(7);
        r.write(20, b"abc").unwrap();
        r.write_nt(128, &[1; 64]).unwrap();
        r.flush(0, 64).unwrap();
        r.fence();
        r.store_u64(8, 5).unwrap();
        r.zero_nt(256, 100).unwrap();
        r.end_op();
        let t = r.trace();
        assert_eq!(t.events.len(), 10);
        assert_eq!(t.events[0], Event::BeginOp(7));
        assert_eq!(t.final_image(), r.snapshot());
        let mut buf = [0u8; 3];
        r.read(20, &mut buf).unwrap();
        assert_eq!(&buf, b"abc");
    }

    #[test]
    fn unflushed_lines_stay_uncertain_and_flushed_ones_become_durable_at_the_fence() {
        let r = RecordingRegion::new(vec![0; 4096]);
        r.write(0, &[1; 8]).unwrap(); // line 0, never flushed
        r.write(64, &[2; 8]).unwrap(); // line 1, flushed
        r.flush(64, 8).unwrap();
        r.fence();
        r.fence(); // the previous fence's images: a crash point again
        r.fence(); // nothing changed: not a crash point
        r.write(64, &[3; 8]).unwrap();
        let t = r.trace();
        let p = points(&t);
        assert_eq!(p.len(), 3);
        assert_eq!(p[0], (PointKind::Fence, vec![(0, 1), (64, 1)], 0));
        assert_eq!(p[1], (PointKind::Fence, vec![(0, 1)], 1));
        assert_eq!(p[2], (PointKind::End, vec![(0, 1), (64, 1)], 1));
        let mut imgs = Vec::new();
        t.crash_points(|cp| {
            if cp.kind == PointKind::End {
                imgs.push(cp.image(&Choice::default()));
                imgs.push(cp.image(&Choice {
                    lines: vec![1, 0],
                    torn: None,
                }));
                imgs.push(cp.image(&Choice {
                    lines: vec![0, 1],
                    torn: None,
                }));
            }
            true
        });
        // Durable: line 1 holds the flushed 2s, line 0 still zero.
        assert_eq!(&imgs[0][..8], &[0; 8]);
        assert_eq!(&imgs[0][64..72], &[2; 8]);
        assert_eq!(&imgs[1][..8], &[1; 8]);
        assert_eq!(&imgs[2][64..72], &[3; 8]);
    }

    #[test]
    fn every_store_to_a_line_is_a_version_and_a_flush_captures_only_the_past() {
        let r = RecordingRegion::new(vec![0; 256]);
        r.write(0, &[1; 8]).unwrap();
        r.write(8, &[2; 8]).unwrap();
        r.flush(0, 64).unwrap();
        r.write(16, &[3; 8]).unwrap();
        r.fence();
        let t = r.trace();
        let mut seen = Vec::new();
        t.crash_points(|cp| {
            seen.push(cp.lines[0].versions.len());
            if cp.kind == PointKind::End {
                // Durable after the fence: the two flushed stores.
                assert_eq!(&cp.durable[..16], &[[1u8; 8], [2; 8]].concat()[..]);
                assert_eq!(&cp.durable[16..24], &[0; 8]);
            }
            true
        });
        assert_eq!(seen, vec![3, 1]);
    }

    #[test]
    fn torn_lines_mix_words_of_the_durable_and_a_version() {
        let r = RecordingRegion::new(vec![0; 128]);
        r.begin_op(1);
        r.write(64, &[9; 64]).unwrap();
        r.end_op();
        let t = r.trace();
        t.crash_points(|cp| {
            let c = Choice {
                lines: vec![1],
                torn: Some(Torn {
                    line: 0,
                    version: 1,
                    mask: 0b1000_0001,
                }),
            };
            let img = cp.image(&c);
            assert_eq!(&img[64..72], &[9; 8]);
            assert_eq!(&img[72..120], &[0; 48]);
            assert_eq!(&img[120..128], &[9; 8]);
            assert_ne!(cp.key(&c), cp.key(&Choice::default()));
            assert_eq!(
                cp.key(&Choice::default()),
                cp.key(&Choice {
                    lines: vec![0],
                    torn: None
                })
            );
            assert_eq!(cp.in_flight, None);
            assert_eq!(cp.completed, Some(1));
            true
        });
    }
}
