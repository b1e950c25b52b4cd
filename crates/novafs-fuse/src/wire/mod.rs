//! The FUSE wire protocol as the kernel speaks it (`include/uapi/linux/fuse.h`):
//! [`abi`] declares its structures once, [`request`] parses what the kernel
//! sends into typed operations, [`reply`] builds the answers. Nothing here
//! knows how the bytes travel (that is `transport`) or what novafs does with
//! them (that is `handler`).

// The kernel's whole ABI, declared once: not every code is answered.
#[allow(dead_code)]
pub(crate) mod abi;
pub(crate) mod abi_uring;
pub(crate) mod reply;
pub(crate) mod request;
