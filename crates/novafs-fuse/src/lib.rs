//! The FUSE front end of novafs: a thin adapter that turns each kernel
//! request into one [`novafs::Fs`] call and the result into one reply
//! (DESIGN.md §2, layer 9).
//!
//! [`FuseFs`] answers each request (`handler`, over the crate's own wire
//! protocol in `wire`; `adapter` is its `fuser::Filesystem` face while the
//! session still runs on fuser); [`Mounted`] mounts it and
//! serves it with one worker per core, each on its own cloned `/dev/fuse`
//! descriptor. Daemonizing, signals and the command line live in
//! `novafs-cli`; this crate owns only the FUSE protocol side.
//!
//! The adapter adds no state of its own beyond the open-handle counts the
//! core already keeps: inode numbers are the core's, readdir offsets are the
//! core's (stable while the directory changes), and errors are the core's
//! errno values unchanged.

// Unsafe code only where the kernel's transports need it (ioctl, io_uring
// buffers the kernel writes, descriptors received over a socket).
#![deny(unsafe_code)]

mod adapter;
mod caller;
#[allow(dead_code)] // used once the session moves off fuser
mod handler;
#[allow(dead_code)] // used once the session moves off fuser
mod serve;
#[cfg(test)]
mod serve_tests;
mod session;
#[allow(dead_code)] // used once the session moves off fuser
mod stats;
#[allow(dead_code, unsafe_code)] // dead code: used once the session moves off fuser
mod transport;
mod wire;

pub use handler::{FuseFs, ATTR_TTL};
pub use session::{MountConfig, MountError, Mounted, Unmounter};
