//! The `/dev/fuse` transport: each worker reads whole requests from its own
//! descriptor (cloned from the session's with FUSE_DEV_IOC_CLONE, so the
//! kernel keeps a processing queue per descriptor), calls the handler, and
//! writes the reply with one `writev`. Also the way notifications reach
//! the kernel, for io_uring cannot carry them.

use std::fs::OpenOptions;
use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use nix::errno::Errno;
use zerocopy::{FromBytes, IntoBytes};

use super::{Answer, Args, Handler, Incoming};
use crate::stats::{Spans, Stats};
use crate::wire::abi::{InHeader, OutHeader};

// FUSE_DEV_IOC_CLONE = _IOR(229, 0, uint32_t): attaches a fresh /dev/fuse
// descriptor to the connection of the one whose number it reads.
nix::ioctl_read!(fuse_dev_ioc_clone, 229, 0, u32);

/// A descriptor of the same connection as `session`, with its own queue of
/// requests being processed.
pub(crate) fn clone_fd(session: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let dev = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/dev/fuse")?;
    let mut source = u32::try_from(session.as_raw_fd()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: the ioctl reads one u32 through the pointer, which points at
    // a live local for the whole call; `dev` is an open descriptor.
    unsafe { fuse_dev_ioc_clone(dev.as_raw_fd(), &mut source) }?;
    Ok(dev.into())
}

/// Reads one request into `buf`: its length, or `None` once the connection
/// is gone (unmounted or aborted).
pub(crate) fn receive(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Option<usize>> {
    loop {
        match nix::unistd::read(fd, buf) {
            Ok(n) => return Ok(Some(n)),
            // A signal, or the request was taken by another worker.
            Err(Errno::EINTR | Errno::EAGAIN) => continue,
            Err(Errno::ENODEV) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Splits a request read from the device into its header and the bytes
/// after it; `None` if it is shorter than its header says.
pub(crate) fn parse(request: &[u8]) -> Option<(InHeader, &[u8])> {
    let (header, rest) = InHeader::read_from_prefix(request).ok()?;
    let args_len = (header.len as usize).checked_sub(size_of::<InHeader>())?;
    Some((header, rest.get(..args_len)?))
}

/// Frames `answer` (its payload at the start of `out`) as the reply to
/// request `unique` and writes it. An answer longer than `out` is a bug in
/// the handler: the kernel gets EIO rather than a short reply.
pub(crate) fn send(fd: BorrowedFd<'_>, unique: u64, answer: Answer, out: &[u8]) -> io::Result<()> {
    let (error, payload) = match answer {
        Answer::Reply(n) => match out.get(..n) {
            Some(payload) => (0, payload),
            None => {
                tracing::error!(unique, n, "reply longer than the reply buffer");
                (-libc::EIO, &[][..])
            }
        },
        Answer::Error(errno) => (-errno, &[][..]),
        Answer::Nothing => return Ok(()),
    };
    match write_message(fd, error, unique, payload) {
        // The kernel refused the reply as malformed: answer EIO, so that
        // the caller does not wait forever.
        Err(e) if e.raw_os_error() != Some(libc::ENODEV) && (error, payload.len()) != (-libc::EIO, 0) => {
            tracing::error!(unique, error, len = payload.len(), cause = %e, "reply refused; answering EIO");
            write_message(fd, -libc::EIO, unique, &[])
        }
        sent => sent,
    }
}

/// Writes one reply or notification: header and payload in one `writev`,
/// which the kernel requires (a reply is one write).
fn write_message(fd: BorrowedFd<'_>, error: i32, unique: u64, payload: &[u8]) -> io::Result<()> {
    let header = OutHeader {
        len: u32::try_from(size_of::<OutHeader>() + payload.len()).map_err(|_| io::Error::from(Errno::E2BIG))?,
        error,
        unique,
    };
    let iov = [IoSlice::new(header.as_bytes()), IoSlice::new(payload)];
    loop {
        match nix::sys::uio::writev(fd, &iov) {
            Ok(_) => return Ok(()),
            Err(Errno::EINTR) => continue,
            // The request was interrupted and is gone, or (a notification)
            // the kernel has nothing cached to drop: nobody waits for it.
            Err(Errno::ENOENT) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Serves requests from `fd` until the connection goes away.
fn serve(fd: BorrowedFd<'_>, handler: &dyn Handler, stats: &Stats, buf_size: usize) -> io::Result<()> {
    let mut request = vec![0u8; buf_size];
    let mut out = vec![0u8; buf_size];
    let mut idle_since = stats.now();
    loop {
        let Some(n) = receive(fd, &mut request)? else {
            return Ok(());
        };
        let arrived = stats.now();
        let Some((header, args)) = request.get(..n).and_then(parse) else {
            tracing::error!(n, "malformed request from /dev/fuse");
            continue;
        };
        let answer = handler.handle(
            &Incoming {
                header: &header,
                args: Args::Whole(args),
            },
            &mut out,
        );
        let handled = stats.now();
        match send(fd, header.unique, answer, &out) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Ok(()),
            Err(e) => return Err(e),
        }
        let sent = stats.now();
        let spans = match (idle_since, arrived, handled, sent) {
            (Some(i), Some(a), Some(h), Some(s)) => Some(Spans {
                wait: a - i,
                handle: h - a,
                reply: s - h,
            }),
            _ => None,
        };
        stats.record(header.opcode, spans);
        idle_since = sent;
    }
}

/// Starts `threads` workers on the connection of `session`, each on its
/// own cloned descriptor where /dev/fuse can be opened (an unprivileged
/// user of fusermount3 may not: then they share the session's), with
/// request and reply buffers of `buf_size` bytes. Each ends when the
/// connection does.
pub(crate) fn spawn_workers(
    session: &Arc<OwnedFd>,
    threads: usize,
    buf_size: usize,
    handler: &Arc<dyn Handler>,
    stats: &Arc<Stats>,
) -> io::Result<Vec<JoinHandle<io::Result<()>>>> {
    (0..threads.max(1))
        .map(|i| {
            let fd = match clone_fd(session.as_fd()) {
                Ok(own) => Arc::new(own),
                Err(e) => {
                    tracing::debug!(error = %e, "cannot clone /dev/fuse; the worker shares the session's");
                    session.clone()
                }
            };
            let (handler, stats) = (handler.clone(), stats.clone());
            thread::Builder::new()
                .name(format!("fuse-dev-{i}"))
                .spawn(move || serve(fd.as_fd(), &*handler, &stats, buf_size))
        })
        .collect()
}

/// Sends notifications (cache invalidations) to the kernel through
/// /dev/fuse, the only way they travel with either transport.
pub(crate) struct Notifier {
    dev: Arc<OwnedFd>,
}

impl Notifier {
    pub(crate) fn new(dev: Arc<OwnedFd>) -> Notifier {
        Notifier { dev }
    }

    /// Sends notification `code` (`FUSE_NOTIFY_INVAL_INODE`, ...) with its
    /// payload struct's bytes.
    pub(crate) fn notify(&self, code: i32, payload: &[u8]) -> io::Result<()> {
        write_message(self.dev.as_fd(), code, 0, payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(len: u32, extra: usize) -> Vec<u8> {
        let header = InHeader {
            len,
            opcode: 1,
            unique: 7,
            nodeid: 1,
            ..Default::default()
        };
        let mut bytes = header.as_bytes().to_vec();
        bytes.extend((0..extra).map(|i| i as u8));
        bytes
    }

    #[test]
    fn parse_takes_exactly_the_length_the_header_gives() {
        let bytes = request(44, 6);
        let (header, args) = parse(&bytes).expect("well formed");
        assert_eq!((header.unique, args), (7, &[0u8, 1, 2, 3][..]));
    }

    #[test]
    fn parse_refuses_requests_shorter_than_their_header_says() {
        assert!(parse(&request(50, 4)).is_none());
        assert!(parse(&request(39, 4)).is_none());
        assert!(parse(&request(40, 0)[..30]).is_none());
    }
}
