//! setattr's rules (chmod, chown, utimens, truncate, chattr) as POSIX and
//! Linux give them, committed as one log entry with what they imply: a
//! truncation's dropped pages, the access ACL that follows the mode; and
//! who may make which change (`allowed`), for callers without a kernel.

use crate::access::{self, Access, Caps, Cred, Node};
use crate::alloc::{Budget, Reserved};
use crate::commit::Ctx;
use crate::error::{Error, Result};
use crate::file;
use crate::inode::{setattr_entry, Attr, FileType, Ino, InodeState};
use crate::layout::{FLAG_APPEND, FLAG_IMMUTABLE, INODE_FLAGS, MAX_FILE_SIZE, PAGE_SIZE};
use crate::mmap::{self, Mmaps};
use crate::relaxed;
use crate::setters::setters;
use crate::time::now_ns;
use crate::xattr;

/// Attribute changes for [`Fs::setattr`]; `None` leaves a field alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SetAttr {
    /// Permission bits; the file type cannot change.
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<i64>,
    pub mtime: Option<i64>,
    pub ctime: Option<i64>,
    /// chattr flags (`FLAG_IMMUTABLE`, `FLAG_APPEND`, `FLAG_NODUMP` at the
    /// crate root; any other is EOPNOTSUPP).
    pub flags: Option<u32>,
    /// The times given are the current time (utimensat's UTIME_NOW, as
    /// touch(1) sets them): allowed on an append-only file, where times
    /// set to any other value are EPERM, as on Linux.
    pub times_now: bool,
}

impl SetAttr {
    setters!(
        /// Sets the permission bits.
        mode: Option<u32>,
        /// Sets the owner.
        uid: Option<u32>,
        /// Sets the group.
        gid: Option<u32>,
        /// Sets the size (truncates or extends).
        size: Option<u64>,
        /// Sets the access time, in nanoseconds since the epoch.
        atime: Option<i64>,
        /// Sets the modification time, in nanoseconds since the epoch.
        mtime: Option<i64>,
        /// Sets the change time, in nanoseconds since the epoch.
        ctime: Option<i64>,
        /// Sets the chattr flags.
        flags: Option<u32>,
        /// Says the times given are the current time.
        times_now: bool,
    );
}

/// The file pages a size change from `old` to `new` bytes touches: from
/// the page holding the lower end on.
fn resized_pages(old: u64, new: u64) -> std::ops::Range<u64> {
    old.min(new) / PAGE_SIZE..u64::MAX
}

/// Applies `set` to inode `ino` (its state `st`, write-locked by the
/// caller) and commits it; returns the new attributes.
pub(crate) fn setattr(ctx: &Ctx, mmaps: &Mmaps, st: &mut InodeState, ino: Ino, set: &SetAttr) -> Result<Attr> {
    let now = now_ns();
    let old = st.attr();
    // chattr +i/+a leave only the flags themselves to change, and +a
    // the times too when they are set to now.
    let mut guarded = SetAttr { flags: None, ..*set };
    if set.times_now && old.flags & FLAG_IMMUTABLE == 0 {
        guarded = SetAttr {
            atime: None,
            mtime: None,
            ctime: None,
            times_now: false,
            ..guarded
        };
    }
    if guarded != SetAttr::default() {
        old.check_changeable()?;
    }
    let mut a = old;
    if let Some(flags) = set.flags {
        if flags & !INODE_FLAGS != 0 {
            return Err(Error::NotSupported("this chattr flag"));
        }
        a.flags = flags;
    }
    if let Some(m) = set.mode {
        a.perm = m & 0o7777;
    }
    a.uid = set.uid.unwrap_or(a.uid);
    a.gid = set.gid.unwrap_or(a.gid);
    a.atime = set.atime.unwrap_or(a.atime);
    a.mtime = set.mtime.unwrap_or(a.mtime);
    a.ctime = set.ctime.unwrap_or(now);
    let mut prep = (Vec::new(), Reserved::empty(ctx.alloc()));
    if let Some(size) = set.size {
        match old.kind {
            FileType::RegularFile => {}
            FileType::Directory => return Err(Error::IsDir),
            _ => return Err(Error::Invalid("size change of a special file")),
        }
        if size > MAX_FILE_SIZE {
            return Err(Error::FileTooBig);
        }
        if size != old.size {
            a.size = size;
            a.mtime = set.mtime.unwrap_or(now);
            mmap::changing(ctx, mmaps, st, resized_pages(old.size, size))?;
            prep = file::shrink_prep(ctx, st, size)?;
        }
    }
    // An error from here on drops `held`, which gives its pages back.
    let (mut entries, mut held) = prep;
    if a.perm != old.perm {
        // The access ACL follows the mode, in the same commit.
        let (e, pages) = xattr::chmod(ctx, st, a.perm, a.ctime)?.into_parts();
        entries.extend(e);
        held.merge(pages);
    }
    if entries.is_empty() && a.size == old.size && relaxed::setattr(ctx, st, &a)? {
        return Ok(st.attr());
    }
    entries.push(setattr_entry(ctx.epoch(), &a));
    // A shrink frees space: it may use the reserve (alloc.rs `Budget`).
    let budget = if a.size < old.size {
        Budget::Freeing
    } else {
        Budget::Normal
    };
    file::commit_kept(ctx, st, budget, &entries, held)?;
    if a.size != old.size {
        mmap::changed(mmaps, ino, resized_pages(old.size, a.size))?;
        mmap::rewritten(ctx, mmaps, st, old.size.min(a.size)..old.size.max(a.size))?;
    }
    Ok(st.attr())
}

/// What a change of [`SetAttr`] needs, in the order Linux checks it
/// (`vfs_truncate`, `may_setattr`, `setattr_prepare`), and the change to
/// make: `set` with the set-ID bits a FUSE mount of novafs clears.
///
/// - A size change is truncate(2) by path: a regular file (EISDIR,
///   EINVAL), write permission, not append-only (EPERM). For ftruncate(2)
///   the open descriptor is the permission: leave the size out here.
/// - Mode, owner, group and explicit times: EPERM on an immutable or
///   append-only inode. Both times set to now (touch, utimensat's
///   UTIME_NOW for both: [`SetAttr::times_now`] with both given) needs
///   only write permission from a caller other than the owner; one time
///   set to now alone counts as explicit, as Linux counts it. A ctime is
///   always explicit.
/// - chown: to another user needs CAP_CHOWN; the owner may give the file
///   to a group of its own. chmod: the owner or CAP_FOWNER; set-group-ID
///   is dropped for a caller outside the (new) group without CAP_FSETID.
///   Explicit times: the owner or CAP_FOWNER.
/// - chattr flags: the owner or CAP_FOWNER, and CAP_LINUX_IMMUTABLE to
///   change the immutable or append-only flag.
/// - A chown of a regular file, and its truncation by a caller without
///   CAP_FSETID, clear set-ID bits as [`Cred::kill_set_id`] says. As
///   through the mount, where the kernel leaves this to novafs
///   (FUSE_HANDLE_KILLPRIV_V2) and does not ask for chmod's rights to do
///   it (ext4 does: a caller with CAP_CHOWN alone may not chown a set-ID
///   file of another's there).
pub(crate) fn allowed(n: &Node, cred: &Cred, set: &SetAttr, read_only: bool) -> Result<SetAttr> {
    let a = &n.attr;
    if *set == SetAttr::default() {
        return Ok(*set);
    }
    if set.size.is_some() {
        match a.kind {
            FileType::RegularFile => {}
            FileType::Directory => return Err(Error::IsDir),
            _ => return Err(Error::Invalid("size change of a special file")),
        }
    }
    if read_only {
        return Err(Error::ReadOnly);
    }
    if set.size.is_some() {
        access::permission(n, cred, Access::WRITE, read_only)?;
        if n.flag(FLAG_APPEND) {
            return Err(Error::NotPermitted);
        }
    }
    if let Some(flags) = set.flags {
        access::owner_or_capable_or_eperm(n, cred)?;
        let guarded = FLAG_IMMUTABLE | FLAG_APPEND;
        if (flags ^ a.flags) & guarded != 0 && !cred.has(Caps::LINUX_IMMUTABLE) {
            return Err(Error::NotPermitted);
        }
    }
    let touch = set.times_now && set.atime.is_some() && set.mtime.is_some();
    let explicit_times = set.ctime.is_some() || (!touch && (set.atime.is_some() || set.mtime.is_some()));
    let chown = set.uid.is_some() || set.gid.is_some();
    // may_setattr
    if set.mode.is_some() || chown || explicit_times {
        a.check_changeable()?;
    }
    if touch {
        if n.flag(FLAG_IMMUTABLE) {
            return Err(Error::NotPermitted);
        }
        if !access::owner_or_capable(n, cred) {
            access::permission(n, cred, Access::WRITE, read_only)?;
        }
    }
    // setattr_prepare
    if let Some(uid) = set.uid {
        if !((cred.uid == a.uid && uid == a.uid) || cred.has(Caps::CHOWN)) {
            return Err(Error::NotPermitted);
        }
    }
    if let Some(gid) = set.gid {
        let own = cred.uid == a.uid && (gid == a.gid || cred.in_group(gid));
        if !(own || cred.has(Caps::CHOWN)) {
            return Err(Error::NotPermitted);
        }
    }
    let mut out = *set;
    if let Some(mode) = set.mode {
        access::owner_or_capable_or_eperm(n, cred)?;
        if !cred.keeps_set_group_id(set.gid.unwrap_or(a.gid)) {
            out.mode = Some(mode & !libc::S_ISGID);
        }
    }
    if explicit_times {
        access::owner_or_capable_or_eperm(n, cred)?;
    }
    let truncated = set.size.is_some() && !cred.has(Caps::FSETID);
    if chown || truncated {
        let after = Attr {
            perm: out.mode.unwrap_or(a.perm),
            uid: set.uid.unwrap_or(a.uid),
            gid: set.gid.unwrap_or(a.gid),
            ..*a
        };
        let mode = cred.kill_set_id(&after, chown);
        if mode != after.perm {
            out.mode = Some(mode);
        }
    }
    Ok(out)
}
