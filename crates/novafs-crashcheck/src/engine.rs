//! The checker: records a workload on a [`RecordingRegion`], enumerates the
//! crash images of every crash point (pm's persistence model), and checks
//! each with the oracle:
//!
//! 1. fsck of the raw crash image is clean (only `problems` fail);
//! 2. mounting it (recovery) succeeds, and the visible tree equals a legal
//!    state: the state after every operation that returned before the
//!    crash, with the in-flight one applied fully or not at all — or, in a
//!    relaxed workload (the image's default mode, so every mount here is
//!    relaxed), with the overwrite in flight torn as [`Tree::torn_write`]
//!    allows, when it is one ([`torn_write`]); and in a batching workload
//!    with what the running transaction held lost, all of it together
//!    ([`crate::batch`]);
//! 3. after a clean unmount the image is fsck-clean again (the rebuilt
//!    allocators are exact), and a remount shows the same tree;
//! 4. for a sample of images, the recovery itself is recorded and crashed:
//!    every crash image of the recovery must recover to the same tree;
//! 5. with [`Config::damage`], each image is checked again with one copy
//!    of a line of metadata the operation wrote damaged ([`crate::damage`]):
//!    fsck runs, recovery reaches a legal state losing nothing, and, for
//!    damage that reads back, the image is fsck-clean after the unmount.
//!
//! The legal states come from the recorded run itself: the tree is captured
//! through the API after every operation (no crash there), so timestamps
//! are exact.

use std::collections::HashMap;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use novafs::{Fs, MountOptions};
use novafs_ops::Op;
use pm::{CrashPoint, PointKind, RecordingRegion, Region, Trace};

use crate::batch::{Batched, Legal, Oracle, Tracker};
use crate::choose::{choices, describe_choice, Pick};
use crate::damage::{self, Damage, Writes};
use crate::image::OverlayRegion;
use crate::tree::{Compare, Overwrite, Tree};
use crate::workload::{apply, fresh_runner_as, gc_count, look, tree_keeping, way_of, Expect, Workload};
use novafs_rng::SplitMix as Rng;

/// How hard to look.
#[derive(Clone, Debug)]
pub struct Config {
    /// Base seed of every random choice (images sampled, random workloads).
    pub seed: u64,
    /// The long sweep's settings (`novafs crashcheck --all`): reproducers
    /// say so.
    pub long: bool,
    /// Images of each crash point of a workload.
    pub pick: Pick,
    /// Record and crash the recovery of 1 in this many checked images; 0 =
    /// never.
    pub recovery_every: u64,
    /// The same for images whose recovery replays the journal or reclaims
    /// orphans (where a crash inside recovery matters most).
    pub recovery_busy_every: u64,
    /// Images of each crash point of a recorded recovery.
    pub recovery_pick: Pick,
    /// Stop a workload after this many checked images.
    pub max_images: Option<u64>,
    /// Also fsck the raw crash image before mounting it.
    pub raw_fsck: bool,
    /// Also check each crash image with one copy of metadata the
    /// operation wrote damaged in one of these ways ([`crate::damage`]).
    pub damage: Vec<damage::Kind>,
    /// Failures whose message contains one of these are known, reported
    /// bugs: counted in [`Stats::known`], not in [`Stats::failures`].
    pub known: Vec<String>,
    pub compare: Compare,
    /// Check only this crash point (and only this image of it).
    pub only_point: Option<usize>,
    pub only_image: Option<usize>,
}

impl Config {
    /// The bounded sweep run by `cargo test`.
    pub fn quick(seed: u64) -> Config {
        Config {
            seed,
            long: false,
            pick: Pick {
                exhaustive_max: 64,
                samples: 8,
                torn_exhaustive_max: 256,
                word_tears: 6,
                torn: 3,
            },
            recovery_every: 16,
            recovery_busy_every: 3,
            recovery_pick: Pick::recovery(4),
            max_images: Some(4000),
            raw_fsck: true,
            damage: Vec::new(),
            known: Vec::new(),
            compare: Compare::default(),
            only_point: None,
            only_image: None,
        }
    }

    /// The long sweep (`novafs crashcheck --all`).
    pub fn thorough(seed: u64) -> Config {
        Config {
            seed,
            long: true,
            pick: Pick {
                exhaustive_max: 1024,
                samples: 64,
                torn_exhaustive_max: 2048,
                word_tears: 64,
                torn: 12,
            },
            recovery_every: 10,
            recovery_pick: Pick::recovery(12),
            max_images: None,
            ..Config::quick(seed)
        }
    }
}

/// One image that broke the rules, with how to reproduce it.
#[derive(Clone, Debug)]
pub struct Failure {
    pub workload: String,
    pub seed: u64,
    /// Found by the long sweep's settings (`--all`).
    pub long: bool,
    /// Found with damaged copies (`--media-errors`, `--scribbles`).
    pub damage: Vec<damage::Kind>,
    /// Crash point and image index within it (`None`: the run itself).
    pub point: Option<usize>,
    pub image: Option<usize>,
    /// Where the crash happened, in words.
    pub moment: String,
    /// For a crash inside recovery: its crash point and image.
    pub recovery: Option<(usize, usize)>,
    pub message: String,
}

impl Failure {
    /// What kind of failure this is, for grouping: the workload and the
    /// first line of the message with numbers blanked out.
    pub fn signature(&self) -> String {
        let first = self.message.lines().next().unwrap_or("");
        let mut sig = String::new();
        let mut in_num = false;
        for c in first.chars() {
            if c.is_ascii_hexdigit() && (in_num || c.is_ascii_digit()) || (in_num && c == 'x') {
                if !in_num {
                    sig.push('#');
                }
                in_num = true;
            } else {
                in_num = false;
                sig.push(c);
            }
        }
        let phase = if self.recovery.is_some() {
            " [crash inside recovery]"
        } else {
            ""
        };
        format!("{}{phase}", sig)
    }
}

/// Failures grouped by [`Failure::signature`]: (signature, count, first).
pub fn group(failures: &[Failure]) -> Vec<(String, usize, &Failure)> {
    let mut out: Vec<(String, usize, &Failure)> = Vec::new();
    for f in failures {
        let sig = f.signature();
        match out.iter_mut().find(|(s, _, _)| *s == sig) {
            Some(e) => e.1 += 1,
            None => out.push((sig, 1, f)),
        }
    }
    out
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FAIL {}", self.workload)?;
        if let Some(p) = self.point {
            write!(f, " crash point {p}")?;
        }
        if let Some(i) = self.image {
            write!(f, " image {i}")?;
        }
        if let Some((p, i)) = self.recovery {
            write!(f, ", then a crash in its recovery at point {p} image {i}")?;
        }
        writeln!(f, " ({})", self.moment)?;
        for l in self.message.lines() {
            writeln!(f, "    {l}")?;
        }
        let all = if self.long { " --all" } else { "" };
        let media: String = self.damage.iter().map(|k| format!(" {}", k.flag())).collect();
        write!(
            f,
            "    reproduce: novafs crashcheck{all}{media} --workload {} --seed {}",
            self.workload, self.seed
        )?;
        if let Some(p) = self.point {
            write!(f, " --point {p}")?;
        }
        if let Some(i) = self.image {
            write!(f, " --image {i}")?;
        }
        Ok(())
    }
}

/// Counts of one sweep.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub workloads: u64,
    pub ops: u64,
    pub crash_points: u64,
    /// Distinct crash images mounted and checked (recovery crashes included).
    pub images: u64,
    /// Images that repeated an earlier one (checked against the new legal
    /// states without mounting again).
    pub repeats: u64,
    /// Recoveries recorded and crashed, and the images they produced.
    pub recoveries: u64,
    pub recovery_images: u64,
    /// Images checked with one copy damaged (`--media-errors`), and how
    /// many of them recovered to the other legal state than the image
    /// without damage (the op in flight applied where it was not, or not
    /// where it was: a copy may be a step behind the other at a crash).
    pub damaged: u64,
    pub damaged_other_state: u64,
    /// Relaxed workloads: ops the live runs changed in place, and images
    /// legal only as an in-place overwrite torn ([`Tree::torn_write`]).
    pub in_place_ops: u64,
    pub torn: u64,
    /// Batching workloads: images that lost a running transaction.
    pub lost: u64,
    pub failures: Vec<Failure>,
    /// Failures matching [`Config::known`].
    pub known: Vec<Failure>,
    pub elapsed: Duration,
}

impl Stats {
    pub fn merge(&mut self, o: Stats) {
        self.workloads += o.workloads;
        self.ops += o.ops;
        self.crash_points += o.crash_points;
        self.images += o.images;
        self.repeats += o.repeats;
        self.recoveries += o.recoveries;
        self.recovery_images += o.recovery_images;
        self.damaged += o.damaged;
        self.damaged_other_state += o.damaged_other_state;
        self.in_place_ops += o.in_place_ops;
        self.torn += o.torn;
        self.lost += o.lost;
        self.failures.extend(o.failures);
        self.known.extend(o.known);
        self.elapsed += o.elapsed;
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} workloads, {} operations{}, {} crash points, {} images checked ({} of them inside recovery, from {} recorded recoveries{}{}{}), {} repeated images, {} failures{}",
            self.workloads,
            self.ops,
            if self.in_place_ops > 0 {
                format!(" ({} of them in place)", self.in_place_ops)
            } else {
                String::new()
            },
            self.crash_points,
            self.images,
            self.recovery_images,
            self.recoveries,
            if self.damaged > 0 {
                format!(
                    "; {} with a damaged copy, {} of those recovered to the op's other legal state",
                    self.damaged, self.damaged_other_state
                )
            } else {
                String::new()
            },
            if self.torn > 0 {
                format!("; {} legal only as a torn overwrite", self.torn)
            } else {
                String::new()
            },
            if self.lost > 0 {
                format!("; {} lost a running transaction", self.lost)
            } else {
                String::new()
            },
            self.repeats,
            self.failures.len(),
            if self.known.is_empty() {
                String::new()
            } else {
                format!(" (+{} of known, reported bugs)", self.known.len())
            }
        )
    }
}

/// A workload's recording and the legal states.
pub struct Recorded {
    pub ops: Vec<Op>,
    pub trace: Trace,
    /// `states[0]` before operation 0, `states[i + 1]` after operation `i`.
    pub states: Vec<Tree>,
    /// Operations that failed in the live run, with the error.
    pub errors: Vec<(usize, String)>,
    /// Relaxed workloads: operations the live run changed in place.
    pub in_place: usize,
    /// Batching workloads: what a crash may lose ([`crate::batch`]).
    pub batch: Batched,
}

/// Runs `w`: its setup on a plain region (then a clean unmount), then its
/// operations on a recording region, capturing the tree after each.
pub fn record(w: &Workload) -> Result<Recorded, String> {
    record_with(w, &|r| r)
}

/// [`record`] with the operations running on `wrap(recording)`.
pub fn record_with(w: &Workload, wrap: &Wrap) -> Result<Recorded, String> {
    let keep = w.keep_bytes();
    let mut setup = fresh_runner_as(w.region_size, w.shards, w.consistency)?;
    apply(&mut setup, &Op::Mount, w.spread).map_err(|e| format!("setup mount: {e}"))?;
    for (i, op) in w.setup.iter().enumerate() {
        apply(&mut setup, op, w.spread).map_err(|e| format!("setup op {i} ({op}): {e}"))?;
    }
    let initial = tree_keeping(&setup, keep)?;
    apply(&mut setup, &Op::Unmount, w.spread).map_err(|e| format!("setup unmount: {e}"))?;
    let base = {
        let region = setup.region();
        let mut b = vec![0u8; region.len() as usize];
        region.read(0, &mut b).map_err(|e| e.to_string())?;
        b
    };
    drop(setup);
    let rec = Arc::new(RecordingRegion::new(base));
    let mut run = w.runner(wrap(rec.clone()));
    let ops = w.recorded_ops();
    let mut states = vec![initial];
    let mut errors = Vec::new();
    // Relaxed: how each op of `w.ops` changed the node it names.
    let mut ways = Vec::new();
    let mut tracker = w.batch.map(|_| Tracker::default());
    for (i, op) in ops.iter().enumerate() {
        let watch = w.relaxed() || !w.ways.is_empty();
        let target = crate::workload::relaxed_target(op).filter(|_| watch && i > 0);
        let before = target.and_then(|p| look(&run, p).ok());
        if let Some(t) = tracker.as_mut() {
            t.before(&run);
        }
        rec.begin_op(i as u64);
        let res = apply(&mut run, op, w.spread);
        rec.end_op();
        let ok = res.is_ok();
        let after = target.filter(|_| ok).and_then(|p| look(&run, p).ok());
        let way = before.as_ref().zip(after.as_ref()).and_then(|(b, a)| way_of(b, a));
        if i > 0 {
            ways.push(way);
        }
        if let Err(e) = res {
            if w.expect == Expect::AllSucceed || i == 0 {
                return Err(format!("op {i} ({op}) failed in the live run: {e}"));
            }
            errors.push((i, e));
        }
        let tree = match run.fs() {
            Some(_) => tree_keeping(&run, keep).map_err(|e| format!("after op {i} ({op}), in the live run: {e}"))?,
            // What a mount would show now, read from a copy of the image.
            None if matches!(op, Op::Mkfs) => {
                let copy = Arc::new(pm::MemRegion::from_bytes(rec.snapshot()));
                let fs = Fs::open(copy, MountOptions::default()).map_err(|e| format!("mount after mkfs: {e}"))?;
                Tree::capture_keeping(&fs, keep)?
            }
            None => states.last().cloned().unwrap_or_default(),
        };
        if let (Some(t), Some(last)) = (tracker.as_mut(), states.last()) {
            t.after(&run, op, ok, way.zip(after.map(|a| a.attr.ino)), last, &tree);
        }
        states.push(tree);
    }
    if let Some(kind) = w.gc {
        if gc_count(&run, kind) == 0 {
            return Err(format!("the recorded operations never ran {kind:?} GC"));
        }
    }
    let in_place = crate::workload::check_ways(w, &ways)?;
    drop(run); // A crash: no unmount.
    Ok(Recorded {
        ops,
        trace: rec.trace(),
        states,
        errors,
        in_place,
        batch: tracker.map(Tracker::finish).unwrap_or_default(),
    })
}

/// The overwrite a crash at `cp` may show torn ([`Tree::torn_write`]): the
/// op in flight, when `w` is relaxed and it is a write by path that
/// succeeded in the live run. Strict workloads have none: their oracle is
/// exact.
pub fn torn_write(w: &Workload, rec: &Recorded, cp: &CrashPoint<'_>) -> Option<Overwrite> {
    let i = cp.in_flight? as usize;
    overwrite_of(w, rec, i)
}

fn overwrite_of(w: &Workload, rec: &Recorded, i: usize) -> Option<Overwrite> {
    let failed = rec.errors.iter().any(|&(e, _)| e == i);
    match &rec.ops[i] {
        Op::Write {
            at: novafs_ops::At::Path(path),
            off,
            len,
            ..
        } if w.relaxed() && !failed => Some(Overwrite {
            path: path.clone(),
            off: *off,
            len: *len,
        }),
        _ => None,
    }
}

/// What the oracle made of one image.
#[derive(Clone)]
struct Outcome {
    /// Digest of the recovered tree, or why the image is broken.
    result: Result<u64, String>,
    /// Recovery replayed the journal or reclaimed orphans.
    busy_recovery: bool,
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

/// A crash image: a base image and the lines that differ from it.
type Patches = Vec<(u64, [u8; 64])>;

/// Builds a fresh copy of one crash image.
type Image<'a> = dyn Fn() -> Arc<OverlayRegion> + 'a;

/// The plain crash image `base` + `patches`.
fn plain<'a>(base: &'a Arc<Vec<u8>>, patches: &'a Patches) -> impl Fn() -> Arc<OverlayRegion> + 'a {
    || Arc::new(OverlayRegion::new(base.clone(), patches.iter().copied()))
}

/// The oracle's mechanical part: fsck, recover, capture, unmount, fsck.
/// With `damage`, one copy of some metadata in the image is damaged.
fn examine(
    image: &Image<'_>,
    damage: Option<&Damage>,
    cfg: &Config,
    keep: usize,
    trees: &mut HashMap<u64, Tree>,
) -> Outcome {
    let r = catch_unwind(AssertUnwindSafe(|| examine_inner(image, damage, cfg, keep)));
    match r {
        Ok(Ok((tree, busy))) => {
            let d = tree.digest(cfg.compare);
            trees.entry(d).or_insert(tree);
            Outcome {
                result: Ok(d),
                busy_recovery: busy,
            }
        }
        Ok(Err(e)) => Outcome {
            result: Err(e),
            busy_recovery: false,
        },
        Err(p) => Outcome {
            result: Err(format!("panicked: {}", panic_text(p))),
            busy_recovery: false,
        },
    }
}

/// fsck's problems, if any. A crash image (`crashed`) may have one: the
/// superblock copy a crash during the two-copy superblock update (R4)
/// leaves torn or stale, which the mount that follows rewrites.
fn fsck_problems(region: Arc<dyn Region>, crashed: bool) -> Result<(), String> {
    match novafs::fsck::check(region, &|_, _| {}) {
        Err(e) => Err(format!("fsck could not run: {e}")),
        Ok(rep) if rep.is_clean() => Ok(()),
        Ok(rep) if crashed && rep.is_clean_but_for_an_interrupted_superblock_update() => Ok(()),
        Ok(rep) => Err(rep.problems.join("\n")),
    }
}

fn examine_inner(
    image: &Image<'_>,
    damage: Option<&Damage>,
    cfg: &Config,
    keep: usize,
) -> Result<(Tree, bool), String> {
    if cfg.raw_fsck {
        match damage {
            None => fsck_problems(image(), true).map_err(|e| format!("fsck of the crash image: {e}"))?,
            // fsck reports the damaged copy (a problem); it must still run.
            Some(_) => drop(
                novafs::fsck::check(image(), &|_, _| {})
                    .map_err(|e| format!("fsck of the damaged crash image could not run: {e}"))?,
            ),
        }
    }
    let overlay = image();
    let region: Arc<dyn Region> = overlay.clone();
    let fs = Fs::open(region.clone(), MountOptions::default()).map_err(|e| format!("recovery failed: {e}"))?;
    let rep = fs.mount_report();
    let busy = rep.journal_replayed > 0 || rep.orphans_reclaimed > 0;
    let tree = Tree::capture_keeping(&fs, keep).map_err(|e| format!("after recovery: {e}"))?;
    // A crash damages nothing: recovery and reading everything back must
    // not need redundancy (a repair here means a copy, checksum or parity
    // was left inconsistent by a write path).
    // With damage, the other copy must serve: repairs, no loss.
    let health = fs.health();
    match damage {
        None if health != novafs::HealthCounts::default() => {
            return Err(format!("recovery and reads needed redundancy: {health}"));
        }
        Some(_) if health.losses > 0 => return Err(format!("recovery lost objects: {health}")),
        _ => {}
    }
    fs.unmount()
        .map_err(|e| format!("clean unmount after recovery failed: {e}"))?;
    match damage.map(|d| d.kind) {
        // Reads go around a line that stays unreadable (only the kernel
        // clears poison): fsck reports the lost copy, and must run.
        Some(damage::Kind::MediaError) => drop(
            novafs::fsck::check(region.clone(), &|_, _| {})
                .map_err(|e| format!("fsck after recovery and a clean unmount could not run: {e}"))?,
        ),
        _ => {
            fsck_problems(region.clone(), false).map_err(|e| format!("fsck after recovery and a clean unmount: {e}"))?
        }
    }
    // The clean image (saved allocators, no scan) shows the same tree.
    let fs = Fs::open(region, MountOptions::default()).map_err(|e| format!("remount after recovery failed: {e}"))?;
    let again = Tree::capture_keeping(&fs, keep).map_err(|e| format!("after a remount of the recovered image: {e}"))?;
    if !again.same(&tree, cfg.compare) {
        let diff = again.diff(&tree, cfg.compare, 8).join("\n  ");
        return Err(format!(
            "a clean unmount and remount after recovery changed the tree:\n  {diff}"
        ));
    }
    drop(fs);
    Ok((tree, busy))
}

/// Why tree `got` is none of the `allowed` states of `oracle`, for a
/// crash during op `in_flight` (if any).
fn illegal(
    got: &Tree,
    oracle: &Oracle<'_>,
    allowed: &[Legal],
    in_flight: Option<u64>,
    cmp: Compare,
    image: String,
) -> String {
    let mut m = format!("recovered tree is not a legal state ({image})");
    for &s in allowed {
        m += &format!("\ndifferences from {}:", Oracle::describe(s, in_flight));
        for l in got.diff(oracle.tree(s), cmp, 8) {
            m += &format!("\n  {l}");
        }
    }
    m
}

fn moment(rec: &Recorded, cp: &CrashPoint<'_>) -> String {
    let where_ = match cp.kind {
        PointKind::Fence => format!("before the fence at event {}", cp.event),
        PointKind::OpEnd => "just after it returned".into(),
        PointKind::End => "at the end of the run".into(),
    };
    match (cp.in_flight, cp.completed) {
        (Some(i), _) => format!("during op {i} '{}', {where_}", rec.ops[i as usize]),
        (None, Some(i)) => format!("after op {i} '{}', {where_}", rec.ops[i as usize]),
        (None, None) => format!("before any op, {where_}"),
    }
}

/// Wraps the recording region the workload runs on (fault injection in
/// the checker's own tests).
pub type Wrap = dyn Fn(Arc<RecordingRegion>) -> Arc<dyn Region>;

/// Checks every crash point of workload `w`, adding to `stats`.
pub fn check_workload(w: &Workload, cfg: &Config, stats: &mut Stats) {
    check_workload_with(w, cfg, stats, &|r| r)
}

/// [`check_workload`] with the workload running on `wrap(recording)`.
pub fn check_workload_with(w: &Workload, cfg: &Config, stats: &mut Stats, wrap: &Wrap) {
    let t0 = Instant::now();
    match record_with(w, wrap) {
        Ok(rec) => check_recorded(w, &rec, cfg, stats),
        Err(e) => {
            stats.workloads += 1;
            failed(
                stats,
                cfg,
                Failure {
                    moment: "the live run".into(),
                    ..Failure::of(w, cfg, e)
                },
            );
            stats.elapsed += t0.elapsed();
        }
    }
}

impl Failure {
    /// A failure of `w` under `cfg`, at no crash point yet.
    fn of(w: &Workload, cfg: &Config, message: String) -> Failure {
        Failure {
            workload: w.name.clone(),
            seed: cfg.seed,
            long: cfg.long,
            damage: cfg.damage.clone(),
            point: None,
            image: None,
            moment: String::new(),
            recovery: None,
            message,
        }
    }
}

/// Counts `f` as a failure, or a known bug's.
fn failed(stats: &mut Stats, cfg: &Config, f: Failure) {
    if cfg.known.iter().any(|k| f.message.contains(k.as_str())) {
        stats.known.push(f);
    } else {
        stats.failures.push(f);
    }
}

/// Checks every crash point of `rec`, workload `w`'s recording, adding
/// to `stats`.
pub fn check_recorded(w: &Workload, rec: &Recorded, cfg: &Config, stats: &mut Stats) {
    let t0 = Instant::now();
    stats.workloads += 1;
    let fail = |stats: &mut Stats,
                point: Option<usize>,
                image: Option<usize>,
                moment: String,
                recovery: Option<(usize, usize)>,
                message: String| {
        let f = Failure {
            point,
            image,
            moment,
            recovery,
            ..Failure::of(w, cfg, message)
        };
        failed(stats, cfg, f);
    };
    stats.ops += rec.ops.len() as u64;
    stats.in_place_ops += rec.in_place as u64;
    let keep = w.keep_bytes();
    let cmp = cfg.compare;
    let oracle = Oracle::new(rec, cmp);
    let mut trees: HashMap<u64, Tree> = HashMap::new();
    let mut cache: HashMap<u64, Outcome> = HashMap::new();
    let mut checked: u64 = 0;
    let writes = (!cfg.damage.is_empty()).then(|| Writes::of(&rec.trace));
    rec.trace.crash_points(|cp| {
        if cfg.only_point.is_some_and(|p| p != cp.index) {
            return true;
        }
        if cfg.max_images.is_some_and(|m| checked >= m) {
            return false;
        }
        stats.crash_points += 1;
        let mut rng = Rng::derive(cfg.seed, cp.index as u64);
        let allowed = oracle.states(cp.in_flight, cp.completed);
        let overwrite = torn_write(w, rec, cp);
        // A tree that is no legal state as it stands: torn by the
        // overwrite in flight, or why it is illegal.
        let judge = |got: &Tree, choice: &pm::Choice| -> Result<(), String> {
            let mut m = illegal(got, &oracle, &allowed, cp.in_flight, cmp, describe_choice(cp, choice));
            let Some(o) = &overwrite else { return Err(m) };
            let i = cp.in_flight.unwrap_or_default() as usize;
            let mut why = Vec::new();
            for (b, a) in oracle.torn_pairs(i) {
                match got.torn_write(oracle.tree(b), oracle.tree(a), o, cmp) {
                    Ok(()) => return Ok(()),
                    Err(e) => why.push(e),
                }
            }
            m += &format!("\nnor is it the write in flight torn: {}", why.join("; "));
            Err(m)
        };
        let written = writes.as_ref().map(|w| w.at(cp)).unwrap_or_default();
        let list = choices(cp, &cfg.pick, &mut rng);
        for (idx, choice) in list.iter().enumerate() {
            if cfg.only_image.is_some_and(|i| i != idx) {
                continue;
            }
            let key = cp.key(choice);
            let patches = cp.patches(choice);
            let fresh = !cache.contains_key(&key);
            let outcome = match cache.get(&key) {
                Some(o) => {
                    stats.repeats += 1;
                    o.clone()
                }
                None => {
                    let o = examine(&plain(&cp.durable, &patches), None, cfg, keep, &mut trees);
                    stats.images += 1;
                    checked += 1;
                    cache.insert(key, o.clone());
                    // Crash the recovery of a sample of images.
                    if let Ok(d) = o.result {
                        let every = if o.busy_recovery {
                            cfg.recovery_busy_every
                        } else {
                            cfg.recovery_every
                        };
                        let pick = every > 0 && (rng.below(every) == 0 || cfg.only_point.is_some());
                        if pick {
                            let img = OverlayRegion::new(cp.durable.clone(), patches.iter().copied()).to_vec();
                            crash_recovery(img, d, cfg, keep, &mut trees, stats, &mut |stats, p, i, msg| {
                                fail(stats, Some(cp.index), Some(idx), moment(rec, cp), Some((p, i)), msg)
                            });
                        }
                    }
                    o
                }
            };
            let msg = match &outcome.result {
                Err(e) if interrupted_mkfs(rec, cp, e) => None,
                Err(e) => Some(e.clone()),
                Ok(d) if oracle.accepts(&allowed, *d) => {
                    stats.lost += u64::from(oracle.lost_only(&allowed, *d));
                    None
                }
                Ok(d) => match judge(&trees[d], choice) {
                    Ok(()) => {
                        stats.torn += 1;
                        None
                    }
                    Err(m) => Some(m),
                },
            };
            if let Some(mut m) = msg {
                if outcome.result.is_err() {
                    m = format!("{m}\n({})", describe_choice(cp, choice));
                }
                fail(stats, Some(cp.index), Some(idx), moment(rec, cp), None, m);
                continue;
            }
            // The same image with one copy of what the op wrote damaged
            // must recover as the image does (a legal state), every copy
            // whole again after the unmount.
            let (Ok(undamaged), true) = (&outcome.result, fresh) else {
                continue;
            };
            let mut drng = Rng::derive(cfg.seed ^ 0xda, (cp.index as u64) << 20 ^ idx as u64);
            let probe = plain(&cp.durable, &patches)();
            let Some(dmg) = damage::choose(&written, cp, &probe, &cfg.damage, &mut drng) else {
                continue;
            };
            let bytes = drng.next_u64();
            let damaged = || Arc::new(dmg.apply(&cp.durable, &patches, &mut Rng::new(bytes)));
            let o = examine(&damaged, Some(&dmg), cfg, keep, &mut trees);
            stats.images += 1;
            stats.damaged += 1;
            checked += 1;
            let msg = match &o.result {
                Ok(d) if d == undamaged => None,
                Ok(d) if oracle.accepts(&allowed, *d) => {
                    stats.damaged_other_state += 1;
                    None
                }
                Ok(d) => judge(&trees[d], choice).err(),
                // The damage took the copy of the old superblock the crash
                // left (mkfs had cleared the other's magic): the image is
                // plainly not novafs, mkfs's own interrupted state.
                Err(e) if interrupted_mkfs(rec, cp, e) => {
                    stats.damaged_other_state += 1;
                    None
                }
                Err(e) => Some(format!("{e}\n({})", describe_choice(cp, choice))),
            };
            if let Some(m) = msg {
                fail(
                    stats,
                    Some(cp.index),
                    Some(idx),
                    moment(rec, cp),
                    None,
                    format!("after {dmg}: {m}"),
                );
            }
        }
        true
    });
    stats.elapsed += t0.elapsed();
}

/// Whether `err` is what an interrupted mkfs may leave: an image that is
/// plainly not novafs (mkfs clears both magic words first and writes the
/// superblock last).
fn interrupted_mkfs(rec: &Recorded, cp: &CrashPoint<'_>, err: &str) -> bool {
    cp.in_flight.is_some_and(|i| matches!(rec.ops[i as usize], Op::Mkfs)) && err.contains("is not a novafs file system")
}

/// Records the recovery of `img` and checks every crash image of it: each
/// must recover to the tree the uninterrupted recovery showed (`expect`).
fn crash_recovery(
    img: Vec<u8>,
    expect: u64,
    cfg: &Config,
    keep: usize,
    trees: &mut HashMap<u64, Tree>,
    stats: &mut Stats,
    fail: &mut dyn FnMut(&mut Stats, usize, usize, String),
) {
    let rec = Arc::new(RecordingRegion::new(img));
    let opened = catch_unwind(AssertUnwindSafe(|| {
        Fs::open(rec.clone(), MountOptions::default()).map(drop)
    }));
    if !matches!(opened, Ok(Ok(()))) {
        return; // The first recovery worked on a copy of this image: a difference is nondeterminism.
    }
    stats.recoveries += 1;
    let trace = rec.trace();
    let mut seen: HashMap<u64, ()> = HashMap::new();
    trace.crash_points(|cp| {
        let mut rng = Rng::derive(cfg.seed ^ 0xec, cp.index as u64);
        let list = choices(cp, &cfg.recovery_pick, &mut rng);
        for (idx, choice) in list.iter().enumerate() {
            if seen.insert(cp.key(choice), ()).is_some() {
                continue;
            }
            let patches = cp.patches(choice);
            let o = examine(&plain(&cp.durable, &patches), None, cfg, keep, trees);
            stats.images += 1;
            stats.recovery_images += 1;
            match o.result {
                Ok(d) if d == expect => {}
                Ok(d) => {
                    let mut m = format!(
                        "a crash during recovery, recovered again, shows another tree than the recovery without a crash ({})",
                        describe_choice(cp, choice)
                    );
                    for l in trees[&d].diff(&trees[&expect], cfg.compare, 8) {
                        m += &format!("\n  {l}");
                    }
                    fail(stats, cp.index, idx, m);
                }
                Err(e) => fail(stats, cp.index, idx, format!("{e}\n({})", describe_choice(cp, choice))),
            }
        }
        true
    });
}

/// The crash points of a workload's recording, for listing.
pub fn count_points(w: &Workload) -> Result<usize, String> {
    Ok(record(w)?.trace.crash_points(|_| true))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_a_relaxed_workload_s_write_in_flight_may_be_torn() {
        let mut w = Workload::new(
            "w",
            vec![Op::create("/f"), Op::write("/f", 0, 100, 1)],
            vec![Op::write("/f", 10, 20, 2), Op::chmod("/f", 0o600)],
        );
        let mut rec = Recorded {
            ops: w.recorded_ops(),
            trace: Trace {
                base: Vec::new(),
                events: Vec::new(),
            },
            states: Vec::new(),
            errors: Vec::new(),
            in_place: 0,
            batch: Batched::default(),
        };
        // Strict: the oracle stays exact.
        assert_eq!(overwrite_of(&w, &rec, 1), None);
        w.consistency = novafs::Consistency::Relaxed;
        let o = Overwrite {
            path: "/f".into(),
            off: 10,
            len: 20,
        };
        assert_eq!(overwrite_of(&w, &rec, 1), Some(o));
        assert_eq!(overwrite_of(&w, &rec, 2), None, "a chmod is atomic");
        rec.errors.push((1, "EIO".into()));
        assert_eq!(overwrite_of(&w, &rec, 1), None, "a failed write changed nothing");
    }

    #[test]
    fn failures_group_by_kind_regardless_of_numbers() {
        let f = |msg: &str, rec| Failure {
            workload: "w".into(),
            seed: 0,
            long: true,
            damage: Vec::new(),
            point: Some(1),
            image: Some(2),
            moment: String::new(),
            recovery: rec,
            message: msg.into(),
        };
        let v = vec![
            f("inode 12 has link count 2 but 1 links", None),
            f("inode 7 has link count 3 but 2 links", None),
            f("inode 7 has link count 3 but 2 links", Some((0, 1))),
        ];
        let g = group(&v);
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].1, 2);
        assert!(v[0]
            .to_string()
            .contains("reproduce: novafs crashcheck --all --workload w --seed 0 --point 1 --image 2"));
    }
}
