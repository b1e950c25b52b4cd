//! Inode names ([`MountConfig::inode_names`](crate::MountConfig)): with the
//! option on, the root directory answers LOOKUP of `.novafs-ino.<N>` with
//! inode N itself, so that a process can open a file by its inode number
//! through the kernel: `open("<mnt>/.novafs-ino.123", O_RDWR)`. A process
//! that served the image in-process and hands it over to a daemon reopens
//! its descriptors so (PRELOAD.md), keeping their offsets and flags.
//!
//! Every name in the root that starts with [`PREFIX`] is reserved while
//! the option is on, so that none ever names a real file: LOOKUP answers
//! the inode or ENOENT (a free or impossible number, a malformed name, an
//! unlinked inode: a name must not make a removed file reachable again,
//! nor keep it alive, each lookup being a reference the kernel holds),
//! READDIR and READDIRPLUS leave them out, and every request that would
//! make, remove or rename one there answers EPERM (the name is not the
//! caller's to use, as a file the caller may not touch). A file that
//! already has such a name (made with the option off) is hidden while it
//! is on. The root itself (`.novafs-ino.1`) is answered too, but the
//! kernel refuses the root as a child (EIO): its name is the mount point.

use novafs::Error;

use super::{entry_of, failed, sent, FuseFs, ATTR_TTL};
use crate::transport::Answer;
use crate::wire::abi::FUSE_ROOT_ID;
use crate::wire::reply;
use crate::wire::request::{Op, Request};

/// What every reserved name starts with; the inode number follows.
pub(crate) const PREFIX: &[u8] = b".novafs-ino.";

/// The N of `.novafs-ino.<N>`: decimal digits only (no sign), no leading
/// zero, a u64.
pub(crate) fn inode_of(name: &[u8]) -> Option<u64> {
    let digits = name.strip_prefix(PREFIX)?;
    let canonical = match digits {
        [b'0'] => true,
        [first, ..] => *first != b'0' && digits.iter().all(u8::is_ascii_digit),
        [] => false,
    };
    canonical.then(|| std::str::from_utf8(digits).ok()?.parse().ok())?
}

impl FuseFs {
    /// Answers `.novafs-ino.<N>` in the root with inode N.
    pub fn with_inode_names(self, on: bool) -> FuseFs {
        FuseFs {
            inode_names: on,
            ..self
        }
    }

    /// Whether `name` in directory `parent` is reserved (and so never a
    /// real entry's name while the option is on).
    pub(crate) fn reserved(&self, parent: u64, name: &[u8]) -> bool {
        self.inode_names && parent == FUSE_ROOT_ID && name.starts_with(PREFIX)
    }

    /// The answer to a request about a reserved name, if `req` is one:
    /// the inode for LOOKUP, EPERM for whatever would make, remove or
    /// rename such a name.
    pub(crate) fn inode_name_answer(&self, req: &Request<'_>, out: &mut [u8]) -> Option<Answer> {
        let at = req.nodeid;
        let refused = match req.op {
            Op::Lookup { name } if self.reserved(at, name) => return Some(self.lookup_inode(name, out)),
            Op::Symlink { name, .. }
            | Op::Mknod { name, .. }
            | Op::Mkdir { name, .. }
            | Op::Unlink { name }
            | Op::Rmdir { name }
            | Op::Create { name, .. } => self.reserved(at, name),
            Op::Link { newname, .. } => self.reserved(at, newname),
            Op::Rename {
                name, newdir, newname, ..
            } => self.reserved(at, name) || self.reserved(newdir, newname),
            _ => false,
        };
        refused.then_some(Answer::Error(libc::EPERM))
    }

    /// Inode N for `.novafs-ino.<N>`, held as any looked-up inode is
    /// (until the kernel forgets it). The kernel must not keep the name:
    /// the number may be freed and reused, so the entry expires at once
    /// (the inode's attributes are as cacheable as ever), and a missing
    /// one is a plain ENOENT, not a cached negative entry.
    fn lookup_inode(&self, name: &[u8], out: &mut [u8]) -> Answer {
        let found = inode_of(name)
            .ok_or(Error::NotFound)
            .and_then(|ino| self.fs.getattr(ino))
            .and_then(|a| if a.nlink == 0 { Err(Error::NotFound) } else { Ok(a) })
            .and_then(|a| self.fs.remember(a.ino).map(|()| a));
        match found {
            Ok(a) => {
                let mut e = entry_of(&a, ATTR_TTL);
                (e.entry_valid, e.entry_valid_nsec) = (0, 0);
                sent("lookup", reply::entry(out, &e))
            }
            Err(e) => failed("lookup", &e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::inode_of;

    #[test]
    fn only_canonical_decimal_numbers_name_an_inode() {
        for (name, ino) in [
            (&b".novafs-ino.0"[..], Some(0)),
            (b".novafs-ino.1", Some(1)),
            (b".novafs-ino.123", Some(123)),
            (b".novafs-ino.18446744073709551615", Some(u64::MAX)),
            (b".novafs-ino.18446744073709551616", None),
            (b".novafs-ino.", None),
            (b".novafs-ino.012", None),
            (b".novafs-ino.00", None),
            (b".novafs-ino.+5", None),
            (b".novafs-ino.-5", None),
            (b".novafs-ino. 5", None),
            (b".novafs-ino.5 ", None),
            (b".novafs-ino.5x", None),
            (b".novafs-ino.0x10", None),
            (b".novafs-ino.\xd9\xa3", None), // an Arabic-Indic digit
            (b"novafs-ino.5", None),
            (b".novafs-ino5", None),
        ] {
            assert_eq!(inode_of(name), ino, "{}", String::from_utf8_lossy(name));
        }
    }
}
