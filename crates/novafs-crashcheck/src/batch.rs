//! The oracle of batching (FGM §III-C1; README "Relaxed mode"; novafs's
//! `journal::batch`): the crash states a batching relaxed mount may leave.
//!
//! A batching mount's in-place setattrs (and, until overwrites stop
//! batching, an in-place overwrite's new mtime) rewrite words of the
//! inode's newest log entry in a *running transaction* in DRAM. It reaches
//! the media in one journal transaction when it commits: when it holds
//! the mount's `words`, on the timer, at fsync, at a snapshot, before a
//! log page is freed and at unmount. A crash loses every word it holds,
//! together, and nothing else.
//!
//! What a tree shows of that: an in-place setattr rewrites a setattr entry
//! that carries every attribute, so a crash may show an inode's mode,
//! owner, group and times ([`Field`]) at the values that entry has on the
//! media. The oracle follows the live run op by op ([`Tracker`]) and keeps
//! the *pending* fields: for each inode, those that batched ops changed
//! since the running transaction last committed, each with its value on
//! the media — its value just before the first of them:
//!
//! - an op that went [`Way::Batched`] (attributes changed, no log entry
//!   appended, no page moved, no journal transaction), or in place
//!   leaving the running transaction empty (it filled it), adds the
//!   fields it changed that were not pending yet, at their value before
//!   it;
//! - any other op is durable when it returns: a field it changes was
//!   written by an entry after the rewritten one (or by its own journal
//!   transaction), so it stops being pending; and an op that appends a
//!   setattr entry to a pending inode (truncate, the first setattr after a
//!   write, thorough GC's compacted log) writes every attribute the inode
//!   has in DRAM: none of the inode's fields stays pending;
//! - commit points empty the set: a successful fsync, snapshot, unmount or
//!   remount (the promise, taken as is: the oracle does not ask the mount
//!   whether they committed), and any op after which the mount's running
//!   transaction is empty ([`novafs::Fs::running_words`]: it filled, or a
//!   log page was freed). The timer never fires in a workload (its
//!   interval is an hour): a commit there would land between any two
//!   stores, where the trace could not say which op it belongs to.
//!
//! A crash after op `i` returned shows the state after it with *every*
//! pending field at its media value ([`Legal::Lost`]): all lost together,
//! and none kept, since nothing of the running transaction reaches the
//! media before its commit. A crash during op `i` shows the state before
//! it with the fields pending then, or the state after it with the fields
//! pending had it made no commit ([`Legal::Applied`]); when op `i`
//! commits the running transaction, also either state as it is (the
//! commit reached, the op's own change reached or not); an overwrite in
//! flight may be torn between the two states before and after it
//! ([`Oracle::torn_pairs`]). Names, sizes, bytes, link counts, extended
//! attributes and snapshots stay exact, and so does every field no
//! batched op changed since the last commit.

use std::collections::{BTreeMap, HashMap};

use novafs::{Fs, Ino};
use novafs_ops::{Op, Runner};

use crate::engine::Recorded;
use crate::tree::{Compare, Node, Tree};
use crate::workload::{look_ino, Way};

/// An attribute an in-place setattr rewrites and a tree shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Field {
    Perm,
    Uid,
    Gid,
    Atime,
    Mtime,
    Ctime,
}

impl Field {
    pub const ALL: [Field; 6] = [
        Field::Perm,
        Field::Uid,
        Field::Gid,
        Field::Atime,
        Field::Mtime,
        Field::Ctime,
    ];

    /// Its value in `n`.
    pub fn of(self, n: &Node) -> i64 {
        match self {
            Field::Perm => n.perm.into(),
            Field::Uid => n.uid.into(),
            Field::Gid => n.gid.into(),
            Field::Atime => n.atime,
            Field::Mtime => n.mtime,
            Field::Ctime => n.ctime,
        }
    }

    fn set(self, n: &mut Node, v: i64) {
        let small = || u32::try_from(v).unwrap_or(u32::MAX);
        match self {
            Field::Perm => n.perm = small(),
            Field::Uid => n.uid = small(),
            Field::Gid => n.gid = small(),
            Field::Atime => n.atime = v,
            Field::Mtime => n.mtime = v,
            Field::Ctime => n.ctime = v,
        }
    }
}

/// What a crash loses with the running transaction, on one state's paths:
/// each listed field of each path at its value on the media (every path
/// of an inode is listed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lost(pub Vec<(String, Field, i64)>);

impl Lost {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `t` with these fields at their media values.
    pub fn apply(&self, t: &Tree) -> Tree {
        let mut t = t.clone();
        for (p, f, v) in &self.0 {
            if let Some(n) = t.nodes.get_mut(p) {
                f.set(n, *v);
            }
        }
        t
    }
}

/// What the live run of a batching workload says a crash may lose.
/// Empty (every crash state exact) for a workload that does not batch.
#[derive(Clone, Debug, Default)]
pub struct Batched {
    /// `at[k]`: lost by a crash showing `states[k]`, no commit since.
    pub at: Vec<Lost>,
    /// `applied[i]`: lost by a crash showing `states[i + 1]` while op `i`
    /// is in flight, before a commit it makes.
    pub applied: Vec<Lost>,
    /// `commits[i]`: op `i` committed the running transaction (or must
    /// have: fsync, snapshot, unmount).
    pub commits: Vec<bool>,
}

impl Batched {
    fn commits(&self, i: usize) -> bool {
        self.commits.get(i).copied().unwrap_or(false)
    }
}

/// Whether `op`, having succeeded, must have committed the running
/// transaction (README: fsync, a snapshot, a clean unmount).
pub fn commits(op: &Op) -> bool {
    matches!(op, Op::Fsync(_) | Op::Snapshot(_) | Op::Unmount | Op::Remount)
}

/// Pending fields: inode → field → value on the media.
type Pending = BTreeMap<Ino, BTreeMap<Field, i64>>;

/// Follows a batching workload's live run (module docs).
pub struct Tracker {
    pending: Pending,
    /// Setattr entries of each pending inode before the op.
    setattrs: HashMap<Ino, Vec<u64>>,
    /// The running transaction's words before the op.
    words: usize,
    /// Its commits before the op ([`novafs::Fs::batch_stats`]).
    commits: u64,
    /// Inode of each path of the last state.
    inos: HashMap<String, Ino>,
    out: Batched,
}

impl Default for Tracker {
    fn default() -> Tracker {
        Tracker {
            pending: Pending::new(),
            setattrs: HashMap::new(),
            words: 0,
            commits: 0,
            inos: HashMap::new(),
            out: Batched {
                at: vec![Lost::default()],
                ..Batched::default()
            },
        }
    }
}

impl Tracker {
    /// Before each recorded op.
    pub fn before(&mut self, run: &Runner) {
        self.words = run.fs().map_or(0, Fs::running_words);
        self.commits = run.fs().map_or(0, |fs| fs.batch_stats().commits());
        self.setattrs = self
            .pending
            .keys()
            .filter_map(|&x| look_ino(run, x).ok().map(|l| (x, l.setattrs)))
            .collect();
    }

    /// After each recorded op: `ok` it succeeded, `way` how it changed the
    /// inode `target` it names, `before` and `after` the states around it.
    pub fn after(&mut self, run: &Runner, op: &Op, ok: bool, way: Option<(Way, Ino)>, before: &Tree, after: &Tree) {
        let words = run.fs().map_or(0, Fs::running_words);
        // A change that would overfill the running transaction commits it
        // first, then waits in it (`journal::batch`).
        let committed_here = run.fs().is_some_and(|fs| fs.batch_stats().commits() > self.commits);
        let inos: HashMap<String, Ino> = match run.fs() {
            Some(fs) => after
                .nodes
                .keys()
                .filter_map(|p| fs.resolve(p).ok().map(|a| (p.clone(), a.ino)))
                .collect(),
            None => self.inos.clone(),
        };
        let was = |x: Ino| node(before, &self.inos, x);
        let now = |x: Ino| node(after, &inos, x);
        let mut applied = self.pending.clone();
        // The op's own batched fields, when the transaction committed
        // before they joined it.
        let mut own = Pending::new();
        // A batched change that commits the running transaction: one that
        // fills it (in place, a journal transaction, nothing left
        // running), or one that would overfill it (a commit, then the
        // change waiting).
        let batched = match way {
            Some((Way::Batched, x)) => Some(x),
            Some((Way::InPlace, x)) if words == 0 || committed_here => Some(x),
            _ => None,
        };
        match batched.filter(|_| ok) {
            Some(x) => {
                if let (Some(b), Some(a)) = (was(x), now(x)) {
                    for f in Field::ALL.into_iter().filter(|f| f.of(b) != f.of(a)) {
                        applied.entry(x).or_default().entry(f).or_insert(f.of(b));
                        own.entry(x).or_default().insert(f, f.of(b));
                    }
                }
            }
            None => {
                for (x, fields) in applied.iter_mut() {
                    let new_setattr = match (self.setattrs.get(x), look_ino(run, *x)) {
                        (Some(old), Ok(l)) => l.setattrs.iter().any(|s| !old.contains(s)),
                        _ => false,
                    };
                    if new_setattr {
                        fields.clear();
                    } else if let (Some(b), Some(a)) = (was(*x), now(*x)) {
                        fields.retain(|f, _| f.of(b) == f.of(a));
                    }
                }
            }
        }
        applied.retain(|_, f| !f.is_empty());
        let must = ok && commits(op);
        let pending = if must || words == 0 {
            Pending::new()
        } else if committed_here {
            own
        } else {
            applied.clone()
        };
        let anything = !self.pending.is_empty() || !applied.is_empty();
        self.out
            .commits
            .push(must || ((words == 0 || committed_here) && anything));
        self.out.applied.push(lost_on(&applied, after, &inos));
        self.out.at.push(lost_on(&pending, after, &inos));
        self.pending = pending;
        self.inos = inos;
    }

    pub fn finish(self) -> Batched {
        self.out
    }
}

/// Inode `x`'s node in `t`, whose paths name the inodes `inos` says.
fn node<'a>(t: &'a Tree, inos: &HashMap<String, Ino>, x: Ino) -> Option<&'a Node> {
    t.nodes.iter().find(|(p, _)| inos.get(*p) == Some(&x)).map(|(_, n)| n)
}

/// `pending` on the paths of `t`: only fields whose media value differs
/// from what `t` shows.
fn lost_on(pending: &Pending, t: &Tree, inos: &HashMap<String, Ino>) -> Lost {
    let mut v = Vec::new();
    for (p, n) in &t.nodes {
        let Some(fields) = inos.get(p).and_then(|x| pending.get(x)) else {
            continue;
        };
        for (&f, &val) in fields {
            if f.of(n) != val {
                v.push((p.clone(), f, val));
            }
        }
    }
    Lost(v)
}

/// A legal crash state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Legal {
    /// `states[k]` as the live run showed it.
    Exact(usize),
    /// `states[k]` with the running transaction lost (`Batched::at`).
    Lost(usize),
    /// `states[i + 1]`, op `i` in flight before its commit, with the
    /// running transaction lost (`Batched::applied`).
    Applied(usize),
}

/// The legal states of one workload's recording, as trees and digests.
pub struct Oracle<'a> {
    rec: &'a Recorded,
    exact: Vec<u64>,
    lost: HashMap<Legal, (Tree, u64)>,
}

impl<'a> Oracle<'a> {
    pub fn new(rec: &'a Recorded, cmp: Compare) -> Oracle<'a> {
        let mut lost = HashMap::new();
        let b = &rec.batch;
        for (k, l) in b.at.iter().enumerate().filter(|(_, l)| !l.is_empty()) {
            if let Some(s) = rec.states.get(k) {
                let t = l.apply(s);
                let d = t.digest(cmp);
                lost.insert(Legal::Lost(k), (t, d));
            }
        }
        for (i, l) in b.applied.iter().enumerate().filter(|(_, l)| !l.is_empty()) {
            if let Some(s) = rec.states.get(i + 1) {
                let t = l.apply(s);
                let d = t.digest(cmp);
                lost.insert(Legal::Applied(i), (t, d));
            }
        }
        Oracle {
            rec,
            exact: rec.states.iter().map(|t| t.digest(cmp)).collect(),
            lost,
        }
    }

    /// `v`, or the exact state it is when nothing is lost.
    fn canon(&self, v: Legal) -> Legal {
        match v {
            Legal::Lost(k) if !self.lost.contains_key(&v) => Legal::Exact(k),
            Legal::Applied(i) if !self.lost.contains_key(&v) => Legal::Exact(i + 1),
            v => v,
        }
    }

    /// The states a crash may show with op `in_flight` running, after op
    /// `completed` returned (a crash point's; module docs).
    pub fn states(&self, in_flight: Option<u64>, completed: Option<u64>) -> Vec<Legal> {
        let b = &self.rec.batch;
        let mut v = match (in_flight, completed) {
            (Some(i), _) => {
                let i = i as usize;
                let mut v = vec![Legal::Lost(i), Legal::Applied(i)];
                if b.commits(i) {
                    v.extend([Legal::Exact(i), Legal::Exact(i + 1)]);
                }
                v
            }
            (None, Some(i)) => vec![Legal::Lost(i as usize + 1)],
            (None, None) => vec![Legal::Exact(0)],
        };
        v = v.into_iter().map(|s| self.canon(s)).collect();
        let mut seen = Vec::new();
        v.retain(|s| {
            let fresh = !seen.contains(s);
            seen.push(*s);
            fresh
        });
        v
    }

    /// The (before, after) pairs an overwrite in flight as op `i` may be
    /// torn between ([`Tree::torn_write`]).
    pub fn torn_pairs(&self, i: usize) -> Vec<(Legal, Legal)> {
        let mut v = vec![(self.canon(Legal::Lost(i)), self.canon(Legal::Applied(i)))];
        if self.rec.batch.commits(i) && v[0] != (Legal::Exact(i), Legal::Exact(i + 1)) {
            v.push((Legal::Exact(i), Legal::Exact(i + 1)));
        }
        v
    }

    pub fn digest(&self, v: Legal) -> u64 {
        match v {
            Legal::Exact(k) => self.exact[k],
            v => self.lost[&v].1,
        }
    }

    pub fn tree(&self, v: Legal) -> &Tree {
        match v {
            Legal::Exact(k) => &self.rec.states[k],
            v => &self.lost[&v].0,
        }
    }

    /// Whether a tree of digest `d` is one of `legal`.
    pub fn accepts(&self, legal: &[Legal], d: u64) -> bool {
        legal.iter().any(|&v| self.digest(v) == d)
    }

    /// Whether `d` is one of `legal` only as a state that lost a running
    /// transaction.
    pub fn lost_only(&self, legal: &[Legal], d: u64) -> bool {
        let (exact, lost): (Vec<Legal>, Vec<Legal>) = legal.iter().partition(|v| matches!(v, Legal::Exact(_)));
        self.accepts(&lost, d) && !self.accepts(&exact, d)
    }

    /// `v` in words, for a crash during op `in_flight` (if any).
    pub fn describe(v: Legal, in_flight: Option<u64>) -> String {
        let when = |k: usize| match in_flight {
            Some(i) if i as usize == k => "the state before the op",
            _ => "the state after the op",
        };
        match v {
            Legal::Exact(k) => when(k).into(),
            Legal::Lost(k) => format!("{} with the running transaction lost", when(k)),
            Legal::Applied(_) => "the state after the op with the running transaction lost".into(),
        }
    }
}

#[cfg(test)]
mod tests;
