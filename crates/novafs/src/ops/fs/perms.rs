//! The permission half of [`Fs`]: the checks Linux's VFS makes before it
//! calls a file system, for a caller that reaches novafs without a kernel
//! (`access`, and `setattr::allowed`). Each loads what it reads under the
//! inodes' locks and checks it after, as the kernel checks its cached
//! inodes: a change that races the check is ordered after it.

// The parent's imports serve this half too.
use super::*;

use crate::access::{self, Access, Caps, Cred, Node, Rename};

impl Fs {
    /// What the checks read of inode `ino`.
    fn node(&self, ino: Ino) -> Result<Node> {
        let cell = self.cell(ino)?;
        let st = cell.state.read();
        alive(&st)?;
        Node::load(&self.ctx, &st)
    }

    /// The node `name` in directory `dir` names; None if it names none.
    fn child(&self, dir: Ino, name: &[u8]) -> Result<Option<Node>> {
        match self.lookup(dir, name) {
            Ok(a) => self.node(a.ino).map(Some),
            Err(Error::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Linux's `inode_permission`: whether `cred` may read, write or
    /// execute (search, for a directory) inode `ino`, by its mode, its
    /// access ACL and the caller's capabilities. EACCES when refused;
    /// EPERM to write an immutable inode; EROFS to write a file,
    /// directory or symlink of a read-only mount or a snapshot view.
    /// access(2) checks with the caller's real IDs: build its `cred` so.
    pub fn permission(&self, ino: Ino, cred: &Cred, want: Access) -> Result<()> {
        access::permission(&self.node(ino)?, cred, want, self.read_only)
    }

    /// Whether `cred` may look names up in directory `dir` (search
    /// permission): what a path walk asks of each directory it passes.
    pub fn may_lookup(&self, dir: Ino, cred: &Cred) -> Result<()> {
        self.permission(dir, cred, Access::EXEC)
    }

    /// Whether `cred` may add a name to directory `dir` (Linux's
    /// `may_create`): ENOTDIR, EROFS, ENOENT for a removed directory, then
    /// write and search permission. A name that exists is EEXIST, before
    /// this is asked.
    pub fn may_create(&self, dir: Ino, cred: &Cred) -> Result<()> {
        access::may_create(&self.node(dir)?, cred, self.read_only)
    }

    /// [`Fs::may_create`] for a node of `mode`, then CAP_MKNOD for a
    /// device (EPERM), as mknod(2) asks.
    pub fn may_mknod(&self, dir: Ino, cred: &Cred, mode: u32) -> Result<()> {
        access::may_mknod(&self.node(dir)?, cred, mode, self.read_only)
    }

    /// Whether `cred` may remove `name` from directory `dir` (Linux's
    /// `may_delete`; `is_dir` for rmdir): EROFS, ENOENT, write and search
    /// permission on `dir`; EPERM for an append-only `dir`, for an
    /// immutable or append-only victim, and in a sticky directory for a
    /// caller that owns neither the victim nor `dir` without CAP_FOWNER;
    /// ENOTDIR or EISDIR for the wrong type.
    pub fn may_delete(&self, dir: Ino, cred: &Cred, name: &[u8], is_dir: bool) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        // The name is looked up first, which needs search permission.
        self.may_lookup(dir, cred)?;
        let victim = self.child(dir, name)?.ok_or(Error::NotFound)?;
        access::may_delete(&self.node(dir)?, &victim, is_dir, cred, self.read_only)
    }

    /// Whether `cred` may rename `from` (directory and name) to `to` with
    /// `flags` (Linux's `vfs_rename` and the checks of `renameat2` before
    /// it): RENAME_WHITEOUT needs CAP_MKNOD (EPERM); EROFS; ENOENT for a
    /// missing source; EEXIST for RENAME_NOREPLACE onto a name, ENOENT for
    /// RENAME_EXCHANGE without one; a rename onto the source's own inode is
    /// allowed; then [`Fs::may_delete`] of the source, of the target (or
    /// [`Fs::may_create`] without one), and write permission on a
    /// directory moving to another parent (its ".." changes), and on the
    /// other directory of an exchange. Loops and non-empty targets are
    /// the rename's to refuse.
    pub fn may_rename(&self, from: (Ino, &[u8]), to: (Ino, &[u8]), cred: &Cred, flags: u32) -> Result<()> {
        if flags & RENAME_WHITEOUT != 0 && !cred.has(Caps::MKNOD) {
            return Err(Error::NotPermitted);
        }
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        // Both names are looked up first, which needs search permission.
        self.may_lookup(from.0, cred)?;
        self.may_lookup(to.0, cred)?;
        let old = self.child(from.0, from.1)?.ok_or(Error::NotFound)?;
        let new = self.child(to.0, to.1)?;
        match &new {
            Some(_) if flags & RENAME_NOREPLACE != 0 => return Err(Error::Exists),
            None if flags & RENAME_EXCHANGE != 0 => return Err(Error::NotFound),
            _ => {}
        }
        let old_dir = self.node(from.0)?;
        let new_dir = self.node(to.0)?;
        let r = Rename {
            old_dir: &old_dir,
            old: &old,
            new_dir: &new_dir,
            new: new.as_ref(),
            exchange: flags & RENAME_EXCHANGE != 0,
        };
        access::may_rename(&r, cred, self.read_only)
    }

    /// Linux's `inode_owner_or_capable`: `cred` owns inode `ino` or has
    /// CAP_FOWNER; EPERM if not.
    pub fn owner_or_capable(&self, ino: Ino, cred: &Cred) -> Result<()> {
        access::owner_or_capable_or_eperm(&self.node(ino)?, cred)
    }

    /// Whether `cred` may make change `set` to inode `ino`, as Linux's
    /// setattr checks decide (truncate(2) by path for a size; chmod,
    /// chown, utimensat, chattr; EPERM, EACCES or EROFS), and the change
    /// to make in its place: `set` with the set-ID bits Linux clears (the
    /// set-group-ID bit of a chmod by a caller outside the group without
    /// CAP_FSETID; set-user-ID and, by the same rule or with group
    /// execution, set-group-ID of a file given to another owner or group).
    /// Pass the change returned to [`Fs::setattr`].
    pub fn setattr_allowed(&self, ino: Ino, cred: &Cred, set: &SetAttr) -> Result<SetAttr> {
        setattr::allowed(&self.node(ino)?, cred, set, self.read_only)
    }

    /// Whether `cred` may read (getxattr) or, with `writing`, set or remove
    /// extended attribute `name` of inode `ino` (Linux's
    /// `xattr_permission` and the ACL and capability rules beside it):
    /// EROFS, and EPERM on an immutable or append-only inode, to write;
    /// `trusted.` needs CAP_SYS_ADMIN (EPERM, or ENODATA to read);
    /// `security.` needs CAP_SYS_ADMIN to write (`security.capability`
    /// CAP_SETFCAP); an ACL is set by the owner or CAP_FOWNER; `user.` is
    /// for regular files and directories (EPERM, or ENODATA to read), and
    /// in a sticky directory written by its owner or CAP_FOWNER only;
    /// `user.` and unknown names need read or write permission (EACCES).
    /// listxattr needs no permission.
    pub fn xattr_allowed(&self, ino: Ino, cred: &Cred, name: &[u8], writing: bool) -> Result<()> {
        access::xattr_allowed(&self.node(ino)?, cred, name, writing, self.read_only)
    }

    /// listxattr(2)'s answer for `cred`: the NUL-terminated `names` of
    /// `ino` less the `trusted.` ones it may not read (Linux lists those
    /// to CAP_SYS_ADMIN only). `cred` is asked for only when there are
    /// such names (a FUSE caller's is read from /proc).
    pub fn visible_xattrs(&self, ino: Ino, names: Vec<u8>, cred: impl FnOnce() -> Cred) -> Vec<u8> {
        let trusted = |n: &[u8]| n.strip_suffix(&[0]).unwrap_or(n).starts_with(b"trusted.");
        if !names.split_inclusive(|&b| b == 0).any(trusted) {
            return names;
        }
        let cred = cred();
        names
            .split_inclusive(|&b| b == 0)
            .filter(|n| {
                !trusted(n)
                    || self
                        .xattr_allowed(ino, &cred, n.strip_suffix(&[0]).unwrap_or(n), false)
                        .is_ok()
            })
            .flatten()
            .copied()
            .collect()
    }
}
