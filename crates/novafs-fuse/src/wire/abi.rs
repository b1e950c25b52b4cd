//! The kernel's FUSE structures, each declared once, `#[repr(C)]`, with its
//! size checked at compile time against `include/uapi/linux/fuse.h`.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `struct fuse_in_header`: opens every request.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub(crate) struct InHeader {
    /// Length of the whole request, this header included.
    pub len: u32,
    pub opcode: u32,
    /// The request's id, echoed in the reply (0 never comes from the kernel).
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    /// Length of the extensions after the arguments, in 8-byte units.
    pub total_extlen: u16,
    pub padding: u16,
}

/// `struct fuse_out_header`: opens every reply and notification.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub(crate) struct OutHeader {
    /// Length of the whole reply, this header included.
    pub len: u32,
    /// 0 or a negative errno; for a notification (unique 0) its code.
    pub error: i32,
    pub unique: u64,
}

const _: () = assert!(size_of::<InHeader>() == 40);
const _: () = assert!(size_of::<OutHeader>() == 16);
