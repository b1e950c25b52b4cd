//! The namespace half of [`Fs`]: creating, linking, removing and
//! renaming names (NOVA §4.3, through `namespace`), and listing
//! directories.

// The parent's imports serve this half too.
use super::*;

impl Fs {
    fn ns(&self) -> Namespace<'_> {
        Namespace {
            ctx: &self.ctx,
            cache: &self.cache,
            rename_lock: &self.rename_lock,
        }
    }

    fn make_node(&self, parent: Ino, name: &[u8], m: &Make, target: Option<&[u8]>) -> Result<Attr> {
        self.writing(|| {
            self.ns().create(&NewNode {
                parent,
                name,
                mode: m.mode,
                rdev: m.rdev,
                uid: m.uid,
                gid: m.gid,
                umask: m.umask,
                target,
                opened: m.opened,
                identity: None,
                budget: Budget::Normal,
            })
        })
    }

    /// Creates a regular file, directory or special node as [`Make`]
    /// describes: the general form of [`Fs::create`], [`Fs::mkdir`] and
    /// [`Fs::mknod`], with the umask applied here (it gives way to the
    /// directory's default ACL, as POSIX asks).
    pub fn make(&self, parent: Ino, name: &[u8], m: &Make) -> Result<Attr> {
        match FileType::from_mode(m.mode) {
            None => Err(Error::Invalid("unknown file type in mode")),
            Some(FileType::Symlink) => Err(Error::Invalid("a symlink needs its target: use symlink")),
            Some(_) => self.make_node(parent, name, m, None),
        }
    }

    /// Creates a node like `like` (type, permissions, owner, device, and
    /// its inode number and generation) named `name` in `parent`; a
    /// symlink takes `target`. For restoring a tree with its numbers
    /// (`tune`): times, size and contents are the caller's to copy.
    pub fn restore_node(&self, parent: Ino, name: &[u8], like: &Attr, target: Option<&[u8]>) -> Result<Attr> {
        self.writing(|| {
            self.ns().create(&NewNode {
                parent,
                name,
                mode: like.mode(),
                rdev: like.rdev,
                uid: like.uid,
                gid: like.gid,
                umask: 0,
                target,
                opened: false,
                identity: Some((like.ino, like.generation)),
                budget: Budget::Normal,
            })
        })
    }

    /// Creates a regular file. `uid` and `gid` are the creating process's;
    /// in a set-group-ID directory the file takes the directory's group
    /// (and a new directory its set-group-ID bit too), as POSIX asks.
    pub fn create(&self, parent: Ino, name: &[u8], perm: u32, uid: u32, gid: u32) -> Result<Attr> {
        self.make(parent, name, &Make::new(libc::S_IFREG | (perm & 0o7777), uid, gid))
    }

    /// Creates a regular file with an open handle already registered (as
    /// open(O_CREAT) does), so no unlink can come in between.
    pub fn create_open(&self, parent: Ino, name: &[u8], perm: u32, uid: u32, gid: u32) -> Result<Attr> {
        let m = Make {
            opened: true,
            ..Make::new(libc::S_IFREG | (perm & 0o7777), uid, gid)
        };
        self.make(parent, name, &m)
    }

    /// Creates a directory.
    pub fn mkdir(&self, parent: Ino, name: &[u8], perm: u32, uid: u32, gid: u32) -> Result<Attr> {
        self.make(parent, name, &Make::new(libc::S_IFDIR | (perm & 0o7777), uid, gid))
    }

    /// Creates a node of any non-directory type from a full `mode`: regular
    /// file, FIFO, socket, or device (rdev is kept as metadata).
    pub fn mknod(&self, parent: Ino, name: &[u8], mode: u32, rdev: u64, uid: u32, gid: u32) -> Result<Attr> {
        if mode & libc::S_IFMT == libc::S_IFDIR {
            return Err(Error::Invalid("mknod cannot make directories"));
        }
        self.make(
            parent,
            name,
            &Make {
                rdev,
                ..Make::new(mode, uid, gid)
            },
        )
    }

    /// Creates a symbolic link to `target`.
    pub fn symlink(&self, parent: Ino, name: &[u8], target: &[u8], uid: u32, gid: u32) -> Result<Attr> {
        if target.is_empty() || target.contains(&0) {
            return Err(Error::Invalid("bad symlink target"));
        }
        if target.len() > MAX_SYMLINK {
            return Err(Error::NameTooLong);
        }
        self.make_node(parent, name, &Make::new(libc::S_IFLNK | 0o777, uid, gid), Some(target))
    }

    /// Reads a symlink's target.
    pub fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        let cell = self.cell(ino)?;
        let st = cell.state.read();
        alive(&st)?;
        if st.meta.attr.kind != FileType::Symlink {
            return Err(Error::Invalid("not a symlink"));
        }
        // The size comes from the media: a target is never longer.
        if st.meta.attr.size > MAX_SYMLINK as u64 {
            return Err(crate::error::corrupt!(
                Symlink,
                ino = ino,
                "symlink {ino} has a {}-byte target",
                st.meta.attr.size
            ));
        }
        let mut buf = vec![0u8; st.meta.attr.size as usize];
        let n = file::read(&self.ctx, &st, 0, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// Adds the name `newname` in `newparent` for inode `ino`.
    pub fn link(&self, ino: Ino, newparent: Ino, newname: &[u8]) -> Result<Attr> {
        self.writing(|| self.ns().link(ino, newparent, newname, false))
    }

    /// Gives a file that was unlinked while open (an open handle holds it,
    /// nlink 0) the name `newname` in `newparent` again, in one commit as
    /// [`Fs::link`] adds a name; NotFound for a file with links or no open
    /// handle. Linux's linkat(AT_EMPTY_PATH) does this for O_TMPFILE files
    /// alone; here it serves the preload shim's handover, which must
    /// unmount while a program holds such a file (PRELOAD.md): a crash
    /// before the commit frees the file as recovery frees every orphan, one
    /// after leaves it under the new name.
    pub fn relink(&self, ino: Ino, newparent: Ino, newname: &[u8]) -> Result<Attr> {
        self.writing(|| self.ns().link(ino, newparent, newname, true))
    }

    /// Removes a non-directory name.
    pub fn unlink(&self, parent: Ino, name: &[u8]) -> Result<()> {
        self.writing(|| self.ns().remove(parent, name, false))
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, parent: Ino, name: &[u8]) -> Result<()> {
        self.writing(|| self.ns().remove(parent, name, true))
    }

    /// rename(2) with RENAME_NOREPLACE, RENAME_EXCHANGE and
    /// RENAME_WHITEOUT, atomic whatever it changes. A whiteout is owned by
    /// root; [`Fs::rename_as`] names its owner.
    pub fn rename(&self, parent: Ino, name: &[u8], newparent: Ino, newname: &[u8], flags: u32) -> Result<()> {
        self.rename_as(parent, name, newparent, newname, flags, 0, 0)
    }

    /// [`Fs::rename`] by the process `uid`:`gid`, the owner of the whiteout
    /// RENAME_WHITEOUT leaves.
    #[allow(clippy::too_many_arguments)]
    pub fn rename_as(
        &self,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: u32,
        uid: u32,
        gid: u32,
    ) -> Result<()> {
        self.writing(|| {
            self.ns()
                .rename((parent, name), (newparent, newname), flags, (uid, gid))
        })
    }

    /// Lists directory `ino` from `offset` (0 to start; then the
    /// `next_offset` of the last entry seen). `emit` returns true to stop.
    /// Offsets stay valid while the directory changes.
    pub fn readdir(&self, ino: Ino, offset: u64, emit: impl FnMut(DirEntry) -> bool) -> Result<()> {
        self.readdir_to(ino, offset, u64::MAX, emit)
    }

    /// Where a listing of directory `ino` started now ends: a name added,
    /// or renamed within or into it, afterwards gets a larger offset.
    pub fn listing_end(&self, ino: Ino) -> Result<u64> {
        let cell = self.cell(ino)?;
        let st = cell.state.read();
        alive(&st)?;
        Ok(st.dir()?.next_seq())
    }

    /// [`Fs::readdir`] of the entries with offsets below `end` (from
    /// [`Fs::listing_end`] when the listing started): a listing that stops
    /// there ends, and returns each entry that stayed put exactly once,
    /// however many renames run beside it (a renamed entry comes back with
    /// a new offset: xfstests generic/736).
    pub fn readdir_to(&self, ino: Ino, offset: u64, end: u64, emit: impl FnMut(DirEntry) -> bool) -> Result<()> {
        let cell = self.cell(ino)?;
        let st = cell.state.read();
        alive(&st)?;
        let due = self.atime_due_for(&st.meta.attr, now_ns());
        Self::list(&st, ino, offset, end, emit)?;
        drop(st);
        if due {
            self.accessed(&cell);
        }
        Ok(())
    }

    fn list(st: &InodeState, ino: Ino, offset: u64, end: u64, mut emit: impl FnMut(DirEntry) -> bool) -> Result<()> {
        let dir = st.dir()?;
        if st.meta.attr.nlink == 0 {
            return Ok(()); // removed, still someone's: lists nothing, as on tmpfs
        }
        let dots = [(b".".as_slice(), ino, 1u64), (b"..".as_slice(), dir.parent(), 2)];
        for (name, target, next) in dots {
            if offset < next
                && emit(DirEntry {
                    ino: target,
                    kind: FileType::Directory,
                    name: name.to_vec(),
                    next_offset: next,
                })
            {
                return Ok(());
            }
        }
        for (name, d) in dir.entries_after(offset.max(2)).take_while(|(_, d)| d.seq < end) {
            if emit(DirEntry {
                ino: d.ino,
                kind: kind_of_ftype(d.ftype),
                name: name.to_vec(),
                next_offset: d.seq,
            }) {
                break;
            }
        }
        Ok(())
    }

    /// [`Fs::readdir`] with each entry's attributes (FUSE readdirplus, an
    /// NFS READDIRPLUS). Entries are read in batches and their attributes
    /// looked up after the directory's lock is dropped: holding it while
    /// locking children could deadlock with a rename that locks them in
    /// inode order. An entry removed in between is left out, as if listed
    /// before its removal. An entry whose inode is lost (no good copy of
    /// its record or log: its lookup answers EIO) comes with `None`: the
    /// name stays listed, so the loss shows. Any other error after some
    /// entries were emitted ends the listing early with Ok: the caller's
    /// next call meets it again. Entries stop below `end` as in
    /// [`Fs::readdir_to`].
    pub fn readdir_plus(
        &self,
        ino: Ino,
        offset: u64,
        end: u64,
        mut emit: impl FnMut(DirEntry, Option<&Attr>) -> bool,
    ) -> Result<()> {
        const BATCH: usize = 64;
        let mut next = offset;
        let mut emitted = false;
        let stop = |e: Error, emitted: bool| if emitted { Ok(()) } else { Err(e) };
        loop {
            let mut batch: Vec<DirEntry> = Vec::with_capacity(BATCH);
            if let Err(e) = self.readdir_to(ino, next, end, |e| {
                batch.push(e);
                batch.len() >= BATCH
            }) {
                return stop(e, emitted);
            }
            let last_batch = batch.len() < BATCH;
            for e in batch {
                let after = e.next_offset;
                let attr = match self.getattr(e.ino) {
                    Ok(a) => Some(a),
                    Err(err) if is_loss(&err) => None,
                    Err(Error::NotFound) => {
                        next = after;
                        continue;
                    }
                    Err(err) => return stop(err, emitted),
                };
                if emit(e, attr.as_ref()) {
                    return Ok(());
                }
                emitted = true;
                next = after;
            }
            if last_batch {
                return Ok(());
            }
        }
    }
}
