//! The calls, grouped as the man pages group them: opening and
//! descriptors here, then reading and writing ([`io`]), names
//! ([`names`]) and attributes ([`attrs`]).

pub(crate) mod attrs;
mod io;
pub(crate) mod maps;
mod names;

use std::sync::Arc;

use novafs::{Access, Attr, FileType, Make, SetAttr};

use crate::errno::{Errno, Result};
use crate::fd::{Fd, Open};
use crate::path::At;
use crate::{Posix, Target};

impl Posix {
    /// openat(2): the file `path` names from `at`, opened with `flags`
    /// (O_CREAT makes it with `mode`, less the umask unless the directory
    /// has a default ACL). Returns the lowest free descriptor.
    pub fn open(&self, at: At, path: &[u8], flags: i32, mode: u32) -> Result<Fd> {
        self.open_into(at, path, flags, mode, None)
    }

    /// [`open`](Self::open) at descriptor number `fd`, which must be free
    /// (the preload shim passes the kernel descriptor it reserved).
    pub fn open_as(&self, fd: Fd, at: At, path: &[u8], flags: i32, mode: u32) -> Result<Fd> {
        self.open_into(at, path, flags, mode, Some(fd))
    }

    fn open_into(&self, at: At, path: &[u8], flags: i32, mode: u32, slot: Option<Fd>) -> Result<Fd> {
        if flags & libc::O_TMPFILE == libc::O_TMPFILE {
            // A file made without a name: not served here.
            return Err(Errno(libc::EOPNOTSUPP));
        }
        let cred = self.cred();
        let mut last = self.last(at, path, &cred)?;
        let creating = flags & libc::O_CREAT != 0 && flags & libc::O_PATH == 0;
        let exclusive = creating && flags & libc::O_EXCL != 0;
        // O_CREAT|O_EXCL never follows a link at the end (it fails instead).
        let follow = flags & libc::O_NOFOLLOW == 0 && !exclusive;
        let mut links = 0;
        let found = loop {
            match self.finish(&last, follow, &cred) {
                Ok(attr) => break Some(attr),
                Err(Errno(libc::ENOENT)) if creating => {}
                Err(e) => return Err(e),
            }
            // Nothing there, or a link to nothing: O_CREAT makes the file
            // the link names, as Linux does.
            let link = match self.finish(&last, false, &cred) {
                Ok(link) if follow && link.kind == FileType::Symlink => link,
                _ => break None,
            };
            links += 1;
            if links > crate::path::MAX_LINKS {
                return Err(Errno(libc::ELOOP));
            }
            last = self.last_in(last.dir, &self.fs.readlink(link.ino)?, &cred)?;
        };
        let (attr, made) = match found {
            Some(_) if exclusive => return Err(Errno(libc::EEXIST)),
            Some(attr) => (attr, false),
            None => {
                if last.trailing_slash {
                    return Err(Errno(libc::EISDIR));
                }
                self.fs.may_create(last.dir, &cred)?;
                let mode = self.strip_set_group_id(last.dir, mode & 0o7777, &cred)?;
                let m = Make::new(libc::S_IFREG | mode, cred.uid, cred.gid)
                    .umask(self.current_umask())
                    .opened(true);
                (self.fs.make(last.dir, &last.name, &m)?, true)
            }
        };
        // A file made here comes with its open handle (the core registered
        // it with the create, so no unlink came in between) and needs no
        // access check: its creator may write it whatever its mode says.
        let open = if made {
            Open::adopt(&self.fs, &attr, flags)
        } else {
            self.opened(&attr, flags)?
        };
        self.files.install(Arc::new(open), flags & libc::O_CLOEXEC != 0, slot)
    }

    /// The mode of a file made in `dir`, less set-group-ID where the
    /// group can execute it, `dir` hands down its own group (set-group-ID
    /// directory) and the caller is neither in that group nor has
    /// CAP_FSETID (Linux's `mode_strip_sgid`).
    pub(crate) fn strip_set_group_id(&self, dir: novafs::Ino, mode: u32, cred: &novafs::Cred) -> Result<u32> {
        let exec_sgid = libc::S_ISGID | libc::S_IXGRP;
        if mode & exec_sgid != exec_sgid {
            return Ok(mode);
        }
        let parent = self.fs.getattr(dir)?;
        if parent.perm & libc::S_ISGID == 0 || cred.keeps_set_group_id(parent.gid) {
            return Ok(mode);
        }
        Ok(mode & !libc::S_ISGID)
    }

    /// The checks open(2) makes on an existing file, then the
    /// description; O_TRUNC truncates.
    fn opened(&self, attr: &Attr, flags: i32) -> Result<Open> {
        let cred = self.cred();
        let mode = flags & libc::O_ACCMODE;
        let path_only = flags & libc::O_PATH != 0;
        if !path_only {
            if flags & libc::O_DIRECTORY != 0 && attr.kind != FileType::Directory {
                return Err(Errno(libc::ENOTDIR));
            }
            if attr.kind == FileType::Symlink {
                return Err(Errno(libc::ELOOP));
            }
            let writing = mode != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
            if attr.kind == FileType::Directory && writing {
                return Err(Errno(libc::EISDIR));
            }
            if !matches!(attr.kind, FileType::Directory | FileType::RegularFile) {
                // Devices, FIFOs and sockets need a kernel behind them.
                return Err(Errno(libc::ENXIO));
            }
            let mut want = Access::NONE;
            if mode == libc::O_RDONLY || mode == libc::O_RDWR {
                want = want | Access::READ;
            }
            if writing {
                want = want | Access::WRITE;
            }
            self.fs.permission(attr.ino, &cred, want)?;
            let appending = flags & libc::O_APPEND != 0 && flags & libc::O_TRUNC == 0;
            self.fs.check_open(attr.ino, writing, appending)?;
        }
        let open = Open::new(&self.fs, attr, flags)?;
        if !path_only && flags & libc::O_TRUNC != 0 && attr.kind == FileType::RegularFile {
            self.fs.setattr(attr.ino, &SetAttr::default().size(Some(0)))?;
            self.clear_set_id(attr.ino)?;
        }
        Ok(open)
    }

    /// close(2).
    pub fn close(&self, fd: Fd) -> Result<()> {
        self.files.remove(fd).map(drop)
    }

    /// dup(2), or dup3(2) to `to` when given (closing what `to` named;
    /// `cloexec` is the new descriptor's flag).
    pub fn dup(&self, fd: Fd, to: Option<Fd>, cloexec: bool) -> Result<Fd> {
        let open = self.files.get(fd)?;
        if let Some(to) = to {
            if to == fd {
                return Err(Errno(libc::EINVAL));
            }
            let _ = self.files.remove(to);
        }
        self.files.install(open, cloexec, to)
    }

    /// fcntl(2)'s F_GETFD, F_SETFD, F_GETFL and F_SETFL.
    pub fn fcntl(&self, fd: Fd, cmd: i32, arg: i32) -> Result<i32> {
        match cmd {
            libc::F_GETFD => Ok(if self.files.cloexec(fd)? { libc::FD_CLOEXEC } else { 0 }),
            libc::F_SETFD => self.files.set_cloexec(fd, arg & libc::FD_CLOEXEC != 0).map(|()| 0),
            libc::F_GETFL => Ok(self.files.get(fd)?.flags()),
            libc::F_SETFL => {
                let open = self.files.get(fd)?;
                if open.appending() && arg & libc::O_APPEND == 0 {
                    // An append-only file stays appended to (Linux: EPERM).
                    self.fs.check_open(open.ino, open.writable, false)?;
                }
                open.set_flags(arg);
                Ok(0)
            }
            _ => Err(Errno(libc::EINVAL)),
        }
    }

    /// The type of the file `fd` is open on (no call into the core).
    pub fn kind(&self, fd: Fd) -> Result<FileType> {
        Ok(self.files.get(fd)?.kind)
    }

    /// The descriptors open now, in order.
    pub fn descriptors(&self) -> Vec<Fd> {
        self.files.numbers()
    }

    /// Which open file description `fd` refers to: the same number for
    /// descriptors that share one (dup, dup2, fcntl F_DUPFD) while they
    /// stay open, and so share its offset and status flags.
    pub fn description(&self, fd: Fd) -> Result<usize> {
        Ok(std::sync::Arc::as_ptr(&self.files.get(fd)?) as usize)
    }

    /// chdir(2) (`Target::Path`) and fchdir(2) (`Target::Fd`).
    pub fn chdir(&self, target: Target<'_>) -> Result<()> {
        let attr = self.target(target)?;
        if attr.kind != FileType::Directory {
            return Err(Errno(libc::ENOTDIR));
        }
        self.fs.permission(attr.ino, &self.cred(), Access::EXEC)?;
        self.cwd.store(attr.ino, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// The file `target` names, with its attributes now.
    pub(crate) fn target(&self, target: Target<'_>) -> Result<Attr> {
        match target {
            Target::Path { at, path, follow } => self.resolve(at, path, follow, &self.cred()),
            Target::Fd(fd) => Ok(self.fs.getattr(self.files.get(fd)?.ino)?),
        }
    }
}
