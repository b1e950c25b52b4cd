//! The FUSE front end of novafs: a thin adapter that turns each kernel
//! request into one [`novafs::Fs`] call and the result into one reply
//! (DESIGN.md §2, layer 9).
//!
//! The layers, each a module: `wire` declares the kernel's FUSE structures
//! and parses and builds messages; `transport` carries them (`/dev/fuse`
//! workers on cloned descriptors, or FUSE over io_uring with a queue per
//! CPU); `handler` ([`FuseFs`]) answers each request with one `Fs` call;
//! `serve` mounts, answers INIT and runs the workers; [`Mounted`] is the
//! face the command line uses; `stats` times requests. Daemonizing, signals and the command line live in
//! `novafs-cli`; this crate owns only the FUSE protocol side.
//!
//! The adapter adds no state of its own beyond the open-handle counts the
//! core already keeps: inode numbers are the core's, readdir offsets are the
//! core's (stable while the directory changes), and errors are the core's
//! errno values unchanged.

// Unsafe code only where the kernel's transports need it (ioctl, io_uring
// buffers the kernel writes, descriptors received over a socket).
#![deny(unsafe_code)]

mod caller;
mod handler;
mod serve;
#[cfg(test)]
mod serve_tests;
mod session;
mod stats;
#[allow(unsafe_code)]
mod transport;
mod wire;

pub use handler::{FuseFs, ATTR_TTL};
pub use session::{MountConfig, MountError, MountStats, Mounted, Transport, Unmounter};
