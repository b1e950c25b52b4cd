//! Offline consistency check. Reads every live inode and its whole log
//! (every entry's checksum), then cross-checks: no page owned twice, every
//! dentry points at a live inode of the right type, every live inode is
//! reachable from the root, link counts equal the names (and subdirectories)
//! that point at them, and — after a clean unmount — the saved free lists
//! are exactly the pages and inode slots nobody uses.
//!
//! Like a mount, fsck first replays committed journal transactions: they are
//! part of the file system's state. It changes nothing else; [`repair`]
//! does.

mod data;
mod salvage;
mod space;

pub use space::{MetaKind, MetaPage, Space};

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use pm::Region;

use crate::alloc::Budget;
use crate::lock::{Mutex, Rank};

use crate::cache::Cache;
use crate::commit::Ctx;
use crate::consistency::Consistency;
use crate::error::Result;
use crate::health::HealthCounts;
use crate::inode::{Body, FileType, Ino, InodeState, ROOT_INO};
use crate::itable::Slot;
use crate::journal::{damaged_headers, Journal};
use crate::layout::Bounds;
use crate::layout::{
    decode, ftype_of_mode, DentryHead, EntryHeader, EntryType, CHUNK_PAGES, CHUNK_SIZE, DENTRY_HEAD_SIZE,
    ENTRY_INVALID, FEATURE_INCOMPAT_RELAXED, FEATURE_INCOMPAT_SNAPSHOTS, INODE_FREE, INODE_LIVE, INODE_STATE_OFF,
    KEPT_INODE, PAGE_SIZE, RESERVED_INODES_OFF, STATE_CLEAN, STATE_MOUNTED,
};
use crate::log::Log;
use crate::namespace::{Namespace, NewNode};
use crate::recovery::{self, MetaReplicas};
use crate::replica::sync;
use crate::snapshot::{Kept, Snapshots};
use crate::superblock::{bounds_of, read_superblock, replica_matches, write_superblock};

/// What fsck found.
#[derive(Debug, Default)]
pub struct Report {
    /// Inconsistencies: each one makes the exit status 1.
    pub problems: Vec<String>,
    /// Facts worth telling that are not problems.
    pub notes: Vec<String>,
    pub inodes: u64,
    pub directories: u64,
    pub files: u64,
    pub pages_used: u64,
    pub pages_free: u64,
    pub clean: bool,
    /// One of the problems is a superblock copy torn or stale: damage, or
    /// what a crash during the two-copy superblock update leaves (R4),
    /// which the next mount rewrites from the good copy.
    pub superblock_copy: bool,
    /// What the image's bytes hold (NOVA-Fortis Fig. 12).
    pub space: Space,
}

impl Report {
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }

    /// Clean but, perhaps, for one superblock copy: what an image may show
    /// after a crash (see `superblock_copy`) before a mount finishes it.
    pub fn is_clean_but_for_an_interrupted_superblock_update(&self) -> bool {
        self.problems.len() == usize::from(self.superblock_copy)
    }
}

/// Facts gathered about one live inode.
struct Seen {
    kind: FileType,
    nlink: u32,
    /// (name, target, ftype) for directories.
    entries: Vec<(Vec<u8>, Ino, u8)>,
    parent: Ino,
}

/// Checks the image on `region`. `progress(done, total)` is called as
/// inode-table chunks are scanned.
pub fn check(region: Arc<dyn Region>, progress: &dyn Fn(u64, u64)) -> Result<Report> {
    let mut rep = Report::default();
    let r = &*region;
    let (sb, primary_bad) = read_superblock(r)?;
    // A copy torn or stale is damage or a crash during a superblock
    // update (R4); either way one copy is gone until a repair rewrites it.
    if primary_bad {
        rep.superblock_copy = true;
        rep.problems
            .push("primary superblock is damaged (the replica is intact); fsck --repair rewrites it".into());
    } else if !replica_matches(r, &sb) {
        rep.superblock_copy = true;
        rep.problems
            .push("superblock replica is damaged or stale; fsck --repair rewrites it".into());
    }
    if Consistency::from_code(sb.consistency).is_none() {
        rep.problems.push(format!(
            "the superblock records consistency mode {}, which is neither 0 (strict) nor 1 (relaxed): \
             no mount takes the image; fsck --repair resets it to strict",
            sb.consistency
        ));
    }
    if sb.features_incompat & FEATURE_INCOMPAT_RELAXED != 0 {
        rep.notes
            .push("a relaxed mount is in use or crashed: the next mount reseals its data-write intents".into());
    }
    rep.clean = sb.state == STATE_CLEAN;
    let health = HealthCounts::of(&sb);
    if health != HealthCounts::default() {
        rep.notes.push(health.to_string());
    }
    for damage in damaged_headers(r, &sb)? {
        rep.problems.push(format!("{damage}; fsck --repair rewrites it"));
    }
    let replay = Journal::recover(&region, &sb)?;
    if replay.replayed > 0 {
        rep.notes
            .push(format!("replayed {} committed journal transaction(s)", replay.replayed));
    }
    if replay.resealed > 0 {
        rep.notes.push(format!(
            "resealed {} data page(s) a relaxed-mode write was changing in place at the crash",
            replay.resealed
        ));
    }
    if replay.repaired > 0 {
        // A clean image has nothing to replay: this one crashed, and a
        // crash between the copies' stores leaves the same.
        rep.notes.push(format!(
            "{} range(s) a committed journal transaction checks hold only in their replicas (a crash between the copies, or damage); the replay rewrote the primaries",
            replay.repaired
        ));
    }
    let bounds = bounds_of(&sb);
    // Read-only: what is read from a replica is used, never written back.
    let ctx = recovery::open_ctx(region.clone(), &sb, true)?;
    let tables = ctx.tables();
    let mut from_replica = 0u64;
    let mut replica_pages = 0u64;
    let mut owner: HashMap<u64, Ino> = HashMap::new();
    let mut own = |rep: &mut Report, page: u64, ino: Ino| {
        if let Some(prev) = owner.insert(page, ino) {
            rep.problems
                .push(format!("page {page:#x} is used by inode {prev} and inode {ino}"));
        }
    };
    let mut meta: Vec<MetaPage> = Vec::new();
    let meta_page = |off, kind| MetaPage {
        off,
        replica: bounds.mirror(off),
        kind,
    };
    for c in tables.all_chunks() {
        meta.extend((0..CHUNK_PAGES).map(|i| meta_page(c + i * PAGE_SIZE, MetaKind::InodeTable)));
        for p in (0..CHUNK_PAGES).flat_map(|i| bounds.copies(c + i * PAGE_SIZE)) {
            own(&mut rep, p, 0);
        }
    }
    // The snapshot list's log (inode 0, like the tables: no file's).
    for p in ctx.snapshots().log_pages() {
        meta.push(meta_page(p, MetaKind::Log));
        for c in bounds.copies(p) {
            own(&mut rep, c, 0);
        }
    }
    let mut seen: HashMap<Ino, Seen> = HashMap::new();
    let mut bad_data: Vec<(Ino, data::DataCheck)> = Vec::new();
    let mut free_slots: Vec<Ino> = Vec::new();
    let total: u64 = (0..tables.shard_count() as usize)
        .map(|s| tables.slots(s).len() as u64)
        .sum();
    let mut done = 0;
    for shard in 0..tables.shard_count() as usize {
        tables.scan_shard(ctx.region(), shard, |slot| {
            let (ino, off, rec, replica) = match slot {
                Slot::Free { ino, replica, .. } => {
                    // Judged by its replica: the primary's state word is damaged.
                    from_replica += u64::from(replica);
                    free_slots.push(ino);
                    return Ok(());
                }
                Slot::ChunkDone => {
                    done += 1;
                    progress(done, total);
                    return Ok(());
                }
                Slot::Live { ino, off, rec, replica } => (ino, off, rec, replica),
                Slot::Kept { ino, rec, .. } if ctx.snapshots().needing(rec.create_epoch, rec.delete_epoch).is_none() => {
                    rep.notes.push(format!(
                        "inode {ino} is kept for snapshots that are gone (a crash while one was deleted); the next mount frees it"
                    ));
                    return Ok(());
                }
                Slot::Kept { ino, off, rec, replica } => (ino, off, rec, replica),
            };
            let live = rec.state == INODE_LIVE;
            rep.inodes += u64::from(live);
            from_replica += u64::from(replica);
            let (st, superseded) = match recovery::load_for_snapshots(&ctx, off, &rec) {
                Ok(loaded) => loaded,
                Err(e) => match salvage::plan(&ctx, off, &rec) {
                    // Checked as the repair will leave it, so that its name
                    // and pages are not called missing and leaked too.
                    Some(p) if live => {
                        for why in &p.why {
                            rep.problems.push(format!(
                                "inode {ino}: {why}; fsck --repair keeps the file, those bytes reading EIO"
                            ));
                        }
                        (p.state, Vec::new())
                    }
                    _ => {
                        rep.problems.push(format!("inode {ino}: {e}"));
                        return Ok(());
                    }
                },
            };
            for p in superseded {
                own(&mut rep, p, ino);
            }
            from_replica += st.log.repairs().len() as u64;
            // The log pointers outside the record's checksum: the load
            // falls back to the replica's when the primary's lead nowhere.
            let (head, tail) = (st.log.head(), st.log.tail());
            from_replica += u64::from((head, tail) != (rec.log_head, rec.log_tail));
            if !bounds.stale {
                // Only the committed part of the tail page means anything:
                // past the tail, a repaired primary may keep its damage
                // until the next append overwrites both copies.
                let tail_page = tail - tail % PAGE_SIZE;
                for &p in st.log.pages() {
                    let len = if p == tail_page { tail - p } else { PAGE_SIZE };
                    replica_pages += sync(ctx.data(), bounds, p, len, false)?;
                }
            }
            if rec.ino != ino {
                rep.problems
                    .push(format!("inode slot {ino} holds inode number {}", rec.ino));
            }
            meta.extend(st.log.pages().iter().map(|&p| meta_page(p, MetaKind::Log)));
            for p in st.pages(bounds) {
                own(&mut rep, p, ino);
            }
            let checked = data::check_data(&ctx, &st, false)?;
            if checked.any() {
                bad_data.push((ino, checked));
            }
            if !live {
                // Kept: no live name reaches it. Listed as the scan lists
                // it, for the saved manifests to be checked against.
                if let Some(s) = ctx.snapshots().needing(rec.create_epoch, rec.delete_epoch) {
                    let pages = st.pages(bounds).len() as u64;
                    ctx.snapshots().keep(
                        s,
                        Kept::Inode {
                            birth: st.born,
                            ino,
                            off,
                            pages,
                        },
                    );
                }
                return Ok(());
            }
            if st.attr().kind == FileType::Directory {
                let deferrable = sb.features_incompat & FEATURE_INCOMPAT_SNAPSHOTS != 0;
                check_cancellations(&mut rep, ctx.region(), bounds, (ino, head, tail), deferrable)?;
            }
            seen.insert(ino, describe(&st));
            Ok(())
        })?;
    }
    if bounds.stale {
        rep.notes.push(
            "metadata replicas are stale (last mounted with meta_protection=off); the next protected mount rewrites them"
                .into(),
        );
    } else {
        for (_, chunk) in (0..tables.shard_count() as usize).flat_map(|s| tables.slots(s)) {
            replica_pages += sync(ctx.data(), bounds, chunk, CHUNK_SIZE, false)?;
        }
        replica_pages += sync(ctx.data(), bounds, RESERVED_INODES_OFF, PAGE_SIZE, false)?;
    }
    if from_replica > 0 {
        // A checksum that fails, or a word that is no value, is damage: a
        // crash leaves neither (R1, R5).
        rep.problems.push(format!(
            "{from_replica} damaged metadata piece(s) were read from their replicas; fsck --repair rewrites them"
        ));
    }
    if replica_pages > 0 {
        let msg = format!("{replica_pages} metadata page(s) differ from their replicas");
        if rep.clean {
            // Both copies were written before one fence and the image was
            // unmounted cleanly: a difference is damage to one of them.
            rep.problems.push(format!("{msg}; fsck --repair rewrites them"));
        } else {
            rep.notes.push(format!(
                "{msg} (a crash between the copies); the next mount rewrites them"
            ));
        }
    }
    check_tree(&mut rep, &seen);
    report_data(&mut rep, &seen, &bad_data);
    rep.pages_used = owner.len() as u64;
    if rep.clean {
        check_free_lists(&mut rep, &region, &sb, &owner, &free_slots, ctx.snapshots())?;
    } else {
        rep.notes
            .push("image was not cleanly unmounted: free space is rebuilt by the next mount".into());
        rep.pages_free = (sb.data_end - sb.data_start) / PAGE_SIZE - rep.pages_used;
    }
    rep.space = Space::of(&sb, bounds, meta, rep.pages_used, rep.pages_free);
    Ok(rep)
}

/// Problems for the data pages that fail their checks: one line for all
/// that redundancy rebuilds, and one per page that it cannot, naming the
/// file and the bytes lost.
fn report_data(rep: &mut Report, seen: &HashMap<Ino, Seen>, bad: &[(Ino, data::DataCheck)]) {
    let rebuildable: u64 = bad.iter().map(|(_, c)| c.rebuildable).sum();
    if rebuildable > 0 {
        rep.problems.push(format!(
            "{rebuildable} data page(s) fail a checksum or differ from their parity; fsck --repair rebuilds them from their redundancy"
        ));
    }
    let paths = paths(
        seen.iter()
            .map(|(&ino, s)| (ino, s.entries.iter().map(|(n, t, _)| (n.as_slice(), *t)))),
    );
    for (ino, c) in bad {
        for (lost, why) in &c.lost {
            rep.problems.push(lost_line(*ino, &paths, lost, why));
        }
        // Recorded on the media: consistent, so told, not a problem.
        rep.notes.extend(c.marked.iter().map(|r| marked_line(*ino, &paths, r)));
    }
}

/// What a user is told about bytes a lost range record marks.
fn marked_line(ino: Ino, paths: &HashMap<Ino, String>, r: &std::ops::Range<u64>) -> String {
    let name = paths.get(&ino).map_or_else(|| "no name".to_string(), Clone::clone);
    format!(
        "inode {ino} ({name}): bytes {}..{} were lost (a write entry over them was damaged in every copy); they read EIO until written again: restore them from a snapshot or a backup",
        r.start, r.end
    )
}

/// What a user is told about data redundancy cannot rebuild.
fn lost_line(ino: Ino, paths: &HashMap<Ino, String>, lost: &data::Lost, why: &str) -> String {
    let name = paths.get(&ino).map_or_else(|| "no name".to_string(), Clone::clone);
    format!(
        "inode {ino} ({name}): {lost} cannot be rebuilt ({why}); they read EIO until written again: restore them from a snapshot or a backup"
    )
}

/// A path of every inode the root reaches, from `(directory, its (name,
/// target) entries)`: the first name found, breadth first.
fn paths<'a, E>(dirs: impl Iterator<Item = (Ino, E)>) -> HashMap<Ino, String>
where
    E: Iterator<Item = (&'a [u8], Ino)>,
{
    let entries: HashMap<Ino, Vec<(&[u8], Ino)>> = dirs.map(|(d, e)| (d, e.collect())).collect();
    let mut out = HashMap::from([(ROOT_INO, "/".to_string())]);
    let mut queue = VecDeque::from([ROOT_INO]);
    while let Some(d) = queue.pop_front() {
        let base = out
            .get(&d)
            .map_or_else(String::new, |p| p.trim_end_matches('/').to_string());
        for &(name, t) in entries.get(&d).map_or(&[][..], Vec::as_slice) {
            if let std::collections::hash_map::Entry::Vacant(e) = out.entry(t) {
                e.insert(format!("{base}/{}", String::from_utf8_lossy(name)));
                queue.push_back(t);
            }
        }
    }
    out
}

/// `fsck --repair`: makes the image consistent again, keeping everything
/// that still loads, and returns one line per change. The superblock
/// copies are made equal (from the good one), committed journal
/// transactions are replayed, the allocators are rebuilt by a full scan
/// (never trusting saved state), unlinked inodes are reclaimed, names
/// whose inode is lost are removed, and inodes whose record or log no
/// longer loads are freed: their contents are gone, and freeing them
/// returns their pages. First, though, a file whose log fails only for
/// write entries damaged in both copies is kept, with the bytes they may
/// have written marked lost (`salvage`). What cannot be repaired stays for [`check`] to
/// report. Every step is an ordinary commit, so a crash during repair
/// leaves an image that mounts; running repair again finishes the job.
pub fn repair(region: Arc<dyn Region>) -> Result<Vec<String>> {
    let r = &*region;
    let mut done = Vec::new();
    let (mut sb, primary_bad) = read_superblock(r)?;
    if primary_bad {
        done.push("primary superblock rewritten from its replica".to_string());
    } else if !replica_matches(r, &sb) {
        done.push("superblock replica rewritten from the primary".to_string());
    }
    done.extend(damaged_headers(r, &sb)?.into_iter().map(|d| format!("{d}: rewritten")));
    if Consistency::from_code(sb.consistency).is_none() {
        // Strict is the mode that assumes nothing of the writes.
        done.push(format!(
            "consistency mode {} in the superblock reset to strict",
            sb.consistency
        ));
        sb.consistency = Consistency::Strict.code();
    }
    // Marked in use before anything else changes, so that this mount and
    // any after a crash rebuild the allocators by scanning.
    sb.state = STATE_MOUNTED;
    write_superblock(r, &mut sb)?;
    let (replayed, salvaged) = salvage::salvage_all(region.clone())?;
    // Strict: repair writes no file data in place, so it sets no RELAXED
    // bit; one a crashed relaxed mount left stays until the clean unmount
    // below.
    let strict = Some(Consistency::Strict);
    let (ctx, _, report) = recovery::mount(region.clone(), false, MetaReplicas::AsFormatted, strict)?;
    let replayed = replayed + report.journal_replayed;
    if replayed > 0 {
        done.push(format!("replayed {replayed} committed journal transaction(s)"));
    }
    done.extend(salvaged);
    if report.orphans_reclaimed > 0 {
        done.push(format!(
            "reclaimed {} unlinked inode(s) left open at a crash",
            report.orphans_reclaimed
        ));
    }
    let Survey { dirs, live, lost, data } = survey(&ctx)?;
    data_repaired(&dirs, &data, &mut done);
    let cache = Cache::new(None);
    let rename_lock = Mutex::new(Rank::Rename, ());
    let ns = Namespace {
        ctx: &ctx,
        cache: &cache,
        rename_lock: &rename_lock,
    };
    for (dir, entries) in &dirs {
        for (name, target) in entries {
            if !live.contains_key(target) {
                ns.drop_dangling(*dir, name)?;
                done.push(format!(
                    "directory {dir}: removed '{}', whose inode {target} is lost",
                    String::from_utf8_lossy(name)
                ));
            }
        }
    }
    for (ino, off, why) in &lost {
        ctx.region().commit_u64(off + INODE_STATE_OFF, INODE_FREE)?; // R5, both copies
        ctx.health().lost(*ino, why);
        done.push(format!("freed: inode {ino}: {why}"));
    }
    reconnect(&ns, &dirs, &live, &mut done)?;
    relink(&ns, &dirs, &live, &mut done)?;
    // What this mount repaired and lost, for the next mount to count on.
    let (mut sb, _) = read_superblock(r)?;
    ctx.health().stamp(&mut sb);
    write_superblock(r, &mut sb)?;
    // A second scan returns the freed inodes' pages; then save cleanly.
    let (ctx, mut sb, _) = recovery::mount(region.clone(), false, MetaReplicas::AsFormatted, strict)?;
    recovery::save_clean(&ctx, &mut sb)?;
    done.push("free pages and inode slots rebuilt by a full scan and saved".to_string());
    Ok(done)
}

/// One line for the data pages rebuilt, and one per page that could not
/// be: the file keeps them, reading EIO there (`data`).
fn data_repaired(dirs: &[Dir], data: &[(Ino, data::DataCheck)], done: &mut Vec<String>) {
    let rebuilt: u64 = data.iter().map(|(_, c)| c.rebuildable).sum();
    if rebuilt > 0 {
        done.push(format!(
            "{rebuilt} data page(s) rebuilt from their checksums and parity"
        ));
    }
    let paths = paths(
        dirs.iter()
            .map(|(d, e)| (*d, e.iter().map(|(n, t)| (n.as_slice(), *t)))),
    );
    for (ino, c) in data {
        for (lost, why) in &c.lost {
            done.push(format!("kept, with a loss: {}", lost_line(*ino, &paths, lost, why)));
        }
        for r in &c.marked {
            done.push(format!("kept, with a loss: {}", marked_line(*ino, &paths, r)));
        }
    }
}

/// Gives every inode that still loads but that no name reaches any more
/// (the contents of a lost directory) a name in /lost+found, `#INO` as
/// e2fsck does; what such a directory holds comes back with it.
fn reconnect(
    ns: &Namespace<'_>,
    dirs: &[Dir],
    live: &HashMap<Ino, (FileType, u32)>,
    done: &mut Vec<String>,
) -> Result<()> {
    let entries: HashMap<Ino, &[(Vec<u8>, Ino)]> = dirs.iter().map(|(d, e)| (*d, e.as_slice())).collect();
    let named: HashSet<Ino> = dirs.iter().flat_map(|(_, e)| e.iter().map(|(_, t)| *t)).collect();
    let mut reached = HashSet::from([ROOT_INO]);
    let mut todo = vec![ROOT_INO];
    while let Some(d) = todo.pop() {
        for (_, t) in entries.get(&d).copied().unwrap_or_default() {
            if live.contains_key(t) && reached.insert(*t) && entries.contains_key(t) {
                todo.push(*t);
            }
        }
    }
    // The tops of what is cut off: no name left anywhere.
    let mut orphans: Vec<Ino> = live
        .keys()
        .filter(|i| !reached.contains(i) && !named.contains(i))
        .copied()
        .collect();
    if orphans.is_empty() {
        return Ok(());
    }
    orphans.sort_unstable();
    const LOST_FOUND: &[u8] = b"lost+found";
    let found = entries
        .get(&ROOT_INO)
        .and_then(|e| e.iter().find(|(n, _)| n == LOST_FOUND))
        .map(|(_, t)| *t);
    let lf = match found {
        Some(t) if entries.contains_key(&t) => t,
        Some(_) => {
            done.push("not reconnected: /lost+found is not a directory; rename it and repair again".into());
            return Ok(());
        }
        None => {
            let node = NewNode {
                parent: ROOT_INO,
                name: LOST_FOUND,
                mode: libc::S_IFDIR | 0o700,
                rdev: 0,
                uid: 0,
                gid: 0,
                umask: 0,
                target: None,
                opened: false,
                identity: None,
                budget: Budget::Critical,
            };
            ns.create(&node)?.ino
        }
    };
    for ino in orphans {
        ns.adopt(ino, lf, format!("#{ino}").as_bytes())?;
        done.push(format!("reconnected inode {ino} as /lost+found/#{ino}"));
    }
    Ok(())
}

/// Sets each file's link count to the names that still point at it: a
/// name inside a lost directory went with it. (A file with no name left
/// was reconnected with one link.)
fn relink(
    ns: &Namespace<'_>,
    dirs: &[Dir],
    live: &HashMap<Ino, (FileType, u32)>,
    done: &mut Vec<String>,
) -> Result<()> {
    let mut names: HashMap<Ino, u32> = HashMap::new();
    for (_, entries) in dirs {
        for (_, t) in entries {
            *names.entry(*t).or_default() += 1;
        }
    }
    let mut wrong: Vec<(Ino, u32, u32)> = names
        .into_iter()
        .filter_map(|(ino, n)| match live.get(&ino) {
            Some(&(kind, nlink)) if kind != FileType::Directory && nlink != n => Some((ino, nlink, n)),
            _ => None,
        })
        .collect();
    wrong.sort_unstable();
    for (ino, was, n) in wrong {
        ns.set_link_count(ino, n)?;
        done.push(format!("inode {ino}: link count {was} set to its {n} name(s)"));
    }
    Ok(())
}

/// A damaged inode: its number, record offset and why it does not load.
type Lost = (Ino, u64, String);

/// A directory that loads and its (name, target) pairs.
type Dir = (Ino, Vec<(Vec<u8>, Ino)>);

/// What `fsck --repair` finds: every directory and every inode that loads,
/// and every live inode that does not.
struct Survey {
    dirs: Vec<Dir>,
    /// Type and link count of each.
    live: HashMap<Ino, (FileType, u32)>,
    lost: Vec<Lost>,
    /// Inodes whose data pages failed their checks: rebuilt where
    /// redundancy allows.
    data: Vec<(Ino, data::DataCheck)>,
}

fn survey(ctx: &Ctx) -> Result<Survey> {
    let r = ctx.region();
    let mut dirs = Vec::new();
    let mut live = HashMap::new();
    let mut lost = Vec::new();
    let mut data = Vec::new();
    for shard in 0..ctx.tables().shard_count() as usize {
        ctx.tables().scan_shard(r, shard, |slot| {
            let (ino, off, rec) = match slot {
                Slot::Live { ino, off, rec, .. } => (ino, off, rec),
                // A state word that is no state in either copy: the inode
                // may have been live, and a mount keeps its number taken
                // and its names answering EIO; repair frees the slot (its
                // names go below, as every name of a lost inode does).
                Slot::Free { ino, off, .. } if r.load_u64(off + INODE_STATE_OFF).is_ok_and(|s| s != INODE_FREE) => {
                    lost.push((ino, off, "its record's state word is damaged in every copy".to_string()));
                    return Ok(());
                }
                _ => return Ok(()),
            };
            // As a mount loads it: the log pointers and entries the
            // primary lost are the replica's.
            match ctx.load_inode(off, &rec) {
                Ok(_) if rec.ino != ino => lost.push((ino, off, format!("its slot holds inode {}", rec.ino))),
                Ok(st) => {
                    let checked = data::check_data(ctx, &st, true)?;
                    if checked.any() {
                        data.push((ino, checked));
                    }
                    live.insert(ino, (st.attr().kind, st.attr().nlink));
                    if let Body::Dir(d) = &st.meta.body {
                        dirs.push((ino, d.iter().map(|(n, e)| (n.to_vec(), e.ino)).collect()));
                    }
                }
                Err(e) if ino == ROOT_INO => {
                    // Freeing the root would leave nothing to mount.
                    tracing::error!(error = %e, "the root directory is damaged and cannot be repaired");
                }
                Err(e) => lost.push((ino, off, e.to_string())),
            }
            Ok(())
        })?;
    }
    Ok(Survey { dirs, live, lost, data })
}

/// NOVA §4.6: an add entry is invalidated in place by the same transaction
/// that removes or replaces its name, so a directory's log never holds a
/// valid add whose name a later entry cancels. One that does would come
/// back to life once fast GC frees the page of the cancelling entry.
/// Cancelled dentry adds must be invalidated on the media (NOVA §4.6) —
/// but where snapshots are, the invalidation of one a snapshot may see
/// waits until log GC (`commit::Multi::cancel`): then it is `deferrable`,
/// noted, not a problem; its canceller is still in the log.
fn check_cancellations(
    rep: &mut Report,
    r: &dyn Region,
    bounds: Bounds,
    (dir, head, tail): (Ino, u64, u64),
    deferrable: bool,
) -> Result<()> {
    let mut valid_adds: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut stale = Vec::new();
    Log::load(r, bounds, head, tail, |_, off, bytes| {
        let hdr: EntryHeader = decode(bytes)?;
        let etype = EntryType::from_u8(hdr.etype);
        if hdr.flags & ENTRY_INVALID != 0 || !matches!(etype, Some(EntryType::DentryAdd | EntryType::DentryRemove)) {
            return Ok(());
        }
        let d: DentryHead = decode(bytes)?;
        let name = bytes
            .get(DENTRY_HEAD_SIZE..DENTRY_HEAD_SIZE + usize::from(d.name_len))
            .unwrap_or_default();
        if name == b".." {
            return Ok(()); // The parent link is replaced, never cancelled.
        }
        let earlier = if etype == Some(EntryType::DentryAdd) {
            valid_adds.insert(name.to_vec(), off)
        } else {
            valid_adds.remove(name)
        };
        if let Some(prev) = earlier {
            stale.push((prev, String::from_utf8_lossy(name).into_owned()));
        }
        Ok(())
    })?;
    if deferrable && !stale.is_empty() {
        rep.notes.push(format!(
            "directory {dir}: {} cancelled add entries await their invalidation (deferred for snapshots)",
            stale.len()
        ));
        return Ok(());
    }
    for (off, name) in stale {
        rep.problems.push(format!(
            "directory {dir}: the add entry of '{name}' at {off:#x} was cancelled but not invalidated"
        ));
    }
    Ok(())
}

fn describe(st: &InodeState) -> Seen {
    let a = st.attr();
    let (entries, parent) = match &st.meta.body {
        Body::Dir(d) => (
            d.iter().map(|(n, e)| (n.to_vec(), e.ino, e.ftype)).collect(),
            d.parent(),
        ),
        _ => (Vec::new(), 0),
    };
    Seen {
        kind: a.kind,
        nlink: a.nlink,
        entries,
        parent,
    }
}

/// Reachability, dentry targets and link counts.
fn check_tree(rep: &mut Report, seen: &HashMap<Ino, Seen>) {
    let Some(root) = seen.get(&ROOT_INO) else {
        rep.problems.push("the root directory (inode 1) is missing".into());
        return;
    };
    if root.kind != FileType::Directory || root.parent != ROOT_INO {
        rep.problems.push("inode 1 is not a root directory".into());
    }
    let mut names: HashMap<Ino, u32> = HashMap::new();
    let mut subdirs: HashMap<Ino, u32> = HashMap::new();
    let mut queue = VecDeque::from([ROOT_INO]);
    let mut visited = std::collections::HashSet::from([ROOT_INO]);
    while let Some(dir) = queue.pop_front() {
        let Some(d) = seen.get(&dir) else { continue };
        for (name, target, ftype) in &d.entries {
            let shown = String::from_utf8_lossy(name);
            let Some(t) = seen.get(target) else {
                rep.problems.push(format!(
                    "directory {dir}: entry '{shown}' points to missing inode {target}"
                ));
                continue;
            };
            if ftype_of_mode(t.kind.mode_bits()) != *ftype {
                rep.problems
                    .push(format!("directory {dir}: entry '{shown}' has the wrong file type"));
            }
            *names.entry(*target).or_default() += 1;
            if t.kind == FileType::Directory {
                *subdirs.entry(dir).or_default() += 1;
                if t.parent != dir {
                    rep.problems.push(format!(
                        "directory {target} ('{shown}') has '..' = {} instead of {dir}",
                        t.parent
                    ));
                }
                if !visited.insert(*target) {
                    rep.problems.push(format!("directory {target} has more than one name"));
                    continue;
                }
                queue.push_back(*target);
            }
        }
    }
    for (&ino, s) in seen {
        match s.kind {
            FileType::Directory => rep.directories += 1,
            _ => rep.files += 1,
        }
        let refs = names.get(&ino).copied().unwrap_or(0);
        if ino != ROOT_INO && refs == 0 {
            if s.nlink == 0 {
                rep.notes.push(format!(
                    "inode {ino} is unlinked but was open at the crash; the next mount reclaims it"
                ));
            } else {
                rep.problems.push(format!("inode {ino} is not reachable from the root"));
            }
            continue;
        }
        let expected = if s.kind == FileType::Directory {
            2 + subdirs.get(&ino).copied().unwrap_or(0)
        } else {
            refs
        };
        if s.nlink != expected {
            rep.problems
                .push(format!("inode {ino} has link count {} but {expected} links", s.nlink));
        }
    }
}

/// After a clean unmount the saved free lists must be exactly the unused
/// pages and slots: anything used and free is a double allocation waiting
/// to happen, anything neither is leaked.
fn check_free_lists(
    rep: &mut Report,
    region: &Arc<dyn Region>,
    sb: &crate::layout::Superblock,
    owner: &HashMap<u64, Ino>,
    free_slots: &[Ino],
    scanned: &Snapshots,
) -> Result<()> {
    let ctx = recovery::open_ctx(region.clone(), sb, true)?;
    if let Err(e) = recovery::load_saved_state(&ctx, sb) {
        rep.problems.push(format!(
            "image is marked clean but its saved allocator state is unusable: {e}"
        ));
        return Ok(());
    }
    rep.pages_free = ctx.alloc().free_pages();
    let mut leaked = Vec::new();
    let mut page = sb.data_start;
    while page < sb.data_end {
        match (owner.get(&page), ctx.alloc().is_free(page)) {
            (Some(ino), true) => rep
                .problems
                .push(format!("page {page:#x} is in use by inode {ino} but listed as free")),
            (None, false) => leaked.push(page),
            _ => {}
        }
        page += PAGE_SIZE;
    }
    if !leaked.is_empty() {
        // The first few by offset: where to look with a hex dump.
        let first: Vec<String> = leaked.iter().take(8).map(|p| format!("{p:#x}")).collect();
        rep.problems.push(format!(
            "{} page(s) are neither in use nor free (leaked): {}{}",
            leaked.len(),
            first.join(", "),
            if leaked.len() > 8 { ", ..." } else { "" }
        ));
    }
    let saved_free = ctx.tables().free_count();
    if saved_free != free_slots.len() as u64 {
        rep.problems.push(format!(
            "saved state lists {saved_free} free inode slots but {} slots are free",
            free_slots.len()
        ));
    }
    let (saved, found) = (manifest_contents(ctx.snapshots()), manifest_contents(scanned));
    if saved != found {
        let missing = found.iter().filter(|k| !saved.contains(k)).count();
        let extra = saved.iter().filter(|k| !found.contains(k)).count();
        rep.problems.push(format!(
            "the saved snapshot manifests miss {missing} and wrongly list {extra} of the pages and inodes the snapshots keep"
        ));
    }
    Ok(())
}

/// What manifests list, page by page and inode by inode, whatever runs
/// they were kept in: `(snapshot, page or inode record, inode)`, sorted.
fn manifest_contents(snapshots: &Snapshots) -> std::collections::BTreeSet<(u64, u64, Ino)> {
    let mut out = std::collections::BTreeSet::new();
    for k in snapshots.export_manifests() {
        if k.kind == KEPT_INODE {
            out.insert((k.snapshot, k.off, k.ino));
        } else {
            out.extend((0..k.pages).map(|i| (k.snapshot, k.off + i * PAGE_SIZE, 0)));
        }
    }
    out
}
