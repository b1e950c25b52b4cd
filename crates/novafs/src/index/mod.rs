//! Layer 5, what DRAM keeps of the media (NOVA §4.7: rebuilt from the
//! logs): directory entries, a file's page map, extended attributes, and
//! the inode tables' free slots.

pub(crate) mod dir;
// Shown by the probe feature: see `mod alloc` in lib.rs.
#[cfg_attr(not(feature = "probe"), allow(unreachable_pub))]
pub(crate) mod itable;
pub(crate) mod pagemap;
pub(crate) mod xattrmap;
