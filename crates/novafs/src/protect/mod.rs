//! Layers 12–13, protection at work: scrubbing everything redundancy
//! protects while mounted (Fortis §4.2, §4.3), and fault injection into
//! unmounted images to see what detection and repair make of it.

#[cfg(feature = "tools")]
pub mod inject;
pub(crate) mod scrub;
