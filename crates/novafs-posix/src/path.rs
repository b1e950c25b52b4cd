//! Path resolution, as Linux's namei does it: from the root for an
//! absolute path, else from the working directory or an open directory;
//! search permission on every directory passed; `.` and `..` (the root's
//! `..` is the root: the image is the whole tree); symbolic links in the
//! middle always followed, the last one only when asked; at most 40 links
//! in one resolution (ELOOP); a trailing slash asks for a directory.

use novafs::{Access, Attr, Cred, FileType, Ino, ROOT_INO};

use crate::errno::{Errno, Result};
use crate::fd::Fd;
use crate::Posix;

/// Where a relative path starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum At {
    /// The working directory (AT_FDCWD).
    Cwd,
    /// An open directory.
    Fd(Fd),
}

/// Symbolic links one resolution may follow (Linux's MAXSYMLINKS).
pub(crate) const MAX_LINKS: u32 = 40;
/// The longest path a call takes, its NUL included (PATH_MAX).
const PATH_MAX: usize = 4096;

/// A path up to its last component: the directory that holds it (search
/// permission on it checked), the last name (`.` for a path of slashes
/// only), and whether a slash followed it.
pub(crate) struct Last {
    pub dir: Ino,
    pub name: Vec<u8>,
    pub trailing_slash: bool,
}

/// One resolution's state: who asks, and the links followed so far.
struct Walk<'a> {
    posix: &'a Posix,
    cred: &'a Cred,
    links: u32,
}

impl Posix {
    /// The directory a path from `at` starts at.
    fn start(&self, at: At, path: &[u8]) -> Result<Ino> {
        if path.first() == Some(&b'/') {
            return Ok(ROOT_INO);
        }
        match at {
            At::Cwd => Ok(self.cwd()),
            At::Fd(fd) => {
                let open = self.files.get(fd)?;
                if open.kind != FileType::Directory {
                    return Err(Errno(libc::ENOTDIR));
                }
                Ok(open.ino)
            }
        }
    }

    /// A resolution for `cred`, no link followed yet.
    fn walk<'a>(&'a self, cred: &'a Cred) -> Walk<'a> {
        Walk {
            posix: self,
            cred,
            links: 0,
        }
    }

    /// Resolves all but the last component of `path`.
    pub(crate) fn last(&self, at: At, path: &[u8], cred: &Cred) -> Result<Last> {
        check_len(path)?;
        let start = self.start(at, path)?;
        self.walk(cred).last(start, path)
    }

    /// Resolves all but the last component of `path` from directory `dir`
    /// (a symbolic link's target, from the link's directory).
    pub(crate) fn last_in(&self, dir: Ino, path: &[u8], cred: &Cred) -> Result<Last> {
        check_len(path)?;
        self.walk(cred).last(dir, path)
    }

    /// Resolves `path` to its file, following a link at its end if
    /// `follow` (or if a slash follows it).
    pub(crate) fn resolve(&self, at: At, path: &[u8], follow: bool, cred: &Cred) -> Result<Attr> {
        check_len(path)?;
        let start = self.start(at, path)?;
        self.walk(cred).resolve(start, path, follow)
    }

    /// The file a resolved last component names, following a link there
    /// if `follow` (or a trailing slash): what `resolve` does after `last`.
    pub(crate) fn finish(&self, last: &Last, follow: bool, cred: &Cred) -> Result<Attr> {
        self.walk(cred).finish(last, follow)
    }
}

impl Walk<'_> {
    fn last(&mut self, start: Ino, path: &[u8]) -> Result<Last> {
        let mut dir = if path.first() == Some(&b'/') { ROOT_INO } else { start };
        let mut comps = path.split(|&b| b == b'/').filter(|c| !c.is_empty()).peekable();
        let trailing_slash = path.last() == Some(&b'/');
        let mut name: &[u8] = b".";
        while let Some(comp) = comps.next() {
            if comps.peek().is_none() {
                name = comp;
                break;
            }
            let attr = self.step(dir, comp)?;
            let attr = if attr.kind == FileType::Symlink {
                self.through_link(dir, &attr, true)?
            } else {
                attr
            };
            if attr.kind != FileType::Directory {
                return Err(Errno(libc::ENOTDIR));
            }
            dir = attr.ino;
        }
        Ok(Last {
            dir,
            name: name.to_vec(),
            trailing_slash,
        })
    }

    fn resolve(&mut self, start: Ino, path: &[u8], follow: bool) -> Result<Attr> {
        let last = self.last(start, path)?;
        self.finish(&last, follow)
    }

    fn finish(&mut self, last: &Last, follow: bool) -> Result<Attr> {
        let attr = self.step(last.dir, &last.name)?;
        let attr = if attr.kind == FileType::Symlink && (follow || last.trailing_slash) {
            self.through_link(last.dir, &attr, true)?
        } else {
            attr
        };
        if last.trailing_slash && attr.kind != FileType::Directory {
            return Err(Errno(libc::ENOTDIR));
        }
        Ok(attr)
    }

    /// One lookup in `dir`, which must allow search.
    fn step(&self, dir: Ino, name: &[u8]) -> Result<Attr> {
        let fs = &self.posix.fs;
        fs.permission(dir, self.cred, Access::EXEC)?;
        Ok(fs.lookup(dir, name)?)
    }

    /// Where symbolic link `link` (a name in `dir`) leads.
    fn through_link(&mut self, dir: Ino, link: &Attr, follow: bool) -> Result<Attr> {
        self.links += 1;
        if self.links > MAX_LINKS {
            return Err(Errno(libc::ELOOP));
        }
        let target = self.posix.fs.readlink(link.ino)?;
        if target.is_empty() {
            return Err(Errno(libc::ENOENT));
        }
        self.resolve(dir, &target, follow)
    }
}

fn check_len(path: &[u8]) -> Result<()> {
    if path.is_empty() {
        return Err(Errno(libc::ENOENT));
    }
    if path.len() >= PATH_MAX {
        return Err(Errno(libc::ENAMETOOLONG));
    }
    Ok(())
}
