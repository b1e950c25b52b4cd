//! Extended attributes and POSIX ACLs (FORMAT.md "Extended attributes").
//!
//! An attribute change is one xattr entry in the inode's own log,
//! committed like any single-inode update (R1, then the tail store, R5):
//! atomic and durable when the call returns, replayed at mount, and
//! rewritten by thorough GC like the rest of the inode's state. A value too
//! large for its entry goes to data pages written like file data (strip
//! checksums and parity with Fortis data protection), and the entry keeps
//! the value's CRC32C: a damaged value is repaired or is EIO, never
//! returned wrong.
//!
//! POSIX ACLs are the two `system.posix_acl_*` attributes in the kernel's
//! xattr format. What FUSE_POSIX_ACL leaves to the file system is done
//! here, as ext4 does it: setting the access ACL sets the mode's
//! permission bits in the same commit (and an ACL the mode alone expresses
//! is not kept), chmod rewrites the access ACL in the same commit, and a
//! new node inherits its directory's default ACL (`inherit`). Who may set
//! which namespace (owner for ACLs, CAP_SYS_ADMIN for `trusted.`) is the
//! caller's to check: the kernel does for FUSE, `access` for the others.

use crate::alloc::{Budget, Reserved};
use crate::commit::{self, Ctx};
use crate::error::{corrupt, Error, Result};
use crate::gc;
use crate::inode::{setattr_entry, Attr, FileType, InodeState};
use crate::layout::{PAGE_SIZE, XATTR_LIST_MAX, XATTR_NAME_MAX, XATTR_SIZE_MAX};
use crate::log::Entry;
use crate::xattrmap::{self, fits_inline, Value};

/// setxattr(2) flags.
pub const XATTR_CREATE: u32 = 1;
pub const XATTR_REPLACE: u32 = 2;
/// The access and default ACLs' attribute names.
pub(crate) const ACL_ACCESS: &[u8] = b"system.posix_acl_access";
pub(crate) const ACL_DEFAULT: &[u8] = b"system.posix_acl_default";

/// The namespaces kept, each needing a non-empty rest of the name.
const PREFIXES: [&[u8]; 3] = [b"user.", b"trusted.", b"security."];

/// ERANGE for an empty or too long name (as Linux), EOPNOTSUPP for a
/// namespace novafs does not keep, EINVAL for a bare prefix.
fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.len() > XATTR_NAME_MAX {
        return Err(Error::Range);
    }
    if name.contains(&0) {
        return Err(Error::Invalid("attribute name with a NUL byte"));
    }
    if name == ACL_ACCESS || name == ACL_DEFAULT {
        return Ok(());
    }
    match PREFIXES.iter().find(|p| name.starts_with(p)) {
        Some(p) if name.len() == p.len() => Err(Error::Invalid("attribute name without a name after its prefix")),
        Some(_) => Ok(()),
        None => Err(Error::NotSupported("this extended attribute namespace")),
    }
}

/// Linux allows `user.` attributes on regular files and directories only.
fn user_allowed(a: &Attr, name: &[u8]) -> bool {
    !name.starts_with(b"user.") || matches!(a.kind, FileType::RegularFile | FileType::Directory)
}

/// The value of attribute `name` of `st`.
pub(crate) fn get(ctx: &Ctx, st: &InodeState, name: &[u8]) -> Result<Vec<u8>> {
    check_name(name)?;
    if !user_allowed(&st.meta.attr, name) {
        return Err(Error::NoData);
    }
    let v = st.meta.xattrs.get(name).ok_or(Error::NoData)?;
    read_value(ctx, st.meta.attr.ino, v)
}

/// Every attribute name of `st`, each followed by a NUL (listxattr(2)).
pub(crate) fn list(st: &InodeState) -> Vec<u8> {
    let mut out = Vec::with_capacity(st.meta.xattrs.list_len());
    for (name, _) in st.meta.xattrs.iter() {
        out.extend_from_slice(name);
        out.push(0);
    }
    out
}

fn read_value(ctx: &Ctx, ino: u64, v: &Value) -> Result<Vec<u8>> {
    let (pages, len, crc) = match v {
        Value::Inline(bytes) => return Ok(bytes.to_vec()),
        Value::Pages { pages, len, crc } => (pages, len, crc),
    };
    let mut out = vec![0u8; *len as usize];
    let read = (|| -> Result<()> {
        for (chunk, &page) in out.chunks_mut(PAGE_SIZE as usize).zip(pages.iter()) {
            ctx.read_block(page, 0, chunk)?;
        }
        if crc32c::crc32c(&out) != *crc {
            return Err(corrupt!(
                Xattr,
                ino = ino,
                "an extended attribute value of inode {ino} fails its checksum"
            ));
        }
        Ok(())
    })();
    if let Err(e) = &read {
        ctx.health().lost(ino, e);
    }
    read.map(|_| out)
}

/// Entries of one attribute change, and the data pages their values took:
/// given back unless the entries are committed.
pub(crate) struct Staged<'a> {
    entries: Vec<Entry>,
    pages: Reserved<'a>,
}

impl<'a> Staged<'a> {
    /// No change yet.
    pub(crate) fn new(ctx: &'a Ctx) -> Staged<'a> {
        Staged {
            entries: Vec::new(),
            pages: Reserved::empty(ctx.alloc()),
        }
    }

    /// Adds the entry setting `name` to `value`, or removing it (None).
    /// A value too large for its entry is written to fresh data pages.
    fn put(&mut self, ctx: &'a Ctx, name: &[u8], value: Option<&[u8]>, ctime: i64) -> Result<()> {
        let value = match value {
            None => None,
            Some(v) if fits_inline(name.len(), v.len()) => Some(Value::Inline(v.into())),
            Some(v) => Some(self.store_pages(ctx, v)?),
        };
        self.entries
            .push(xattrmap::entry(ctx.epoch(), name, value.as_ref(), ctime));
        Ok(())
    }

    /// Writes `value` to fresh data pages (durable with the commit's R1
    /// fence, like file data).
    fn store_pages(&mut self, ctx: &'a Ctx, value: &[u8]) -> Result<Value> {
        let npages = value.len().div_ceil(PAGE_SIZE as usize);
        let reserved = ctx.alloc().reserve(npages as u64, Budget::Normal)?;
        let pages: Box<[u64]> = reserved
            .extents()
            .iter()
            .flat_map(|e| (0..e.npages).map(move |i| e.off + i * PAGE_SIZE))
            .collect();
        self.pages.merge(reserved);
        let mut page = vec![0u8; PAGE_SIZE as usize];
        for (chunk, &block) in value.chunks(PAGE_SIZE as usize).zip(pages.iter()) {
            page[..chunk.len()].copy_from_slice(chunk);
            page[chunk.len()..].fill(0);
            ctx.put_block(block, &page)?;
        }
        Ok(Value::Pages {
            pages,
            len: value.len() as u32,
            crc: crc32c::crc32c(value),
        })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries and the reservation of their value pages, for a
    /// caller that commits them itself (its commit keeps the pages).
    pub(crate) fn into_parts(self) -> (Vec<Entry>, Reserved<'a>) {
        (self.entries, self.pages)
    }

    /// Commits the entries to `st`'s log (GC first) and publishes them;
    /// the value pages go back if either fails.
    fn commit(self, ctx: &Ctx, st: &mut InodeState) -> Result<()> {
        gc::make_room(ctx, st, &self.entries)?;
        commit::single_kept(ctx, st, Budget::Normal, &self.entries, self.pages)
    }
}

/// EPERM where chattr's immutable or append-only flag holds the inode.
fn check_changeable(st: &InodeState, name: &[u8]) -> Result<()> {
    st.meta.attr.check_changeable()?;
    if !user_allowed(&st.meta.attr, name) {
        return Err(Error::NotPermitted);
    }
    let kind = st.meta.attr.kind;
    if name.starts_with(b"system.") && kind == FileType::Symlink {
        return Err(Error::NotSupported("ACLs on a symlink"));
    }
    if name == ACL_DEFAULT && kind != FileType::Directory {
        return Err(Error::Access("a default ACL belongs to a directory"));
    }
    Ok(())
}

/// setxattr(2): sets attribute `name` of `st` to `value`; `flags` may ask
/// that it exist ([`XATTR_REPLACE`]) or not ([`XATTR_CREATE`]) already.
pub(crate) fn set(ctx: &Ctx, st: &mut InodeState, name: &[u8], value: &[u8], flags: u32, now: i64) -> Result<()> {
    // Linux's order: flags, the name's length, the value's, the namespace.
    if flags & !(XATTR_CREATE | XATTR_REPLACE) != 0 {
        return Err(Error::Invalid("unknown setxattr flags"));
    }
    if name.is_empty() || name.len() > XATTR_NAME_MAX {
        return Err(Error::Range);
    }
    if value.len() > XATTR_SIZE_MAX {
        return Err(Error::TooBig);
    }
    check_name(name)?;
    check_changeable(st, name)?;
    let exists = st.meta.xattrs.get(name).is_some();
    if flags & XATTR_CREATE != 0 && exists {
        return Err(Error::Exists);
    }
    if flags & XATTR_REPLACE != 0 && !exists {
        return Err(Error::NoData);
    }
    if !exists && st.meta.xattrs.list_len() + name.len() + 1 > XATTR_LIST_MAX {
        return Err(Error::NoSpace);
    }
    let mut staged = Staged::new(ctx);
    if name == ACL_ACCESS || name == ACL_DEFAULT {
        let acl = acl::Acl::parse(value)?;
        let mut a = st.meta.attr;
        a.ctime = now;
        // An empty ACL is its removal.
        let kept = match (&acl, name == ACL_ACCESS) {
            (None, _) => None,
            (Some(acl), true) => {
                let (perm, equivalent) = acl.mode(a.perm);
                a.perm = perm;
                (!equivalent).then_some(value)
            }
            (Some(_), false) => Some(value),
        };
        if kept.is_some() || exists {
            staged.put(ctx, name, kept, now)?;
        }
        if name == ACL_ACCESS {
            staged.entries.push(setattr_entry(ctx.epoch(), &a));
        }
    } else {
        staged.put(ctx, name, Some(value), now)?;
    }
    if staged.is_empty() {
        return Ok(()); // An empty default ACL where there was none.
    }
    staged.commit(ctx, st)
}

/// removexattr(2).
pub(crate) fn remove(ctx: &Ctx, st: &mut InodeState, name: &[u8], now: i64) -> Result<()> {
    check_name(name)?;
    check_changeable(st, name)?;
    if st.meta.xattrs.get(name).is_none() {
        return Err(Error::NoData);
    }
    let mut staged = Staged::new(ctx);
    staged.put(ctx, name, None, now)?;
    staged.commit(ctx, st)
}

/// The entry that keeps `st`'s access ACL in step with new permission
/// bits `perm` (chmod), for the same commit as the mode; empty without an
/// access ACL.
pub(crate) fn chmod<'a>(ctx: &'a Ctx, st: &InodeState, perm: u32, now: i64) -> Result<Staged<'a>> {
    let mut staged = Staged::new(ctx);
    if let Some(mut acl) = access_acl(ctx, st)? {
        acl.chmod(perm);
        staged.put(ctx, ACL_ACCESS, Some(&acl.encode()), now)?;
    }
    Ok(staged)
}

/// `st`'s access ACL, if it has one (a mode-equivalent ACL is never kept).
pub(crate) fn access_acl(ctx: &Ctx, st: &InodeState) -> Result<Option<acl::Acl>> {
    match st.meta.xattrs.get(ACL_ACCESS) {
        Some(v) => acl::Acl::parse(&read_value(ctx, st.meta.attr.ino, v)?),
        None => Ok(None),
    }
}

/// What a new node of `mode` (type and permission bits, as asked) made in
/// directory `dir` gets (posix_acl_create): with a default ACL there, the
/// mode it allows and the ACL entries the node inherits, the umask left
/// out; without, the mode less `umask`. Symlinks take neither.
pub(crate) fn inherit<'a>(
    ctx: &'a Ctx,
    dir: &InodeState,
    mode: u32,
    umask: u32,
    now: i64,
) -> Result<(u32, Staged<'a>)> {
    let mut staged = Staged::new(ctx);
    if mode & libc::S_IFMT == libc::S_IFLNK {
        return Ok((mode, staged));
    }
    let default = match dir.meta.xattrs.get(ACL_DEFAULT) {
        Some(v) => acl::Acl::parse(&read_value(ctx, dir.meta.attr.ino, v)?)?,
        None => None,
    };
    let Some(default) = default else {
        return Ok((mode & !(umask & 0o777), staged));
    };
    let mut access = default.clone();
    let (perm, equivalent) = access.create_masq(mode & 0o7777);
    // An error drops `staged`, which gives its pages back.
    if mode & libc::S_IFMT == libc::S_IFDIR {
        staged.put(ctx, ACL_DEFAULT, Some(&default.encode()), now)?;
    }
    if !equivalent {
        staged.put(ctx, ACL_ACCESS, Some(&access.encode()), now)?;
    }
    Ok(((mode & libc::S_IFMT) | perm, staged))
}

/// The kernel's POSIX ACL xattr format (linux/posix_acl_xattr.h): a
/// version word, then 8-byte entries (tag, permissions, id), and the
/// rules of fs/posix_acl.c that tie an ACL to the mode. Checking access
/// against an ACL is `access`'s, through [`acl::Acl::entries`].
pub(crate) mod acl {
    use crate::error::{Error, Result};

    const VERSION: u32 = 2;
    const USER_OBJ: u16 = 0x01;
    const USER: u16 = 0x02;
    const GROUP_OBJ: u16 = 0x04;
    const GROUP: u16 = 0x08;
    const MASK: u16 = 0x10;
    const OTHER: u16 = 0x20;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct Ace {
        tag: u16,
        perm: u16,
        id: u32,
    }

    #[derive(Clone, Debug, PartialEq, Eq)]
    pub(crate) struct Acl(Vec<Ace>);

    /// An entry's tag, with the id of a named entry.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(crate) enum Tag {
        UserObj,
        User(u32),
        GroupObj,
        Group(u32),
        Mask,
        Other,
    }

    const BAD: Error = Error::Invalid("not a valid POSIX ACL");

    impl Acl {
        /// Decodes and validates (posix_acl_valid's order: owner, named
        /// users, owning group, named groups, mask, other; a mask when
        /// any named entry is there). None for an ACL of no entries.
        pub(super) fn parse(v: &[u8]) -> Result<Option<Acl>> {
            if v.len() < 4 || !(v.len() - 4).is_multiple_of(8) || v[..4] != VERSION.to_le_bytes() {
                return Err(BAD);
            }
            let aces: Vec<Ace> = v[4..]
                .chunks_exact(8)
                .map(|c| Ace {
                    tag: u16::from_le_bytes([c[0], c[1]]),
                    perm: u16::from_le_bytes([c[2], c[3]]),
                    id: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
                })
                .collect();
            if aces.is_empty() {
                return Ok(None);
            }
            let mut state = USER_OBJ;
            let mut needs_mask = false;
            for a in &aces {
                if a.perm & !7 != 0 {
                    return Err(BAD);
                }
                state = match (a.tag, state) {
                    (USER_OBJ, USER_OBJ) => USER,
                    (USER, USER) | (GROUP, GROUP) => {
                        needs_mask = true;
                        state
                    }
                    (GROUP_OBJ, USER) => GROUP,
                    (MASK, GROUP) => OTHER,
                    (OTHER, OTHER) => 0,
                    (OTHER, GROUP) if !needs_mask => 0,
                    _ => return Err(BAD),
                };
            }
            if state != 0 {
                return Err(BAD);
            }
            Ok(Some(Acl(aces)))
        }

        /// The entries in order, each with its permission bits (rwx as
        /// 4, 2, 1). `parse` let only the six tags through.
        pub(crate) fn entries(&self) -> impl Iterator<Item = (Tag, u32)> + '_ {
            self.0.iter().map(|a| {
                let tag = match a.tag {
                    USER_OBJ => Tag::UserObj,
                    USER => Tag::User(a.id),
                    GROUP_OBJ => Tag::GroupObj,
                    GROUP => Tag::Group(a.id),
                    MASK => Tag::Mask,
                    _ => Tag::Other,
                };
                (tag, u32::from(a.perm))
            })
        }

        pub(super) fn encode(&self) -> Vec<u8> {
            let mut v = VERSION.to_le_bytes().to_vec();
            for a in &self.0 {
                v.extend_from_slice(&a.tag.to_le_bytes());
                v.extend_from_slice(&a.perm.to_le_bytes());
                v.extend_from_slice(&a.id.to_le_bytes());
            }
            v
        }

        /// posix_acl_equiv_mode: the permission bits this ACL gives `perm`
        /// (its set-ID and sticky bits kept), and whether the mode alone
        /// says all the ACL does.
        pub(super) fn mode(&self, perm: u32) -> (u32, bool) {
            let mut rwx = 0u32;
            let mut equivalent = true;
            for a in &self.0 {
                let p = u32::from(a.perm);
                match a.tag {
                    USER_OBJ => rwx |= p << 6,
                    GROUP_OBJ => rwx |= p << 3,
                    OTHER => rwx |= p,
                    MASK => {
                        rwx = (rwx & !0o070) | p << 3;
                        equivalent = false;
                    }
                    _ => equivalent = false,
                }
            }
            ((perm & !0o777) | rwx, equivalent)
        }

        /// posix_acl_chmod: the owner, mask (or owning group without one)
        /// and other entries take the new permission bits.
        pub(super) fn chmod(&mut self, perm: u32) {
            let has_mask = self.0.iter().any(|a| a.tag == MASK);
            for a in &mut self.0 {
                let bits = match a.tag {
                    USER_OBJ => perm >> 6,
                    GROUP_OBJ if !has_mask => perm >> 3,
                    MASK => perm >> 3,
                    OTHER => perm,
                    _ => continue,
                };
                a.perm = (bits & 7) as u16;
            }
        }

        /// posix_acl_create_masq: this (inherited) ACL masked by the
        /// requested `perm`, and the permission bits the node gets;
        /// whether the mode alone says all the ACL does.
        pub(super) fn create_masq(&mut self, perm: u32) -> (u32, bool) {
            let mut mode = perm;
            let mut equivalent = true;
            let mut group = None;
            let mut mask = None;
            for (i, a) in self.0.iter_mut().enumerate() {
                match a.tag {
                    USER_OBJ => {
                        a.perm &= ((mode >> 6) & 7) as u16;
                        mode &= (u32::from(a.perm) << 6) | !0o700;
                    }
                    OTHER => {
                        a.perm &= (mode & 7) as u16;
                        mode &= u32::from(a.perm) | !0o007;
                    }
                    GROUP_OBJ => group = Some(i),
                    MASK => {
                        mask = Some(i);
                        equivalent = false;
                    }
                    _ => equivalent = false,
                }
            }
            if let Some(i) = mask.or(group) {
                let a = &mut self.0[i];
                a.perm &= ((mode >> 3) & 7) as u16;
                mode &= (u32::from(a.perm) << 3) | !0o070;
            }
            (mode, equivalent)
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn acl(aces: &[(u16, u16, u32)]) -> Vec<u8> {
            Acl(aces.iter().map(|&(tag, perm, id)| Ace { tag, perm, id }).collect()).encode()
        }

        const U: u32 = u32::MAX;

        #[test]
        fn parse_checks_the_order_and_the_mask() {
            let plain = acl(&[(USER_OBJ, 6, U), (GROUP_OBJ, 4, U), (OTHER, 4, U)]);
            assert!(Acl::parse(&plain).unwrap().is_some());
            let named_no_mask = acl(&[(USER_OBJ, 6, U), (USER, 7, 1000), (GROUP_OBJ, 4, U), (OTHER, 4, U)]);
            assert!(Acl::parse(&named_no_mask).is_err());
            let out_of_order = acl(&[(GROUP_OBJ, 4, U), (USER_OBJ, 6, U), (OTHER, 4, U)]);
            assert!(Acl::parse(&out_of_order).is_err());
            let bad_perm = acl(&[(USER_OBJ, 8, U), (GROUP_OBJ, 4, U), (OTHER, 4, U)]);
            assert!(Acl::parse(&bad_perm).is_err());
            assert!(Acl::parse(&[2, 0, 0, 0]).unwrap().is_none());
            assert!(Acl::parse(&[1, 0, 0, 0]).is_err());
        }

        #[test]
        fn mode_chmod_and_inheritance_follow_the_kernel() {
            let full = acl(&[
                (USER_OBJ, 7, U),
                (USER, 6, 1001),
                (GROUP_OBJ, 5, U),
                (MASK, 6, U),
                (OTHER, 1, U),
            ]);
            let mut a = Acl::parse(&full).unwrap().unwrap();
            // The mask gives the group bits; set-ID bits stay.
            assert_eq!(a.mode(0o4000), (0o4761, false));
            a.chmod(0o750);
            assert_eq!(a.mode(0), (0o750, false));
            assert_eq!(a.0[2].perm, 5, "the owning group entry is left alone under a mask");
            // A new file asking 0o666 from this default ACL.
            let mut inherited = Acl::parse(&full).unwrap().unwrap();
            assert_eq!(inherited.create_masq(0o666), (0o660, false));
            assert_eq!(inherited.0[0].perm, 6);
            assert_eq!(inherited.0[3].perm, 6);
            assert_eq!(inherited.0[4].perm, 0);
            let plain = acl(&[(USER_OBJ, 7, U), (GROUP_OBJ, 5, U), (OTHER, 5, U)]);
            assert_eq!(Acl::parse(&plain).unwrap().unwrap().create_masq(0o777), (0o755, true));
        }
    }
}
