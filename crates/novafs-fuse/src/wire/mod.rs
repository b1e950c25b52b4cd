//! The FUSE wire protocol as the kernel speaks it (`include/uapi/linux/fuse.h`):
//! [`abi`] declares its structures once, [`request`] parses what the kernel
//! sends into typed operations, [`reply`] builds the answers. Nothing here
//! knows how the bytes travel (that is `transport`) or what novafs does with
//! them (that is `handler`).

// Used once the session moves off fuser.
#[allow(dead_code)]
pub(crate) mod abi;
pub(crate) mod abi_uring;
// Used once the session moves off fuser.
#[allow(dead_code)]
pub(crate) mod reply;
// Used once the session moves off fuser.
#[allow(dead_code)]
pub(crate) mod request;
