//! Layers 9–13, the operations: copy-on-write file data (NOVA §4.4),
//! relaxed mode's in-place changes (Fortis §4.6), extended attributes and ACLs, the namespace (NOVA §4.3), who may do
//! what, DAX mmap (Fortis §2, §3.3), and the public thread-safe API over
//! them all.

pub(crate) mod access;
pub(crate) mod file;
pub mod fs;
pub(crate) mod mmap;
pub(crate) mod mmap_atomic;
pub(crate) mod namespace;
pub(crate) mod relaxed;
pub(crate) mod setattr;
pub(crate) mod xattr;
