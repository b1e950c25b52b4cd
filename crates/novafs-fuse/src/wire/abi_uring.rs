//! The kernel's FUSE-over-io_uring structures (`include/uapi/linux/fuse.h`,
//! protocol 7.42, as Linux 6.14–6.18 implement it in
//! `fs/fuse/dev_uring.c`), each declared once, `#[repr(C)]`, with sizes and
//! the offsets the kernel reads checked at compile time. Newer kernels grow
//! `fuse_uring_cmd_req` (buffer rings, ADD_QUEUE); the fields here are the
//! ones 6.18 reads, and the rest of the 80-byte command area stays zero.

use std::mem::offset_of;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `enum fuse_uring_cmd`, the `cmd_op` of an `IORING_OP_URING_CMD` SQE.
/// Hand an entry's buffers to the kernel; completes with the first request.
pub(crate) const FUSE_IO_URING_CMD_REGISTER: u32 = 1;
/// Commit the reply in the entry's buffers and wait for the next request.
pub(crate) const FUSE_IO_URING_CMD_COMMIT_AND_FETCH: u32 = 2;

/// `FUSE_URING_IN_OUT_HEADER_SZ`: room for the in or out header.
pub(crate) const URING_IN_OUT_HEADER_SZ: usize = 128;
/// `FUSE_URING_OP_IN_OUT_SZ`: room for the operation's fixed argument.
pub(crate) const URING_OP_IN_OUT_SZ: usize = 128;

/// `struct fuse_uring_ent_in_out`: per-entry bookkeeping the kernel and the
/// daemon exchange in the header buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub(crate) struct UringEntInOut {
    pub flags: u64,
    /// The request's unique id; echoed in `UringCmdReq::commit_id` when
    /// committing its reply.
    pub commit_id: u64,
    /// Bytes used in the payload buffer: the request's arguments after the
    /// fixed one on fetch, the reply's payload on commit.
    pub payload_sz: u32,
    pub padding: u32,
    pub reserved: u64,
}

/// `struct fuse_uring_req_header`: the first buffer (`iov[0]`) of an entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub(crate) struct UringReqHeader {
    /// `fuse_in_header` on fetch, `fuse_out_header` on commit.
    pub in_out: [u8; URING_IN_OUT_HEADER_SZ],
    /// The operation's fixed argument struct (its `in_args[0]`).
    pub op_in: [u8; URING_OP_IN_OUT_SZ],
    pub ent_in_out: UringEntInOut,
}

/// `struct fuse_uring_cmd_req`: the start of the SQE128's 80-byte command
/// area.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub(crate) struct UringCmdReq {
    pub flags: u64,
    /// 0 for REGISTER; the request's `commit_id` for COMMIT_AND_FETCH.
    pub commit_id: u64,
    /// The queue, i.e. the CPU whose requests the entry serves.
    pub qid: u16,
    pub padding: [u8; 6],
}

const _: () = assert!(size_of::<UringEntInOut>() == 32);
const _: () = assert!(offset_of!(UringEntInOut, commit_id) == 8);
const _: () = assert!(offset_of!(UringEntInOut, payload_sz) == 16);
const _: () = assert!(size_of::<UringReqHeader>() == 288);
const _: () = assert!(offset_of!(UringReqHeader, op_in) == 128);
const _: () = assert!(offset_of!(UringReqHeader, ent_in_out) == 256);
const _: () = assert!(size_of::<UringCmdReq>() == 24);
const _: () = assert!(offset_of!(UringCmdReq, qid) == 16);
