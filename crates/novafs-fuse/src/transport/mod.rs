//! How requests travel between the kernel and the daemon: `dev` reads and
//! writes `/dev/fuse` (one cloned descriptor per worker), `uring` uses FUSE
//! over io_uring (Linux 6.14+, per-CPU queues). Both hand each request to
//! one [`Handler`] and frame its [`Answer`]; neither knows the operations.

use crate::wire::abi::InHeader;

/// One request as a transport delivers it.
pub(crate) struct Incoming<'a> {
    pub header: &'a InHeader,
    /// The bytes after the header. `/dev/fuse` delivers them in one piece
    /// ([`Args::Whole`]); io_uring has the kernel split off the operation's
    /// fixed-size argument struct ([`Args::Split`]).
    pub args: Args<'a>,
}

pub(crate) enum Args<'a> {
    Whole(&'a [u8]),
    Split { op: &'a [u8], payload: &'a [u8] },
}

/// What the handler answers.
pub(crate) enum Answer {
    /// Success with this many bytes of reply payload, written at the start
    /// of the buffer the transport passed in.
    Reply(usize),
    /// Failure: a positive errno.
    Error(i32),
    /// No reply at all (FORGET, BATCH_FORGET and INTERRUPT get none).
    Nothing,
}

/// Answers requests; shared by all workers of all transports.
pub(crate) trait Handler: Send + Sync {
    /// Answers `req`, writing any reply payload into `out` (at least the
    /// negotiated max_write plus one page long).
    fn handle(&self, req: &Incoming<'_>, out: &mut [u8]) -> Answer;

    /// The connection is up, before any request: `notifier` reaches the
    /// kernel's caches from now on.
    fn connected(&self, _notifier: dev::Notifier) {}
}

pub(crate) mod dev;
pub(crate) mod fusermount;
pub(crate) mod uring;
