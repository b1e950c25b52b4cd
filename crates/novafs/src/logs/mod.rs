//! Layers 3–4 and GC: the per-shard fine-grained journals (NOVA §4.2;
//! fine-grained journaling §III), the per-inode logs with their tail-store
//! commit (NOVA §3, §4.1), and log garbage collection (NOVA §4.6).

pub(crate) mod gc;
// Shown by the probe feature: see `mod alloc` in lib.rs.
#[cfg_attr(not(feature = "probe"), allow(unreachable_pub))]
pub(crate) mod journal;
#[cfg_attr(not(feature = "probe"), allow(unreachable_pub))]
pub(crate) mod log;
