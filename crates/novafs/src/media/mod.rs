//! Layers 1–2, the media and its redundancy: every on-media structure
//! (`layout`, FORMAT.md), the superblock and its replica (NOVA §4.1,
//! Fortis §4.2), the mirroring view metadata is written through (Fortis
//! §4.2, §4.4), data checksums and parity (Fortis §4.3), the counters
//! of what redundancy repaired and what was lost, and the consistency
//! mode the superblock records (Fortis §4.6).

pub(crate) mod consistency;
#[cfg(feature = "tools")]
pub(crate) mod geometry;
pub(crate) mod health;
// Every on-media structure: the crate's own, and the probe window's.
#[cfg_attr(not(feature = "probe"), allow(unreachable_pub))]
pub(crate) mod layout;
// Shown by the probe feature: see `mod alloc` in lib.rs.
#[cfg_attr(not(feature = "probe"), allow(unreachable_pub))]
pub(crate) mod replica;
#[cfg_attr(not(feature = "probe"), allow(unreachable_pub))]
pub(crate) mod strips;
#[cfg_attr(not(feature = "probe"), allow(unreachable_pub))]
pub(crate) mod superblock;
