//! Layers 6–8, inodes in DRAM: an inode's state replayed from its log
//! (NOVA §4.7), the shared context and the commit paths that alone make
//! the proofs publishing and freeing need, and the inode cache.

pub(crate) mod cache;
pub(crate) mod commit;
pub(crate) mod inode;
