//! Snapshots (NOVA-Fortis §3): epochs, the cut and the persistent list
//! (layer 5), and the background reclaimer of deleted snapshots (layer 8,
//! Fortis §3.2).

pub(crate) mod reclaim;
pub(crate) mod snapshot;
