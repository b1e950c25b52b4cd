//! Attributes: stat, access, chmod, chown, times, truncation and extended
//! attributes, each by path or by descriptor ([`Target`]).

use novafs::{Access, Attr, FileType, SetAttr};

use crate::errno::{Errno, Result};
use crate::path::At;
use crate::{Posix, Target};

/// One time utimensat(2) sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Time {
    /// UTIME_OMIT: left alone.
    Omit,
    /// UTIME_NOW: the current time.
    Now,
    /// Nanoseconds since the epoch.
    At(i64),
}

impl Posix {
    /// stat(2), lstat(2), fstat(2), fstatat(2).
    pub fn stat(&self, target: Target<'_>) -> Result<Attr> {
        self.target(target)
    }

    /// faccessat(2): the path walked and the file checked with the real
    /// ids ([`Posix::set_access_cred`]), or with AT_EACCESS the effective
    /// ones, as Linux does.
    pub fn access(&self, at: At, path: &[u8], mode: i32, flags: i32) -> Result<()> {
        let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
        let cred = if flags & libc::AT_EACCESS != 0 {
            self.cred()
        } else {
            self.access_cred()
        };
        let attr = self.resolve(at, path, follow, &cred)?;
        let mut want = Access::NONE;
        for (bit, access) in [
            (libc::R_OK, Access::READ),
            (libc::W_OK, Access::WRITE),
            (libc::X_OK, Access::EXEC),
        ] {
            if mode & bit != 0 {
                want = want | access;
            }
        }
        if mode & !(libc::R_OK | libc::W_OK | libc::X_OK) != 0 {
            return Err(Errno(libc::EINVAL));
        }
        Ok(self.fs.permission(attr.ino, &cred, want)?)
    }

    /// chmod(2) and its kin.
    pub fn chmod(&self, target: Target<'_>, mode: u32) -> Result<Attr> {
        let attr = self.target(target)?;
        if attr.kind == FileType::Symlink {
            return Err(Errno(libc::EOPNOTSUPP));
        }
        self.set(&attr, SetAttr::default().mode(Some(mode & 0o7777)))
    }

    /// chown(2) and its kin; `None` (-1) leaves an id alone.
    pub fn chown(&self, target: Target<'_>, uid: Option<u32>, gid: Option<u32>) -> Result<Attr> {
        let attr = self.target(target)?;
        self.set(&attr, SetAttr::default().uid(uid).gid(gid))
    }

    /// utimensat(2) and futimens(2): access and modification times.
    pub fn utimens(&self, target: Target<'_>, atime: Time, mtime: Time) -> Result<Attr> {
        let attr = self.target(target)?;
        let now = novafs::time::now_ns();
        let pick = |t: Time| match t {
            Time::Omit => None,
            Time::Now => Some(now),
            Time::At(ns) => Some(ns),
        };
        let explicit = |t: Time| matches!(t, Time::At(_));
        let set = SetAttr::default()
            .atime(pick(atime))
            .mtime(pick(mtime))
            .times_now(!explicit(atime) && !explicit(mtime));
        if set.atime.is_none() && set.mtime.is_none() {
            return Ok(attr);
        }
        self.set(&attr, set)
    }

    /// truncate(2) by path (write permission needed) and ftruncate(2)
    /// (a descriptor open for writing needed: EINVAL otherwise, as Linux).
    pub fn truncate(&self, target: Target<'_>, len: i64) -> Result<Attr> {
        let len = u64::try_from(len).map_err(|_| Errno(libc::EINVAL))?;
        let Target::Fd(fd) = target else {
            // By path: the core's setattr rules check the type, write
            // permission and append-only, and clear set-ID bits.
            let attr = self.target(target)?;
            return self.set(&attr, SetAttr::default().size(Some(len)));
        };
        let open = self.files.get(fd)?;
        if !open.writable || open.kind != FileType::RegularFile {
            return Err(Errno(libc::EINVAL));
        }
        self.fs.check_open(open.ino, true, false)?;
        self.fs.setattr(open.ino, &SetAttr::default().size(Some(len)))?;
        self.clear_set_id(open.ino)?;
        Ok(self.fs.getattr(open.ino)?)
    }

    /// A setattr after setattr_prepare's checks for the caller.
    fn set(&self, attr: &Attr, set: SetAttr) -> Result<Attr> {
        let set = self.fs.setattr_allowed(attr.ino, &self.cred(), &set)?;
        Ok(self.fs.setattr(attr.ino, &set)?)
    }

    /// getxattr(2) and its kin.
    pub fn getxattr(&self, target: Target<'_>, name: &[u8]) -> Result<Vec<u8>> {
        let attr = self.target(target)?;
        self.fs.xattr_allowed(attr.ino, &self.cred(), name, false)?;
        Ok(self.fs.getxattr(attr.ino, name)?)
    }

    /// setxattr(2) and its kin (XATTR_CREATE, XATTR_REPLACE).
    pub fn setxattr(&self, target: Target<'_>, name: &[u8], value: &[u8], flags: u32) -> Result<()> {
        let attr = self.target(target)?;
        self.fs.xattr_allowed(attr.ino, &self.cred(), name, true)?;
        Ok(self.fs.setxattr(attr.ino, name, value, flags)?)
    }

    /// listxattr(2): the names, each ending in NUL; `trusted.` ones only
    /// for a caller that may read them.
    pub fn listxattr(&self, target: Target<'_>) -> Result<Vec<u8>> {
        let attr = self.target(target)?;
        let names = self.fs.listxattr(attr.ino)?;
        Ok(self.fs.visible_xattrs(attr.ino, names, || self.cred()))
    }

    /// removexattr(2) and its kin.
    pub fn removexattr(&self, target: Target<'_>, name: &[u8]) -> Result<()> {
        let attr = self.target(target)?;
        self.fs.xattr_allowed(attr.ino, &self.cred(), name, true)?;
        Ok(self.fs.removexattr(attr.ino, name)?)
    }
}
