//! Layers 11–15, whole images: mount, clean unmount and the crash scan
//! (NOVA §4.7), an inode's names found by walking the tree, formatting, the offline check, and `tune`'s rebuilding of
//! an image with other features.

#[cfg(feature = "tools")]
pub mod fsck;
pub(crate) mod mkfs;
pub(crate) mod paths;
pub(crate) mod recovery;
#[cfg(feature = "tools")]
pub mod tune;
