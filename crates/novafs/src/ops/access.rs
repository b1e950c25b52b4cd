//! Who may do what: the permission checks Linux's VFS makes before it
//! calls a file system, for callers that reach novafs without a kernel in
//! between (the C ABI, the preload shim). Through a FUSE mount with
//! `default_permissions` the kernel makes them itself; here they give the
//! same answers, EACCES against EPERM against EROFS included, in the
//! kernel's order.
//!
//! Each rule is named after the kernel function it follows (fs/namei.c,
//! fs/xattr.c, fs/posix_acl.c) and works on a [`Node`]: an inode's
//! attributes and its access ACL, read under the inode's lock and then
//! checked without it. setattr's checks are `setattr`'s (`allowed`). The
//! public API is in `fs` (`Fs::permission` and the rest), which loads the
//! nodes.

use std::ops::BitOr;

use crate::commit::Ctx;
use crate::error::{Error, Result};
use crate::inode::{Attr, FileType, InodeState};
use crate::layout::{FLAG_APPEND, FLAG_IMMUTABLE};
use crate::setters::setters;
use crate::xattr::acl::{Acl, Tag};
use crate::xattr::{ACL_ACCESS, ACL_DEFAULT};

/// A set of capabilities, numbered as linux/capability.h numbers them (the
/// bits of /proc's `CapEff:`); the named ones are those file systems
/// check.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Caps(u64);

impl Caps {
    pub const NONE: Caps = Caps(0);
    /// chown and chgrp to anyone.
    pub const CHOWN: Caps = Caps(1 << 0);
    /// Read, write and search anything; execute what has an x bit.
    pub const DAC_OVERRIDE: Caps = Caps(1 << 1);
    /// Read anything, search any directory.
    pub const DAC_READ_SEARCH: Caps = Caps(1 << 2);
    /// What the owner may do (chmod, utimes, sticky deletes, ACLs).
    pub const FOWNER: Caps = Caps(1 << 3);
    /// Keep set-ID bits through changes that would clear them.
    pub const FSETID: Caps = Caps(1 << 4);
    /// Set and clear the immutable and append-only flags.
    pub const LINUX_IMMUTABLE: Caps = Caps(1 << 9);
    /// `trusted.` and `security.` extended attributes.
    pub const SYS_ADMIN: Caps = Caps(1 << 21);
    /// Device nodes, and RENAME_WHITEOUT.
    pub const MKNOD: Caps = Caps(1 << 27);
    /// `security.capability`.
    pub const SETFCAP: Caps = Caps(1 << 31);
    /// Every capability named here.
    pub const ALL: Caps = Caps(
        Caps::CHOWN.0
            | Caps::DAC_OVERRIDE.0
            | Caps::DAC_READ_SEARCH.0
            | Caps::FOWNER.0
            | Caps::FSETID.0
            | Caps::LINUX_IMMUTABLE.0
            | Caps::SYS_ADMIN.0
            | Caps::MKNOD.0
            | Caps::SETFCAP.0,
    );

    /// A capability set as the kernel writes it (`CapEff:`, capget).
    pub const fn from_bits(bits: u64) -> Caps {
        Caps(bits)
    }

    pub const fn bits(self) -> u64 {
        self.0
    }

    /// Whether every capability of `other` is in this set.
    pub const fn contains(self, other: Caps) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for Caps {
    type Output = Caps;
    fn bitor(self, rhs: Caps) -> Caps {
        Caps(self.0 | rhs.0)
    }
}

/// Access asked of an inode, as access(2)'s R_OK, W_OK and X_OK (on a
/// directory, X is search).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Access(u32);

impl Access {
    pub const NONE: Access = Access(0);
    pub const READ: Access = Access(4);
    pub const WRITE: Access = Access(2);
    pub const EXEC: Access = Access(1);

    /// From access(2)'s mode bits; None for bits other than the three.
    pub const fn from_bits(bits: u32) -> Option<Access> {
        if bits & !7 == 0 {
            Some(Access(bits))
        } else {
            None
        }
    }

    pub const fn bits(self) -> u32 {
        self.0
    }

    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// Which of a thread's ids a [`Cred`] is read with.
#[derive(Clone, Copy)]
enum Ids {
    /// The file-system ids and effective capabilities: every check but
    /// access(2)'s.
    FileSystem,
    /// The real ids: access(2) without AT_EACCESS.
    Real,
}

/// The credentials a file system checks: the file-system user and group
/// IDs (fsuid and fsgid, which follow the effective IDs unless a program
/// sets them apart), the supplementary groups, and the effective
/// capabilities.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub caps: Caps,
}

impl Cred {
    /// User `uid` in group `gid` and the supplementary `groups`, without
    /// capabilities.
    pub fn new(uid: u32, gid: u32, groups: &[u32]) -> Cred {
        Cred {
            uid,
            gid,
            groups: groups.to_vec(),
            caps: Caps::NONE,
        }
    }

    /// Root with every capability.
    pub fn root() -> Cred {
        Cred::new(0, 0, &[]).caps(Caps::ALL)
    }

    setters!(
        /// Sets the capabilities.
        caps: Caps,
        /// Sets the supplementary groups.
        groups: Vec<u32>,
    );

    /// The calling thread's credentials (each thread has its own: setfsuid
    /// is per thread), from /proc/thread-self/status.
    pub fn of_process() -> std::io::Result<Cred> {
        Cred::read_status("/proc/thread-self/status", Ids::FileSystem)
    }

    /// The credentials access(2) checks with when not asked for the
    /// effective ones (AT_EACCESS): the calling thread's real user and
    /// group, with its permitted capabilities for a real root and none
    /// otherwise (Linux's `access_override_creds`).
    pub fn real_of_process() -> std::io::Result<Cred> {
        Cred::read_status("/proc/thread-self/status", Ids::Real)
    }

    /// The credentials of thread or process `tid`, from /proc (what a FUSE
    /// daemon reads for a request's sender).
    pub fn of_task(tid: u32) -> std::io::Result<Cred> {
        Cred::read_status(&format!("/proc/{tid}/status"), Ids::FileSystem)
    }

    fn read_status(path: &str, ids: Ids) -> std::io::Result<Cred> {
        let status = std::fs::read_to_string(path)?;
        Cred::parse_status(&status, ids).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{path}: no Uid, Gid, Groups or CapEff line"),
            )
        })
    }

    /// Parses /proc/PID/status: of `Uid:` and `Gid:` the fourth
    /// (file-system) ID with `CapEff:`, or the first (real) one with
    /// `CapPrm:` for a real root; and `Groups:`.
    fn parse_status(status: &str, ids: Ids) -> Option<Cred> {
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::split_whitespace)
        };
        let which = match ids {
            Ids::FileSystem => 3,
            Ids::Real => 0,
        };
        let uid = field("Uid:")?.nth(which)?.parse().ok()?;
        let gid = field("Gid:")?.nth(which)?.parse().ok()?;
        let groups = field("Groups:")?
            .map(str::parse)
            .collect::<std::result::Result<_, _>>()
            .ok()?;
        let caps = match ids {
            Ids::FileSystem => u64::from_str_radix(field("CapEff:")?.next()?, 16).ok()?,
            Ids::Real if uid == 0 => u64::from_str_radix(field("CapPrm:")?.next()?, 16).ok()?,
            Ids::Real => 0,
        };
        Some(Cred {
            uid,
            gid,
            groups,
            caps: Caps(caps),
        })
    }

    /// Linux's `in_group_p`: `gid` is the caller's group or one of its
    /// supplementary groups.
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }

    /// Linux's `in_group_or_capable`: a mode this caller sets on a node of
    /// group `gid` keeps its set-group-ID bit (chmod, an ACL's mode, a
    /// chown's).
    pub fn keeps_set_group_id(&self, gid: u32) -> bool {
        self.in_group(gid) || self.caps.contains(Caps::FSETID)
    }

    /// The permission bits of `a` after a change that clears set-ID bits: a
    /// write, truncation or fallocate of a regular file by a caller without
    /// CAP_FSETID (the caller checks that, as the kernel does), or any
    /// `chown` of a non-directory, whatever its kind (`a` as it is after it;
    /// Linux's `chown_common`, pjdfstest chown/00.t on fifos and devices).
    /// Set-user-ID goes, and set-group-ID
    /// where group execution makes it one (Linux's
    /// `setattr_should_drop_suidgid`); a mode that changes so, or any
    /// chown's, keeps set-group-ID only for a caller that
    /// [keeps](Cred::keeps_set_group_id) it (as on ext4: xfstests
    /// generic/683, 684).
    pub fn kill_set_id(&self, a: &Attr, chown: bool) -> u32 {
        let set_id = libc::S_ISUID | libc::S_ISGID;
        if a.kind == FileType::Directory || a.perm & set_id == 0 {
            return a.perm;
        }
        let mut mode = a.perm & !libc::S_ISUID;
        if a.perm & libc::S_IXGRP != 0 {
            mode &= !libc::S_ISGID;
        }
        let changes = mode != a.perm || chown;
        if changes && mode & libc::S_ISGID != 0 && !self.keeps_set_group_id(a.gid) {
            mode &= !libc::S_ISGID;
        }
        mode
    }

    pub(crate) fn has(&self, cap: Caps) -> bool {
        self.caps.contains(cap)
    }
}

/// What the checks read of an inode: its attributes and access ACL.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub(crate) attr: Attr,
    acl: Option<Acl>,
}

impl Node {
    /// The node of `st` (read-locked by the caller).
    pub(crate) fn load(ctx: &Ctx, st: &InodeState) -> Result<Node> {
        Ok(Node {
            attr: st.attr(),
            acl: crate::xattr::access_acl(ctx, st)?,
        })
    }

    pub(crate) fn flag(&self, flag: u32) -> bool {
        self.attr.flags & flag != 0
    }

    pub(crate) fn is_dir(&self) -> bool {
        self.attr.kind == FileType::Directory
    }
}

fn denied() -> Error {
    Error::Access("permission denied")
}

/// `inode_permission`: a read-only file system refuses writes to what it
/// stores (EROFS: not to device nodes, FIFOs or sockets), an immutable
/// inode any write (EPERM), then [`generic_permission`].
pub(crate) fn permission(n: &Node, cred: &Cred, want: Access, read_only: bool) -> Result<()> {
    if want.contains(Access::WRITE) {
        let stored = matches!(
            n.attr.kind,
            FileType::RegularFile | FileType::Directory | FileType::Symlink
        );
        if read_only && stored {
            return Err(Error::ReadOnly);
        }
        if n.flag(FLAG_IMMUTABLE) {
            return Err(Error::NotPermitted);
        }
    }
    generic_permission(n, cred, want)
}

/// `generic_permission`: the mode and ACL, then the capabilities that
/// override them. On a directory DAC_READ_SEARCH allows anything but
/// writing and DAC_OVERRIDE everything; elsewhere DAC_READ_SEARCH allows
/// reading alone, and DAC_OVERRIDE all but executing a file without any
/// x bit.
fn generic_permission(n: &Node, cred: &Cred, want: Access) -> Result<()> {
    if acl_permission_check(n, cred, want) {
        return Ok(());
    }
    let overridden = if n.is_dir() {
        (!want.contains(Access::WRITE) && cred.has(Caps::DAC_READ_SEARCH)) || cred.has(Caps::DAC_OVERRIDE)
    } else {
        (want == Access::READ && cred.has(Caps::DAC_READ_SEARCH))
            || ((!want.contains(Access::EXEC) || n.attr.perm & 0o111 != 0) && cred.has(Caps::DAC_OVERRIDE))
    };
    if overridden {
        Ok(())
    } else {
        Err(denied())
    }
}

/// `acl_permission_check`: the owner gets the owner bits whatever the
/// ACL says; then the ACL, if there is one and the mode's group bits (its
/// mask) are not all clear; else the group bits for a member of the
/// file's group, the other bits for the rest.
fn acl_permission_check(n: &Node, cred: &Cred, want: Access) -> bool {
    let a = &n.attr;
    let mask = want.bits();
    if cred.uid == a.uid {
        return mask & !(a.perm >> 6) & 7 == 0;
    }
    if let Some(acl) = &n.acl {
        if a.perm & 0o070 != 0 {
            return acl_permits(acl, a, cred, mask);
        }
    }
    let class = if cred.in_group(a.gid) { a.perm >> 3 } else { a.perm };
    mask & !class & 7 == 0
}

/// `posix_acl_permission`: the first entry that names the caller decides,
/// a named user's and any group's limited by the mask; a caller in some
/// matching group that none of them grants is refused, not judged as
/// other.
fn acl_permits(acl: &Acl, a: &Attr, cred: &Cred, want: u32) -> bool {
    let mask = acl.entries().find(|e| e.0 == Tag::Mask).map_or(7, |e| e.1);
    let mut in_some_group = false;
    for (tag, perm) in acl.entries() {
        let grants = |p: u32| p & want == want;
        match tag {
            Tag::UserObj if a.uid == cred.uid => return grants(perm),
            Tag::User(id) if id == cred.uid => return grants(perm & mask),
            Tag::GroupObj | Tag::Group(_) => {
                let gid = if let Tag::Group(g) = tag { g } else { a.gid };
                if cred.in_group(gid) {
                    in_some_group = true;
                    if grants(perm) {
                        return grants(perm & mask);
                    }
                }
            }
            Tag::Other => return !in_some_group && grants(perm),
            _ => {}
        }
    }
    false // `parse` keeps no ACL without an other entry
}

/// `inode_owner_or_capable`.
pub(crate) fn owner_or_capable(n: &Node, cred: &Cred) -> bool {
    cred.uid == n.attr.uid || cred.has(Caps::FOWNER)
}

/// [`owner_or_capable`], or EPERM.
pub(crate) fn owner_or_capable_or_eperm(n: &Node, cred: &Cred) -> Result<()> {
    if owner_or_capable(n, cred) {
        Ok(())
    } else {
        Err(Error::NotPermitted)
    }
}

/// `may_create`, for a name the caller found absent (an existing one is
/// EEXIST first): a removed directory takes no new names (ENOENT), then
/// write and search permission.
pub(crate) fn may_create(dir: &Node, cred: &Cred, read_only: bool) -> Result<()> {
    if !dir.is_dir() {
        return Err(Error::NotDir);
    }
    if read_only {
        return Err(Error::ReadOnly);
    }
    if dir.attr.nlink == 0 {
        return Err(Error::NotFound);
    }
    permission(dir, cred, Access::WRITE | Access::EXEC, read_only)
}

/// `vfs_mknod` after `may_create`: device nodes need CAP_MKNOD.
pub(crate) fn may_mknod(dir: &Node, cred: &Cred, mode: u32, read_only: bool) -> Result<()> {
    may_create(dir, cred, read_only)?;
    let device = matches!(mode & libc::S_IFMT, libc::S_IFCHR | libc::S_IFBLK);
    if device && !cred.has(Caps::MKNOD) {
        return Err(Error::NotPermitted);
    }
    Ok(())
}

/// `may_delete`: write and search permission on the directory; then
/// EPERM for an append-only directory, for a victim that is immutable or
/// append-only, and in a sticky directory for a caller who owns neither
/// the victim nor the directory and lacks CAP_FOWNER (`check_sticky`);
/// then the victim's type against what the call removes.
pub(crate) fn may_delete(dir: &Node, victim: &Node, is_dir: bool, cred: &Cred, read_only: bool) -> Result<()> {
    permission(dir, cred, Access::WRITE | Access::EXEC, read_only)?;
    if dir.flag(FLAG_APPEND) {
        return Err(Error::NotPermitted);
    }
    let sticky = dir.attr.perm & libc::S_ISVTX != 0
        && cred.uid != victim.attr.uid
        && cred.uid != dir.attr.uid
        && !cred.has(Caps::FOWNER);
    if sticky || victim.flag(FLAG_APPEND) || victim.flag(FLAG_IMMUTABLE) {
        return Err(Error::NotPermitted);
    }
    match (is_dir, victim.is_dir()) {
        (true, false) => Err(Error::NotDir),
        (false, true) => Err(Error::IsDir),
        _ if dir.attr.nlink == 0 => Err(Error::NotFound),
        _ => Ok(()),
    }
}

/// What [`may_rename`] reads: the source and its directory, the target's
/// directory and the target if the name exists.
pub(crate) struct Rename<'a> {
    pub(crate) old_dir: &'a Node,
    pub(crate) old: &'a Node,
    pub(crate) new_dir: &'a Node,
    pub(crate) new: Option<&'a Node>,
    pub(crate) exchange: bool,
}

/// `vfs_rename`'s checks: a rename onto the same inode does nothing and
/// is allowed; else the source's removal, then the target's removal (or
/// its creation when absent); and a directory moving to another parent
/// needs write permission on itself, for its "..".
pub(crate) fn may_rename(r: &Rename<'_>, cred: &Cred, read_only: bool) -> Result<()> {
    if r.new.is_some_and(|n| n.attr.ino == r.old.attr.ino) {
        return Ok(());
    }
    let is_dir = r.old.is_dir();
    may_delete(r.old_dir, r.old, is_dir, cred, read_only)?;
    match r.new {
        None => may_create(r.new_dir, cred, read_only)?,
        Some(new) if r.exchange => may_delete(r.new_dir, new, new.is_dir(), cred, read_only)?,
        Some(new) => may_delete(r.new_dir, new, is_dir, cred, read_only)?,
    }
    if r.new_dir.attr.ino != r.old_dir.attr.ino {
        if is_dir {
            permission(r.old, cred, Access::WRITE, read_only)?;
        }
        if let Some(new) = r.new.filter(|n| r.exchange && n.is_dir()) {
            permission(new, cred, Access::WRITE, read_only)?;
        }
    }
    Ok(())
}

/// `xattr_permission`, with the rules Linux keeps elsewhere for the
/// `system.` ACLs (`vfs_set_acl`) and `security.` (the capability
/// module's `cap_inode_setxattr`): writing is refused on an immutable or
/// append-only inode (EPERM); `trusted.` needs CAP_SYS_ADMIN (EPERM to
/// write, ENODATA to read); writing `security.capability` needs
/// CAP_SETFCAP, the rest of `security.` CAP_SYS_ADMIN; setting an ACL
/// needs the owner or CAP_FOWNER; reading `security.` and `system.` is
/// free; `user.` lives on regular files and directories only (EPERM to
/// write, ENODATA to read elsewhere), in a sticky directory is written by
/// its owner or CAP_FOWNER alone, and is read and written with read and
/// write permission, as any other name is.
pub(crate) fn xattr_allowed(n: &Node, cred: &Cred, name: &[u8], writing: bool, read_only: bool) -> Result<()> {
    if writing {
        if read_only {
            return Err(Error::ReadOnly);
        }
        if n.flag(FLAG_IMMUTABLE) || n.flag(FLAG_APPEND) {
            return Err(Error::NotPermitted);
        }
    }
    let refused = if writing { Error::NotPermitted } else { Error::NoData };
    if name == ACL_ACCESS || name == ACL_DEFAULT {
        // A symlink's ACL (EOPNOTSUPP) and a default ACL of a
        // non-directory (EACCES) are refused before the owner is asked:
        // the core's `setxattr` answers them.
        let asked = writing && n.attr.kind != FileType::Symlink && (name == ACL_ACCESS || n.is_dir());
        return if asked {
            owner_or_capable_or_eperm(n, cred)
        } else {
            Ok(())
        };
    }
    if name.starts_with(b"security.") {
        let cap = if name == b"security.capability" {
            Caps::SETFCAP
        } else {
            Caps::SYS_ADMIN
        };
        return if writing && !cred.has(cap) {
            Err(Error::NotPermitted)
        } else {
            Ok(())
        };
    }
    if name.starts_with(b"system.") {
        return Ok(());
    }
    if name.starts_with(b"trusted.") {
        return if cred.has(Caps::SYS_ADMIN) {
            Ok(())
        } else {
            Err(refused)
        };
    }
    if name.starts_with(b"user.") {
        if !matches!(n.attr.kind, FileType::RegularFile | FileType::Directory) {
            return Err(refused);
        }
        if writing && n.is_dir() && n.attr.perm & libc::S_ISVTX != 0 {
            owner_or_capable_or_eperm(n, cred)?;
        }
    }
    let want = if writing { Access::WRITE } else { Access::READ };
    permission(n, cred, want, read_only)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_gives_fs_ids_groups_and_capabilities() {
        let status = "Name:\tx\nUid:\t5\t6\t7\t8\nGid:\t1\t2\t3\t4\nGroups:\t10 20 \nCapEff:\t0000000000000010\n";
        let c = Cred::parse_status(status, Ids::FileSystem).unwrap();
        assert_eq!(c, Cred::new(8, 4, &[10, 20]).caps(Caps::FSETID));
        assert!(c.in_group(4) && c.in_group(20) && !c.in_group(3));
        let nobody = "Uid:\t65534\t65534\t65534\t65534\nGid:\t65534\t65534\t65534\t65534\nGroups:\t\nCapEff:\t0000000000000000\n";
        assert_eq!(
            Cred::parse_status(nobody, Ids::FileSystem),
            Some(Cred::new(65534, 65534, &[]))
        );
        assert_eq!(Cred::parse_status("garbage", Ids::FileSystem), None);
        let bad_group = "Uid:\t1\t1\t1\t1\nGid:\t1\t1\t1\t1\nGroups:\t1 x\nCapEff:\t0\n";
        assert_eq!(Cred::parse_status(bad_group, Ids::FileSystem), None);
    }

    #[test]
    fn access_checks_with_the_real_ids_and_a_real_roots_permitted_caps() {
        // Real root, effective 1000: root's permitted capabilities.
        let status =
            "Uid:\t0\t1000\t0\t1000\nGid:\t0\t100\t0\t100\nGroups:\t100\nCapEff:\t0\nCapPrm:\t0000000000000010\n";
        let real = Cred::parse_status(status, Ids::Real).unwrap();
        assert_eq!(real, Cred::new(0, 0, &[100]).caps(Caps::FSETID));
        // Real 1000, effective root: none.
        let status = "Uid:\t1000\t0\t0\t0\nGid:\t100\t0\t0\t0\nGroups:\t\nCapEff:\t000001ffffffffff\nCapPrm:\t000001ffffffffff\n";
        assert_eq!(Cred::parse_status(status, Ids::Real), Some(Cred::new(1000, 100, &[])));
        assert_eq!(Cred::parse_status(status, Ids::FileSystem).map(|c| c.uid), Some(0));
    }

    #[test]
    fn this_thread_is_read_from_proc() {
        let me = Cred::of_process().unwrap();
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let fsuid = status.lines().find_map(|l| l.strip_prefix("Uid:")).unwrap();
        assert_eq!(me.uid.to_string(), fsuid.split_whitespace().nth(3).unwrap());
        assert_eq!(Cred::of_task(std::process::id()).unwrap().gid, me.gid);
    }

    #[test]
    fn set_group_id_is_kept_in_the_group_or_with_cap_fsetid() {
        assert!(!Cred::new(1, 65534, &[]).keeps_set_group_id(0));
        assert!(Cred::new(1, 65534, &[0]).keeps_set_group_id(0));
        assert!(Cred::new(1, 65534, &[]).caps(Caps::FSETID).keeps_set_group_id(0));
        assert!(Cred::root().keeps_set_group_id(7));
    }

    #[test]
    fn access_takes_only_the_three_bits() {
        assert_eq!(Access::from_bits(7), Some(Access::READ | Access::WRITE | Access::EXEC));
        assert_eq!(Access::from_bits(8), None);
        assert!(Caps::ALL.contains(Caps::SETFCAP | Caps::CHOWN));
        assert_eq!(
            Caps::from_bits(0x1ff_ffff_ffff).bits() & Caps::ALL.bits(),
            Caps::ALL.bits()
        );
    }
}
