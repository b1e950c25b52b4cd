//! Namespace operations (NOVA §4.3): create, link, unlink, rmdir and
//! rename. Each changes several inodes — directory logs, link counts,
//! valid bits — and commits them all in one journal transaction
//! (commit.rs [`Multi`]). Operations lock their inodes in inode-number
//! order (cache.rs); cross-directory renames also take the rename lock (as
//! Linux's s_vfs_rename_mutex) so the tree cannot change shape while one
//! checks for loops.

use std::sync::atomic::Ordering;

use pm::latency;

use crate::lock::Mutex;

use crate::alloc::Budget;
use crate::cache::{alive, is_loss, Cache, Locked};
use crate::commit::{self, Ctx, Ending, Multi};
use crate::dir::{check_name, dentry, Dent, DentrySpec};
use crate::error::{corrupt, Error, Result};
use crate::file;
use crate::gc;
use crate::inode::{link_entry, record_of_attr, record_publish, Attr, Body, FileType, Ino, InodeState, ROOT_INO};
use crate::journal::{Check, Durable, Update};
use crate::layout::{ftype_of_mode, Inode, INODE_LIVE, INODE_SIZE, INODE_STATE_OFF};
use crate::log::Entry;
use crate::time::now_ns;
use crate::xattr::{self, Staged};

/// Most hard links one inode may have.
pub const MAX_LINKS: u32 = 65_000;

/// `rename` flags (Linux values).
pub const RENAME_NOREPLACE: u32 = 1;
pub const RENAME_EXCHANGE: u32 = 2;
/// rename(2)'s RENAME_WHITEOUT: the old name is left to a whiteout, a
/// character device 0:0 (overlayfs's mark of a deleted lower file).
pub const RENAME_WHITEOUT: u32 = 4;

/// A node to create: what `create`, `mkdir`, `mknod` and `symlink` ask for.
pub(crate) struct NewNode<'a> {
    pub parent: Ino,
    pub name: &'a [u8],
    /// Full mode: type bits and permission bits.
    pub mode: u32,
    pub rdev: u64,
    /// The creating process's user and group (the group may give way to
    /// the directory's: [`inherited_group`]).
    pub uid: u32,
    pub gid: u32,
    /// Permission bits to clear unless `parent` has a default ACL.
    pub umask: u32,
    /// A symlink's target.
    pub target: Option<&'a [u8]>,
    /// Register an open handle at once (open with O_CREAT), so no unlink
    /// can come in between.
    pub opened: bool,
    /// The inode number and generation to take, restoring a tree with its
    /// numbers (`tune`); None takes any free slot and a new generation.
    pub identity: Option<(Ino, u64)>,
    /// Normal for every create but `fsck --repair`'s /lost+found, which
    /// may use the reserve for its log pages (a new inode-table chunk
    /// stays normal: it is far larger than the reserve's share).
    pub budget: Budget,
}

/// A rename, once both names are looked up and every inode is locked.
struct Rename<'a> {
    parent: Ino,
    name: &'a [u8],
    newparent: Ino,
    newname: &'a [u8],
    src: Dent,
    dst: Option<Dent>,
    /// `dst` names a lost file: only the name is replaced.
    dst_lost: bool,
    exchange: bool,
    /// The owner of the whiteout RENAME_WHITEOUT leaves at the old name.
    whiteout: Option<(u32, u32)>,
}

impl Rename<'_> {
    fn cross(&self) -> bool {
        self.parent != self.newparent
    }
}

/// One inode's share of a namespace change: the entries for its log.
struct Part {
    ino: Ino,
    entries: Vec<Entry>,
}

impl Part {
    fn new(ino: Ino, entries: Vec<Entry>) -> Self {
        Part { ino, entries }
    }
}

/// The namespace of a mounted file system: its context, its inode cache
/// and the rename lock.
pub(crate) struct Namespace<'a> {
    pub ctx: &'a Ctx,
    pub cache: &'a Cache,
    pub rename_lock: &'a Mutex<()>,
}

/// The group and mode of a new node made by a process of group `gid` in a
/// directory with attributes `parent` (POSIX, as ext4 and tmpfs do it): a
/// set-group-ID directory passes its group on, and its set-group-ID bit to
/// new subdirectories. Decided under the parent's lock, so a concurrent
/// chmod of the parent cannot come in between.
fn inherited_group(parent: &Attr, gid: u32, mode: u32) -> (u32, u32) {
    if parent.perm & libc::S_ISGID == 0 {
        return (gid, mode);
    }
    let is_dir = mode & libc::S_IFMT == libc::S_IFDIR;
    (parent.gid, if is_dir { mode | libc::S_ISGID } else { mode })
}

/// Looks `name` up in the directory `st` (read-locked by the caller).
fn peek(st: &InodeState, name: &[u8]) -> Result<Option<Dent>> {
    if name.len() > crate::layout::NAME_MAX {
        return Err(Error::NameTooLong);
    }
    alive(st)?;
    Ok(st.dir()?.get(name))
}

impl Namespace<'_> {
    fn peek(&self, parent: Ino, name: &[u8]) -> Result<Option<Dent>> {
        peek(&self.cache.get(self.ctx, parent)?.state.read(), name)
    }

    /// Commits `parts`, the invalidation of the add entries that `cancel`
    /// names as (directory, name) (NOVA §4.6: a cancelled add can never
    /// reappear once the cancelling entries are collected) and `extra`
    /// in-place words in one transaction, then publishes every part's
    /// entries. GC runs first, outside the transaction (`gc::make_room`),
    /// and cancelled adds are located only after it: thorough GC moves a
    /// directory's live dentries into a new log and frees the old pages, so
    /// an address taken earlier would point into a freed page, possibly
    /// another file's data by then.
    fn commit_parts(
        &self,
        l: &mut Locked<'_>,
        budget: Budget,
        parts: &[Part],
        cancel: &[(Ino, &[u8])],
        extra: &[Update],
        records: &[Check],
    ) -> Result<Durable> {
        for p in parts {
            gc::make_room(self.ctx, l.get(p.ino), &p.entries)?;
        }
        let mut m = Multi::begin(self.ctx);
        m.depends_on(records);
        let mut pending = Vec::with_capacity(parts.len());
        let mut invalidated = Vec::with_capacity(cancel.len());
        let committed = (|| {
            for p in parts {
                pending.push(m.append(l.get(p.ino), budget, &p.entries)?);
            }
            for &(dir, name) in cancel {
                if m.cancel(l.get(dir), name)? {
                    invalidated.push((dir, name));
                }
            }
            m.update(extra.iter().cloned());
            m.commit()
        })();
        let durable = committed.inspect_err(|_| {
            // An inode's first log page, written for this transaction
            // (a file renamed or linked before it had a log), is reached
            // by nothing now.
            for p in parts {
                l.get(p.ino).log.forget_unreached();
            }
        })?;
        for (dir, name) in invalidated {
            if let Body::Dir(d) = &mut l.get(dir).meta.body {
                d.mark_invalidated(name);
            }
        }
        for (p, appended) in parts.iter().zip(pending) {
            commit::publish(self.ctx, l.get(p.ino), &p.entries, &appended.journaled(&durable))?;
        }
        Ok(durable)
    }

    /// NOVA §4.3 create: the new inode and its log are written while its
    /// slot is still free, the dentry is appended to the parent's log, then
    /// one journal transaction sets the valid bit and the parent's tail.
    pub(crate) fn create(&self, n: &NewNode<'_>) -> Result<Attr> {
        check_name(n.name)?;
        let kind = FileType::from_mode(n.mode).ok_or(Error::Invalid("unknown file type"))?;
        let is_dir = kind == FileType::Directory;
        let pcell = self.cache.get(self.ctx, n.parent)?;
        let mut pst = pcell.state.write();
        alive(&pst)?;
        if pst.dir()?.get(n.name).is_some() {
            return Err(Error::Exists);
        }
        if pst.meta.attr.nlink == 0 {
            return Err(Error::NotFound);
        }
        pst.meta.attr.check_names_added()?;
        if is_dir && pst.meta.attr.nlink >= MAX_LINKS {
            return Err(Error::TooManyLinks);
        }
        let (gid, mode) = inherited_group(&pst.meta.attr, n.gid, n.mode);
        let ctx = self.ctx;
        let now = now_ns();
        // A restored node brings its own attributes (`tune` copies them).
        let (mode, acls) = match n.identity {
            Some(_) => (mode, Staged::new(ctx)),
            None => xattr::inherit(ctx, &pst, mode, n.umask, now)?,
        };
        let (acl_entries, acl_pages) = acls.into_parts();
        let claimed = match n.identity {
            Some((ino, _)) => ctx
                .tables()
                .claim_exact(ctx.region(), ctx.alloc(), ino)
                .map(|off| (ino, off)),
            None => ctx.tables().claim(ctx.region(), ctx.alloc()),
        };
        let (ino, off) = claimed?; // An error drops `acl_pages`: they go back.
        let attr = Attr {
            ino,
            kind,
            perm: mode & 0o7777,
            nlink: if is_dir { 2 } else { 1 },
            uid: n.uid,
            gid,
            size: 0,
            blocks: 0,
            atime: now,
            mtime: now,
            ctime: now,
            rdev: n.rdev,
            generation: n.identity.map_or(now as u64, |(_, generation)| generation),
            flags: 0,
        };
        let mut st = InodeState::new(attr, off, ctx.epoch());
        let built = (|| -> Result<()> {
            let record = record_of_attr(&attr, ctx.epoch());
            let rec = zerocopy::IntoBytes::as_bytes(&record);
            let write_record = || -> Result<()> {
                let _span = latency::enter(latency::Part::Alloc);
                ctx.region().write(off, rec)?;
                Ok(ctx.region().flush(off, INODE_SIZE)?)
            };
            // A directory's "..", inherited ACLs and a symlink's target are
            // committed in the new inode's own log first, over the record:
            // that commit's R1 fence makes the whole record persistent
            // before the parent's transaction begins, so it only has to set
            // the valid bit.
            let mut init = Vec::new();
            if is_dir {
                let spec = DentrySpec {
                    ino: n.parent,
                    seq: 0,
                    ftype: ftype_of_mode(libc::S_IFDIR),
                    dir_nlink: 2,
                    dir_mtime: now,
                };
                init.push(dentry(ctx.epoch(), true, b"..", &spec));
            }
            init.extend(acl_entries);
            let has_init = !init.is_empty() || n.target.is_some();
            if has_init {
                write_record()?;
            }
            if !init.is_empty() {
                commit::single_kept(ctx, &mut st, n.budget, &init, acl_pages)?;
            }
            if let Some(t) = n.target {
                file::write(ctx, &mut st, 0, t)?;
            }
            let spec = DentrySpec {
                ino,
                seq: pst.dir()?.next_seq(),
                ftype: ftype_of_mode(mode),
                dir_nlink: pst.meta.attr.nlink + u32::from(is_dir),
                dir_mtime: now,
            };
            let entries = [dentry(ctx.epoch(), true, n.name, &spec)];
            gc::make_room(ctx, &mut pst, &entries)?;
            let mut m = Multi::begin(ctx);
            if has_init {
                m.update([Update::word(off + INODE_STATE_OFF, INODE_LIVE)]);
            } else {
                // The record's flush shares the transaction's R2 fence, so
                // the transaction publishes it by a check and updates
                // (inode::record_publish; FORMAT.md, "What a transaction
                // publishes").
                write_record()?;
                let (check, words) = record_publish(off, &record);
                m.depends_on(&[check]);
                m.update(words);
            }
            let appended = m.append(&mut pst, n.budget, &entries)?;
            let durable = m.commit()?;
            commit::publish(ctx, &mut pst, &entries, &appended.journaled(&durable))
        })();
        if let Err(e) = built {
            // The slot never became live: nothing durable reaches the pages
            // its own commits kept (R3). ACL pages never committed went
            // back with `acl_pages`.
            let (log, data) = st.take_pages();
            let unborn = ctx.tables().release_unborn(ino);
            ctx.release_log(&unborn, &log);
            ctx.alloc().release(&unborn, &data);
            return Err(e);
        }
        let attr = st.attr();
        st.open = u32::from(n.opened);
        self.cache.insert(st, if is_dir { n.parent } else { 0 });
        Ok(attr)
    }

    /// Adds the name `newname` in `newparent` for inode `ino`. With
    /// `unlinked`, an inode whose last name is gone but which is still
    /// open may take one again (and only such an inode: see `Fs::relink`).
    pub(crate) fn link(&self, ino: Ino, newparent: Ino, newname: &[u8], unlinked: bool) -> Result<Attr> {
        check_name(newname)?;
        let cells = self.cache.get_all(self.ctx, &[ino, newparent])?;
        let mut l = Locked::lock(&cells)?;
        let now = now_ns();
        let target = l.get(ino).attr();
        if target.kind == FileType::Directory {
            return Err(Error::NotPermitted);
        }
        if (target.nlink == 0) != unlinked || (unlinked && l.get(ino).open == 0) {
            return Err(Error::NotFound);
        }
        if target.nlink >= MAX_LINKS {
            return Err(Error::TooManyLinks);
        }
        target.check_changeable()?;
        let p = l.get(newparent);
        p.meta.attr.check_names_added()?;
        if p.dir()?.get(newname).is_some() {
            return Err(Error::Exists);
        }
        if p.meta.attr.nlink == 0 {
            return Err(Error::NotFound); // a removed directory takes no names
        }
        let spec = DentrySpec {
            ino,
            seq: p.dir()?.next_seq(),
            ftype: ftype_of_mode(target.mode()),
            dir_nlink: p.meta.attr.nlink,
            dir_mtime: now,
        };
        let e = self.ctx.epoch();
        let parts = [
            Part::new(newparent, vec![dentry(e, true, newname, &spec)]),
            Part::new(ino, vec![link_entry(e, target.nlink + 1, now)]),
        ];
        // A link frees nothing: its proof has no further use.
        let _ = self.commit_parts(&mut l, Budget::Normal, &parts, &[], &[], &[])?;
        Ok(l.get(ino).attr())
    }

    /// unlink (`want_dir` false) or rmdir (true).
    pub(crate) fn remove(&self, parent: Ino, name: &[u8], want_dir: bool) -> Result<()> {
        if name == b"." || name == b".." {
            return Err(if want_dir {
                Error::Invalid("cannot remove . or ..")
            } else {
                Error::IsDir
            });
        }
        let pcell = self.cache.get(self.ctx, parent)?;
        loop {
            let d = peek(&pcell.state.read(), name)?.ok_or(Error::NotFound)?;
            let child = match self.cache.get(self.ctx, d.ino) {
                Err(e) if is_loss(&e) => match self.remove_lost(parent, name, d, want_dir, e)? {
                    true => return Ok(()),
                    false => continue, // Changed meanwhile: look again.
                },
                found => found?,
            };
            let cells = [(parent, pcell.clone()), (d.ino, child)];
            let mut l = Locked::lock(&cells)?;
            if l.get(parent).dir()?.get(name) != Some(d) {
                continue; // Changed while unlocked: look again.
            }
            let child = l.get(d.ino).attr();
            let is_dir = child.kind == FileType::Directory;
            match (want_dir, is_dir) {
                (true, false) => return Err(Error::NotDir),
                (false, true) => return Err(Error::IsDir),
                _ => {}
            }
            child.check_changeable()?;
            l.get(parent).meta.attr.check_changeable()?;
            if is_dir && !l.get(d.ino).dir()?.is_empty() {
                return Err(Error::NotEmpty);
            }
            let now = now_ns();
            let spec = DentrySpec {
                ino: d.ino,
                seq: d.seq,
                ftype: d.ftype,
                dir_nlink: l.get(parent).meta.attr.nlink - u32::from(is_dir),
                dir_mtime: now,
            };
            let mut parts = vec![Part::new(parent, vec![dentry(self.ctx.epoch(), false, name, &spec)])];
            let nlink = if is_dir { 0 } else { child.nlink.saturating_sub(1) };
            let ending = self.drop_link(&mut parts, l.get(d.ino), nlink, now)?;
            let extra = ending.as_ref().map_or(&[][..], |e| &e.updates[..]);
            let durable = self.commit_parts(&mut l, Budget::Freeing, &parts, &[(parent, name)], extra, &[])?;
            if let Some(e) = ending {
                self.cache.forget(self.ctx, l.get(d.ino), &durable, e.fate);
            }
            return Ok(());
        }
    }

    /// unlink of name `d` (`name` in `parent`) whose inode is lost (`lost`
    /// says why): only the name goes, as `fsck --repair` removes it. What
    /// the inode held stays allocated, found by no one (its log, the list
    /// of its pages, is what was lost) until `fsck --repair` rebuilds free
    /// space by a full scan; its slot stays taken too, since other names
    /// of it may remain. A directory's name is not removed (rmdir cannot
    /// tell whether a lost directory is empty): EIO, and `fsck --repair`
    /// reconnects what it held. False when the name changed meanwhile.
    fn remove_lost(&self, parent: Ino, name: &[u8], d: Dent, want_dir: bool, lost: Error) -> Result<bool> {
        let is_dir = d.ftype == ftype_of_mode(libc::S_IFDIR);
        match (want_dir, is_dir) {
            (true, false) => return Err(Error::NotDir),
            (false, true) => return Err(Error::IsDir),
            (true, true) => return Err(lost),
            (false, false) => {}
        }
        self.drop_name(parent, name, Some(d), Budget::Freeing)
    }

    /// Removes the name `name` of `parent` whose target inode is lost
    /// (`fsck --repair`): the directory's side of an unlink, with nothing
    /// done to the target, which no longer loads.
    pub(crate) fn drop_dangling(&self, parent: Ino, name: &[u8]) -> Result<()> {
        self.drop_name(parent, name, None, Budget::Critical).map(|_| ())
    }

    /// [`Namespace::drop_dangling`], when `name` still is `expect` (any
    /// name when None); false when it is not.
    fn drop_name(&self, parent: Ino, name: &[u8], expect: Option<Dent>, budget: Budget) -> Result<bool> {
        let cells = [(parent, self.cache.get(self.ctx, parent)?)];
        let mut l = Locked::lock(&cells)?;
        let d = l.get(parent).dir()?.get(name).ok_or(Error::NotFound)?;
        if let Some(e) = expect {
            if e != d {
                return Ok(false);
            }
            // An unlink obeys chattr as any; fsck's repair does not.
            l.get(parent).meta.attr.check_changeable()?;
        }
        let p = &l.get(parent).meta.attr;
        let spec = DentrySpec {
            ino: d.ino,
            seq: d.seq,
            ftype: d.ftype,
            // A lost subdirectory's ".." no longer counts as a link.
            dir_nlink: p.nlink - u32::from(d.ftype == ftype_of_mode(libc::S_IFDIR) && p.nlink > 2),
            dir_mtime: now_ns(),
        };
        let parts = [Part::new(parent, vec![dentry(self.ctx.epoch(), false, name, &spec)])];
        let _ = self.commit_parts(&mut l, budget, &parts, &[(parent, name)], &[], &[])?;
        Ok(true)
    }

    /// Names the unreachable inode `ino` `name` in `dir` (`fsck --repair`
    /// reconnecting what a lost directory held to lost+found): a file had
    /// no other name left and now has one link; a directory keeps its
    /// count and its ".." names `dir`. One transaction, as rename's.
    pub(crate) fn adopt(&self, ino: Ino, dir: Ino, name: &[u8]) -> Result<()> {
        check_name(name)?;
        let cells = self.cache.get_all(self.ctx, &[ino, dir])?;
        let mut l = Locked::lock(&cells)?;
        let child = l.get(ino).attr();
        let is_dir = child.kind == FileType::Directory;
        let p = l.get(dir);
        if p.dir()?.get(name).is_some() {
            return Err(Error::Exists);
        }
        let now = now_ns();
        let e = self.ctx.epoch();
        let spec = DentrySpec {
            ino,
            seq: p.dir()?.next_seq(),
            ftype: ftype_of_mode(child.mode()),
            dir_nlink: p.meta.attr.nlink + u32::from(is_dir),
            dir_mtime: now,
        };
        let own = if is_dir {
            let dotdot = DentrySpec {
                ino: dir,
                seq: 0,
                ftype: ftype_of_mode(libc::S_IFDIR),
                dir_nlink: child.nlink,
                dir_mtime: now,
            };
            dentry(e, true, b"..", &dotdot)
        } else {
            link_entry(e, 1, now)
        };
        let parts = [
            Part::new(dir, vec![dentry(e, true, name, &spec)]),
            Part::new(ino, vec![own]),
        ];
        let _ = self.commit_parts(&mut l, Budget::Critical, &parts, &[], &[], &[])?;
        if is_dir {
            self.cache.get(self.ctx, ino)?.parent.store(dir, Ordering::Release);
        }
        Ok(())
    }

    /// Sets the link count of file `ino` to the `names` that point at it
    /// (`fsck --repair`, after a directory holding one of them was lost).
    pub(crate) fn set_link_count(&self, ino: Ino, names: u32) -> Result<()> {
        let cell = self.cache.get(self.ctx, ino)?;
        let mut st = cell.state.write();
        alive(&st)?;
        if st.meta.attr.kind == FileType::Directory || names == 0 {
            return Err(Error::Invalid("only a named file's link count is set"));
        }
        let entries = [link_entry(self.ctx.epoch(), names, now_ns())];
        commit::single_published(self.ctx, &mut st, Budget::Critical, &entries)
    }

    /// One link of `st` goes away, leaving `nlink`: either the inode's
    /// life ends in the same transaction (returns its [`Ending`]: freed,
    /// or kept for a snapshot), or a link-change entry records the new
    /// count (NOVA keeps an unlinked but open file until its last release,
    /// and a removed directory the kernel still holds until it forgets it).
    fn drop_link(&self, parts: &mut Vec<Part>, st: &InodeState, nlink: u32, now: i64) -> Result<Option<Ending>> {
        if nlink == 0 && st.open == 0 {
            return self.ctx.ending(st).map(Some);
        }
        parts.push(Part::new(
            st.meta.attr.ino,
            vec![link_entry(self.ctx.epoch(), nlink, now)],
        ));
        Ok(None)
    }

    /// rename(2) with RENAME_NOREPLACE, RENAME_EXCHANGE and RENAME_WHITEOUT
    /// (the whiteout owned by `owner`): every change — both directories, a
    /// replaced target, a moved directory's "..", a whiteout — is committed
    /// by one journal transaction.
    pub(crate) fn rename(
        &self,
        (parent, name): (Ino, &[u8]),
        (newparent, newname): (Ino, &[u8]),
        flags: u32,
        owner: (u32, u32),
    ) -> Result<()> {
        let known = RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT;
        if flags & !known != 0 || (flags & RENAME_EXCHANGE != 0 && flags != RENAME_EXCHANGE) {
            return Err(Error::Invalid("rename flags"));
        }
        for n in [name, newname] {
            if n == b"." || n == b".." {
                return Err(Error::Invalid("cannot rename . or .."));
            }
        }
        check_name(newname)?;
        let exchange = flags & RENAME_EXCHANGE != 0;
        let _tree = (parent != newparent).then(|| self.rename_lock.lock());
        loop {
            let src = self.peek(parent, name)?.ok_or(Error::NotFound)?;
            let dst = self.peek(newparent, newname)?;
            if flags & RENAME_NOREPLACE != 0 && dst.is_some() {
                return Err(Error::Exists);
            }
            if exchange && dst.is_none() {
                return Err(Error::NotFound);
            }
            if dst.is_some_and(|d| d.ino == src.ino) {
                return Ok(()); // Two names of one inode: POSIX says do nothing.
            }
            let mut cells = self.cache.get_all(self.ctx, &[parent, newparent, src.ino])?;
            let mut dst_lost = false;
            if let Some(d) = dst {
                match self.cache.get(self.ctx, d.ino) {
                    Ok(cell) => cells.push((d.ino, cell)),
                    // A lost file's name is replaced as unlink removes it
                    // (`remove_lost`), so a restore from a backup by a
                    // rename over it works. A lost source, a lost
                    // directory (replaced only when empty) and an exchange
                    // would change the lost inode itself: EIO.
                    Err(e) if is_loss(&e) && !exchange && d.ftype != ftype_of_mode(libc::S_IFDIR) => dst_lost = true,
                    Err(e) => return Err(e),
                }
            }
            let mut l = Locked::lock(&cells)?;
            if l.get(parent).dir()?.get(name) != Some(src) || l.get(newparent).dir()?.get(newname) != dst {
                continue;
            }
            let r = Rename {
                parent,
                name,
                newparent,
                newname,
                src,
                dst,
                dst_lost,
                exchange,
                whiteout: (flags & RENAME_WHITEOUT != 0).then_some(owner),
            };
            return self.rename_locked(&mut l, &r);
        }
    }

    /// True when directory `dir` is `ancestor` or lies below it. Parents are
    /// read without locks: the rename lock keeps the tree's shape fixed.
    fn is_within(&self, mut dir: Ino, ancestor: Ino) -> Result<bool> {
        for _ in 0..=self.ctx.bounds().max_pages() {
            if dir == ancestor {
                return Ok(true);
            }
            if dir == ROOT_INO {
                return Ok(false);
            }
            dir = self.cache.get(self.ctx, dir)?.parent.load(Ordering::Acquire);
        }
        Err(corrupt!(Directory, ino = dir, "directory parents form a loop"))
    }

    /// The checks rename(2) makes of the two names' types, of a replaced
    /// directory's emptiness and of loops.
    fn check_rename(&self, l: &mut Locked<'_>, r: &Rename<'_>) -> Result<()> {
        let dir_ft = ftype_of_mode(libc::S_IFDIR);
        let src_dir = r.src.ftype == dir_ft;
        let dst_dir = r.dst.is_some_and(|d| d.ftype == dir_ft);
        if l.get(r.newparent).meta.attr.nlink == 0 {
            return Err(Error::NotFound); // a removed directory takes no names
        }
        // chattr +i/+a: the moved inodes, and the directories names leave,
        // must allow it; the one a name comes to must not be immutable.
        l.get(r.src.ino).meta.attr.check_changeable()?;
        l.get(r.parent).meta.attr.check_changeable()?;
        l.get(r.newparent).meta.attr.check_names_added()?;
        if let Some(d) = r.dst.filter(|_| !r.dst_lost) {
            l.get(d.ino).meta.attr.check_changeable()?;
            if r.exchange {
                l.get(r.newparent).meta.attr.check_changeable()?;
            }
        }
        if let Some(d) = r.dst.filter(|_| !r.exchange) {
            if src_dir && !dst_dir {
                return Err(Error::NotDir);
            }
            if !src_dir && dst_dir {
                return Err(Error::IsDir);
            }
            if dst_dir && !l.get(d.ino).dir()?.is_empty() {
                return Err(Error::NotEmpty);
            }
        }
        if r.cross() {
            if src_dir && self.is_within(r.newparent, r.src.ino)? {
                return Err(Error::Invalid("cannot move a directory into itself"));
            }
            if let Some(d) = r.dst.filter(|_| r.exchange && dst_dir) {
                if self.is_within(r.parent, d.ino)? {
                    return Err(Error::Invalid("cannot move a directory into itself"));
                }
            }
        }
        Ok(())
    }

    /// Link counts of the old and the new parent after the rename.
    fn renamed_link_counts(l: &mut Locked<'_>, r: &Rename<'_>, src_dir: bool, dst_dir: bool) -> Result<(u32, u32)> {
        let (mut p, mut np) = (
            i64::from(l.get(r.parent).meta.attr.nlink),
            i64::from(l.get(r.newparent).meta.attr.nlink),
        );
        let cross = r.cross();
        if r.exchange {
            if cross {
                let delta = i64::from(dst_dir) - i64::from(src_dir);
                p += delta;
                np -= delta;
            }
        } else {
            if cross && src_dir {
                p -= 1;
                np += 1;
            }
            if dst_dir {
                np -= 1;
                if !cross {
                    p -= 1;
                }
            }
        }
        if np > i64::from(MAX_LINKS) || p > i64::from(MAX_LINKS) {
            return Err(Error::TooManyLinks);
        }
        Ok(if cross {
            (p as u32, np as u32)
        } else {
            (p as u32, p as u32)
        })
    }

    fn rename_locked(&self, l: &mut Locked<'_>, r: &Rename<'_>) -> Result<()> {
        self.check_rename(l, r)?;
        let Some(owner) = r.whiteout else {
            return self.rename_checked(l, r, None);
        };
        // The whiteout's record is written to a free slot, flushed, and
        // published by the rename's transaction (as create does without
        // an init commit): a crash before it leaves the slot free.
        let ctx = self.ctx;
        let (ino, off) = ctx.tables().claim(ctx.region(), ctx.alloc())?;
        let now = now_ns();
        let attr = Attr {
            ino,
            kind: FileType::CharDevice,
            perm: 0,
            nlink: 1,
            uid: owner.0,
            gid: owner.1,
            size: 0,
            blocks: 0,
            atime: now,
            mtime: now,
            ctime: now,
            rdev: 0,
            generation: now as u64,
            flags: 0,
        };
        let record = record_of_attr(&attr, ctx.epoch());
        let written = ctx
            .region()
            .write(off, zerocopy::IntoBytes::as_bytes(&record))
            .and_then(|()| ctx.region().flush(off, INODE_SIZE));
        let done = match written {
            Ok(()) => self.rename_checked(l, r, Some((&record, off))),
            Err(e) => Err(e.into()),
        };
        match done {
            Ok(()) => {
                self.cache.insert(InodeState::new(attr, off, record.create_epoch), 0);
                Ok(())
            }
            Err(e) => {
                ctx.tables().release(ino);
                Err(e)
            }
        }
    }

    /// The rename itself, its checks passed; `whiteout` is the record (and
    /// its slot) of the whiteout to leave at the old name.
    fn rename_checked(&self, l: &mut Locked<'_>, r: &Rename<'_>, whiteout: Option<(&Inode, u64)>) -> Result<()> {
        let dir_ft = ftype_of_mode(libc::S_IFDIR);
        let (src, dst, cross) = (r.src, r.dst, r.cross());
        let src_dir = src.ftype == dir_ft;
        let dst_dir = dst.is_some_and(|d| d.ftype == dir_ft);
        let (p_final, np_final) = Self::renamed_link_counts(l, r, src_dir, dst_dir)?;
        let now = now_ns();
        let e = self.ctx.epoch();
        let np_seq = l.get(r.newparent).dir()?.next_seq();
        let spec = |ino, seq, ftype, nlink: u32| DentrySpec {
            ino,
            seq,
            ftype,
            dir_nlink: nlink,
            dir_mtime: now,
        };
        let mut parent_entries = Vec::new();
        let mut new_entries = vec![dentry(e, true, r.newname, &spec(src.ino, np_seq, src.ftype, np_final))];
        let mut victim_ending = None;
        let mut parts: Vec<Part> = Vec::new();
        if r.exchange {
            let d = dst.ok_or(Error::NotFound)?;
            let seq = if cross {
                l.get(r.parent).dir()?.next_seq()
            } else {
                np_seq + 1
            };
            parent_entries.push(dentry(e, true, r.name, &spec(d.ino, seq, d.ftype, p_final)));
            if cross && dst_dir {
                let nlink = l.get(d.ino).meta.attr.nlink;
                parts.push(Part::new(
                    d.ino,
                    vec![dentry(e, true, b"..", &spec(r.parent, 0, dir_ft, nlink))],
                ));
            }
        } else {
            match whiteout {
                Some((w, _)) => {
                    let seq = if cross {
                        l.get(r.parent).dir()?.next_seq()
                    } else {
                        np_seq + 1
                    };
                    let ftype = ftype_of_mode(libc::S_IFCHR);
                    parent_entries.push(dentry(e, true, r.name, &spec(w.ino, seq, ftype, p_final)));
                }
                None => parent_entries.push(dentry(e, false, r.name, &spec(src.ino, src.seq, src.ftype, p_final))),
            }
            if let Some(d) = dst.filter(|_| !r.dst_lost) {
                let victim = l.get(d.ino);
                let nlink = if dst_dir {
                    0
                } else {
                    victim.meta.attr.nlink.saturating_sub(1)
                };
                victim_ending = self.drop_link(&mut parts, victim, nlink, now)?;
            }
        }
        if cross && src_dir {
            let nlink = l.get(src.ino).meta.attr.nlink;
            parts.push(Part::new(
                src.ino,
                vec![dentry(e, true, b"..", &spec(r.newparent, 0, dir_ft, nlink))],
            ));
        }
        // rename(2) changes the moved inode's ctime (and the other one's
        // when exchanged), as tmpfs and ext4 do.
        let moved = [Some(src.ino), dst.filter(|_| r.exchange).map(|d| d.ino)];
        for ino in moved.into_iter().flatten() {
            let ctime = link_entry(e, l.get(ino).meta.attr.nlink, now);
            match parts.iter_mut().find(|p| p.ino == ino) {
                Some(p) => p.entries.push(ctime),
                None => parts.push(Part::new(ino, vec![ctime])),
            }
        }
        if cross {
            parts.push(Part::new(r.parent, parent_entries));
            parts.push(Part::new(r.newparent, new_entries));
        } else {
            new_entries.extend(parent_entries);
            parts.push(Part::new(r.parent, new_entries));
        }
        // NOVA §4.6: the adds of both old names are invalidated in place.
        let cancel = [(r.parent, r.name), (r.newparent, r.newname)];
        let cancel = &cancel[..1 + usize::from(dst.is_some())];
        let mut extra = victim_ending.as_ref().map_or_else(Vec::new, |e| e.updates.clone());
        let mut records = Vec::new();
        if let Some((w, off)) = whiteout {
            let (check, words) = record_publish(off, w);
            records.push(check);
            extra.extend(words);
        }
        // Over an existing name it frees the victim: it may use the reserve.
        let budget = if dst.is_some() && !r.exchange {
            Budget::Freeing
        } else {
            Budget::Normal
        };
        let durable = self.commit_parts(l, budget, &parts, cancel, &extra, &records)?;
        if let (Some(d), Some(e)) = (dst, victim_ending) {
            self.cache.forget(self.ctx, l.get(d.ino), &durable, e.fate);
        }
        if cross {
            if src_dir {
                self.cache
                    .get(self.ctx, src.ino)?
                    .parent
                    .store(r.newparent, Ordering::Release);
            }
            if let Some(d) = dst.filter(|_| r.exchange && dst_dir) {
                self.cache
                    .get(self.ctx, d.ino)?
                    .parent
                    .store(r.parent, Ordering::Release);
            }
        }
        Ok(())
    }
}
