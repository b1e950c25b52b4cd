//! Layer 0, utilities every layer may use: the one error type, a hasher
//! for trusted integer keys, time as the file system keeps it, the
//! core's locks with their one order, and the option structs' setters.

pub mod error;
pub(crate) mod hash;
pub(crate) mod lock;
pub(crate) mod setters;
pub mod time;
