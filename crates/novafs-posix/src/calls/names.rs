//! Names: mkdir, unlink and rmdir, rename, link, symlink, readlink, with
//! the VFS's checks (create and delete rights, the sticky bit, the names
//! `.` and `..`).

use novafs::{Access, Cred, FileType, Make};

use crate::errno::{Errno, Result};
use crate::path::{At, Last};
use crate::Posix;

/// `.` or `..`: names no call may make, remove or rename.
fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

impl Posix {
    /// mkdirat(2): `mode` less the umask (unless the parent has a default
    /// ACL).
    pub fn mkdir(&self, at: At, path: &[u8], mode: u32) -> Result<()> {
        let cred = self.cred();
        let last = self.last(at, path, &cred)?;
        if is_dot(&last.name) {
            return Err(Errno(libc::EEXIST));
        }
        self.may_create_name(&last, &cred)?;
        // A directory takes only the sticky bit of the special ones from
        // the caller (vfs_mkdir); set-group-ID comes from its parent.
        let m = Make::new(libc::S_IFDIR | (mode & 0o1777), cred.uid, cred.gid).umask(self.current_umask());
        self.fs.make(last.dir, &last.name, &m)?;
        Ok(())
    }

    /// symlinkat(2): a link at `path` holding `target`.
    pub fn symlink(&self, target: &[u8], at: At, path: &[u8]) -> Result<()> {
        let cred = self.cred();
        let last = self.last(at, path, &cred)?;
        if is_dot(&last.name) || last.trailing_slash {
            return Err(Errno(libc::EEXIST));
        }
        if target.is_empty() {
            return Err(Errno(libc::ENOENT));
        }
        self.may_create_name(&last, &cred)?;
        self.fs.symlink(last.dir, &last.name, target, cred.uid, cred.gid)?;
        Ok(())
    }

    /// readlinkat(2): the target of the link `path` names.
    pub fn readlink(&self, at: At, path: &[u8]) -> Result<Vec<u8>> {
        let attr = self.resolve(at, path, false, &self.cred())?;
        if attr.kind != FileType::Symlink {
            return Err(Errno(libc::EINVAL));
        }
        Ok(self.fs.readlink(attr.ino)?)
    }

    /// unlinkat(2): a name, or with AT_REMOVEDIR an empty directory.
    pub fn unlink(&self, at: At, path: &[u8], flags: i32) -> Result<()> {
        let cred = self.cred();
        let last = self.last(at, path, &cred)?;
        let rmdir = flags & libc::AT_REMOVEDIR != 0;
        if rmdir {
            match last.name.as_slice() {
                b"." => return Err(Errno(libc::EINVAL)),
                b".." => return Err(Errno(libc::ENOTEMPTY)),
                _ => {}
            }
        } else if last.trailing_slash || is_dot(&last.name) {
            // A trailing slash names a directory; unlink(2) removes none.
            let attr = self.finish(&last, false, &cred)?;
            return Err(Errno(if attr.kind == FileType::Directory {
                libc::EISDIR
            } else {
                libc::ENOTDIR
            }));
        }
        self.fs.may_delete(last.dir, &cred, &last.name, rmdir)?;
        if rmdir {
            self.fs.rmdir(last.dir, &last.name)?;
        } else {
            self.fs.unlink(last.dir, &last.name)?;
        }
        Ok(())
    }

    /// renameat2(2), with RENAME_NOREPLACE, RENAME_EXCHANGE and
    /// RENAME_WHITEOUT.
    pub fn rename(&self, at: At, old: &[u8], new_at: At, new: &[u8], flags: u32) -> Result<()> {
        let cred = self.cred();
        let from = self.last(at, old, &cred)?;
        let to = self.last(new_at, new, &cred)?;
        if is_dot(&from.name) || is_dot(&to.name) {
            return Err(Errno(libc::EBUSY));
        }
        if from.trailing_slash || to.trailing_slash {
            // A trailing slash names a directory.
            let moved = self.finish(&from, false, &cred)?;
            if moved.kind != FileType::Directory {
                return Err(Errno(libc::ENOTDIR));
            }
        }
        self.fs
            .may_rename((from.dir, &from.name), (to.dir, &to.name), &cred, flags)?;
        self.fs
            .rename_as(from.dir, &from.name, to.dir, &to.name, flags, cred.uid, cred.gid)?;
        Ok(())
    }

    /// linkat(2): a second name `new` for the file `old` names (a link
    /// at its end followed only with AT_SYMLINK_FOLLOW).
    pub fn link(&self, at: At, old: &[u8], new_at: At, new: &[u8], flags: i32) -> Result<()> {
        let cred = self.cred();
        let follow = flags & libc::AT_SYMLINK_FOLLOW != 0;
        let source = self.resolve(at, old, follow, &cred)?;
        if source.kind == FileType::Directory {
            return Err(Errno(libc::EPERM));
        }
        let to = self.last(new_at, new, &cred)?;
        if is_dot(&to.name) || to.trailing_slash {
            return Err(Errno(libc::EEXIST));
        }
        self.may_create_name(&to, &cred)?;
        if !self.may_link_to(&source, &cred)? {
            return Err(Errno(libc::EPERM));
        }
        self.fs.link(source.ino, to.dir, &to.name)?;
        Ok(())
    }

    /// Names the file open on `fd` `new` again after it was unlinked
    /// ([`novafs::Fs::relink`]; ENOENT if it has a name still). No
    /// permission is asked: this is the preload shim's own step, not the
    /// program's (its handover carries such a file through a clean unmount
    /// under a name only it uses, then removes the name).
    pub fn relink(&self, fd: crate::Fd, new_at: At, new: &[u8]) -> Result<()> {
        let ino = self.files.get(fd)?.ino;
        let to = self.last(new_at, new, &Cred::root())?;
        if is_dot(&to.name) || to.trailing_slash {
            return Err(Errno(libc::EEXIST));
        }
        self.fs.relink(ino, to.dir, &to.name)?;
        Ok(())
    }

    /// [`novafs::Fs::may_create`] in the kernel's order: a read-only file
    /// system first, then a name that exists (EEXIST) before any write
    /// permission is asked of its directory.
    fn may_create_name(&self, last: &Last, cred: &Cred) -> Result<()> {
        let Err(refused) = self.fs.may_create(last.dir, cred).map_err(Errno::from) else {
            return Ok(());
        };
        if refused.0 == libc::EROFS {
            return Err(refused);
        }
        match self.finish(last, false, cred) {
            Ok(_) => Err(Errno(libc::EEXIST)),
            Err(Errno(libc::ENOENT)) => Err(refused),
            Err(other) => Err(other),
        }
    }

    /// Linux's `may_linkat` under `fs.protected_hardlinks`: a caller that
    /// does not own `source` (nor has CAP_FOWNER) may link it only if it
    /// is a regular file, not set-user-ID, not an executable set-group-ID
    /// one, that it may read and write.
    fn may_link_to(&self, source: &novafs::Attr, cred: &Cred) -> Result<bool> {
        if !protected_hardlinks() || self.fs.owner_or_capable(source.ino, cred).is_ok() {
            return Ok(true);
        }
        let exec_sgid = libc::S_ISGID | libc::S_IXGRP;
        let safe = source.kind == FileType::RegularFile
            && source.perm & libc::S_ISUID == 0
            && source.perm & exec_sgid != exec_sgid
            && self
                .fs
                .permission(source.ino, cred, Access::READ | Access::WRITE)
                .is_ok();
        Ok(safe)
    }
}

/// The `fs.protected_hardlinks` sysctl, read once (1 on most systems).
fn protected_hardlinks() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::fs::read_to_string("/proc/sys/fs/protected_hardlinks").is_ok_and(|v| v.trim() == "1"))
}
