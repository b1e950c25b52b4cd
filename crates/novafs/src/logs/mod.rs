//! Layers 3–4 and GC: the per-shard fine-grained journals (NOVA §4.2;
//! fine-grained journaling §III), the per-inode logs with their tail-store
//! commit (NOVA §3, §4.1), and log garbage collection (NOVA §4.6).

pub(crate) mod gc;
pub(crate) mod journal;
pub(crate) mod log;
