//! FUSE over io_uring, as Linux 6.14–6.18 implement it (`fs/fuse/dev_uring.c`,
//! protocol 7.42). The kernel keeps one queue per possible CPU and puts a
//! request on the queue of the CPU its caller runs on
//! (`fuse_uring_task_to_queue`: `task_cpu(current)`). The daemon hands each
//! queue a number of entries, each a header buffer (`fuse_uring_req_header`)
//! and a payload buffer of at least the negotiated maximum, with
//! FUSE_IO_URING_CMD_REGISTER; an entry's command completes when a request
//! has been copied into its buffers, and FUSE_IO_URING_CMD_COMMIT_AND_FETCH
//! returns the reply from the same buffers and waits for the next request,
//! one system call per round trip instead of a read and a write.
//!
//! What the kernel requires and does, in its source:
//! - the ring is made with SQE128 (the command lives in the SQE's 80-byte
//!   area) and registration is refused before INIT is answered (EAGAIN) or
//!   unless the INIT reply carried FUSE_OVER_IO_URING;
//! - the ring becomes "ready" only when every possible CPU's queue has an
//!   entry registered; from then on requests go through the queues, and
//!   until then (once INIT accepted io_uring) they wait. A failed REGISTER
//!   turns io_uring off for the connection (`fc->io_uring = 0`) and the
//!   waiting requests go to /dev/fuse;
//! - FORGET, BATCH_FORGET and INTERRUPT still travel through /dev/fuse, and
//!   so do notifications (a reply with unique 0 is refused on the ring), so
//!   a /dev/fuse worker always runs beside the queues;
//! - on unmount or abort the kernel completes every entry it holds with
//!   ENOTCONN and refuses further commits with it; a queue's thread ends
//!   when all its entries are back.
//!
//! One thread per queue, pinned to that queue's CPU: the caller and the
//! thread serving it share a CPU and its caches, and a round trip is a
//! switch between two tasks on one CPU rather than a wake-up across CPUs.
//!
//! Order: a queue's requests sit on a FIFO list (`fuse_req_queue`), go to
//! entries in that order, complete in that order on the ring's completion
//! queue, and one thread handles them one after another in that order, so
//! requests from one CPU are never reordered. Requests for one inode from
//! different CPUs may be in two queues at once, exactly as two /dev/fuse
//! workers may hold them at once: the kernel serialises what must not
//! overlap (the inode lock across a write, a setattr, a directory change)
//! before sending, and novafs's per-inode locks order the rest.

use std::alloc::Layout;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use super::{Answer, Args, Handler, Incoming};
use crate::stats::{Spans, Stats};
use crate::wire::abi::{InHeader, OutHeader};
use crate::wire::abi_uring::{
    UringCmdReq, UringReqHeader, FUSE_IO_URING_CMD_COMMIT_AND_FETCH, FUSE_IO_URING_CMD_REGISTER,
};

/// A completion: the entry (user_data) and the command's result.
type Completion = (u64, i32);

/// `sqe->len` must say 2: the entry's two buffers (`FUSE_URING_IOV_SEGS`).
const IOV_SEGS: u32 = 2;
/// Offset of `len` in `struct io_uring_sqe` (include/uapi/linux/io_uring.h),
/// which the io-uring crate's command builder does not set.
const SQE_LEN_OFFSET: usize = 24;

/// How the queues are sized.
#[derive(Clone, Copy, Debug)]
pub(crate) struct UringConfig {
    /// Entries per queue: requests the kernel can hand a queue without
    /// waiting for its thread.
    pub queue_depth: usize,
    /// Bytes in each entry's payload buffer; the kernel refuses less than
    /// max(8 KiB, max_write, max_pages pages).
    pub payload_size: usize,
}

/// The number of queues the kernel expects: one per possible CPU
/// (`num_possible_cpus()`), counted from /sys.
pub(crate) fn queue_count() -> io::Result<usize> {
    let list = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let bad = || io::Error::new(io::ErrorKind::InvalidData, format!("cpu list {list:?}"));
    let mut count = 0;
    for part in list.trim().split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let (lo, hi): (usize, usize) = (lo.parse().map_err(|_| bad())?, hi.parse().map_err(|_| bad())?);
        count += hi.checked_sub(lo).ok_or_else(bad)? + 1;
    }
    Ok(count)
}

/// The queue threads while the session completes the handshake: built
/// (ring and buffers made), waiting to register.
pub(crate) struct Queues {
    starts: Vec<SyncSender<bool>>,
    registered: Receiver<io::Result<()>>,
    threads: Vec<JoinHandle<io::Result<()>>>,
}

impl Queues {
    /// Starts one thread per queue, each pinned to its CPU, and returns once
    /// every one has made its ring and buffers; an error if any could not
    /// (the others are then stopped). Done before INIT is answered, so that
    /// io_uring is offered to the kernel only when the rings exist.
    pub(crate) fn start(
        dev: &Arc<OwnedFd>,
        cfg: UringConfig,
        handler: &Arc<dyn Handler>,
        stats: &Arc<Stats>,
    ) -> io::Result<Queues> {
        let count = queue_count()?;
        let (built_tx, built_rx) = mpsc::sync_channel(count);
        let (reg_tx, registered) = mpsc::sync_channel(count);
        let mut queues = Queues {
            starts: Vec::with_capacity(count),
            registered,
            threads: Vec::with_capacity(count),
        };
        for qid in 0..count {
            let qid = u16::try_from(qid).map_err(|_| io::Error::other("more CPUs than FUSE queue ids"))?;
            let (start_tx, start_rx) = mpsc::sync_channel(1);
            let (dev, handler, stats) = (dev.clone(), handler.clone(), stats.clone());
            let (built_tx, reg_tx) = (built_tx.clone(), reg_tx.clone());
            let spawned = thread::Builder::new().name(format!("fuse-uring-{qid}")).spawn(move || {
                let mut queue = match Queue::new(qid, dev, cfg) {
                    Ok(queue) => {
                        let _ = built_tx.send(Ok(()));
                        queue
                    }
                    Err(e) => {
                        let _ = built_tx.send(Err(copy_error(&e)));
                        return Err(e);
                    }
                };
                drop(built_tx);
                if start_rx.recv() != Ok(true) {
                    return Ok(());
                }
                let (first, registered) = queue.register();
                let _ = reg_tx.send(registered);
                drop(reg_tx);
                queue.serve(first, &*handler, &stats)
            });
            match spawned {
                Ok(thread) => {
                    queues.threads.push(thread);
                    queues.starts.push(start_tx);
                }
                Err(e) => {
                    queues.abandon();
                    return Err(e);
                }
            }
        }
        drop(built_tx);
        for _ in 0..count {
            match built_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    queues.abandon();
                    return Err(e);
                }
                Err(_) => {
                    queues.abandon();
                    return Err(io::Error::other("an io_uring queue thread died"));
                }
            }
        }
        Ok(queues)
    }

    /// Lets every queue register its entries (INIT has been answered with
    /// FUSE_OVER_IO_URING) and returns whether all were accepted, with the
    /// threads, which serve until the connection ends. After a refusal the
    /// kernel uses /dev/fuse instead; the threads still end with it.
    pub(crate) fn register(self) -> (io::Result<()>, Vec<JoinHandle<io::Result<()>>>) {
        for start in &self.starts {
            let _ = start.send(true);
        }
        let mut result = Ok(());
        for _ in 0..self.threads.len() {
            match self.registered.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => result = result.and(Err(e)),
                Err(_) => result = result.and(Err(io::Error::other("an io_uring queue thread died"))),
            }
        }
        (result, self.threads)
    }

    /// Stops the threads before they register (io_uring not negotiated).
    pub(crate) fn abandon(self) {
        for start in &self.starts {
            let _ = start.send(false);
        }
        for thread in self.threads {
            if let Ok(Err(e)) = thread.join() {
                tracing::debug!(error = %e, "io_uring queue stopped");
            }
        }
    }
}

fn copy_error(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(errno) => io::Error::from_raw_os_error(errno),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}

/// A buffer the kernel writes into between a command's submission and its
/// completion, so it is reached through a raw pointer, never a Rust
/// reference that would outlive a submission.
struct RawBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl RawBuf {
    fn zeroed(len: usize, align: usize) -> io::Result<RawBuf> {
        let layout = Layout::from_size_align(len.max(1), align).map_err(io::Error::other)?;
        // SAFETY: the layout's size is not zero.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(RawBuf { ptr, layout })
    }

    fn iovec(&self) -> libc::iovec {
        libc::iovec {
            iov_base: self.ptr.as_ptr().cast(),
            iov_len: self.layout.size(),
        }
    }

    /// The bytes, for the daemon's turn.
    ///
    /// # Safety
    /// No command naming this buffer may be in the kernel's hands (the
    /// entry's last command has completed and no new one is submitted).
    unsafe fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: ptr is a live allocation of layout.size() initialised
        // bytes; the caller guarantees the kernel does not write it now.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for RawBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout, freed only here.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// One ring entry: the two buffers and the iovec pair that names them to
/// the kernel (read by REGISTER, so it lives as long as the buffers).
struct Ent {
    header: RawBuf,
    payload: RawBuf,
    iov: Box<[libc::iovec; 2]>,
}

/// One queue: its ring, its entries, and how many of them the kernel holds.
struct Queue {
    qid: u16,
    dev: Arc<OwnedFd>,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    ents: Vec<Ent>,
    in_kernel: usize,
    /// The current request's payload, copied out of the entry so that the
    /// handler can write the reply into the entry's payload buffer.
    request: Vec<u8>,
}

impl Queue {
    /// Pins the calling thread to CPU `qid` (best effort: a possible CPU may
    /// be offline, and then no caller runs there) and makes the ring, on
    /// this thread, which alone submits to it.
    fn new(qid: u16, dev: Arc<OwnedFd>, cfg: UringConfig) -> io::Result<Queue> {
        let mut cpus = nix::sched::CpuSet::new();
        if let Err(e) = cpus
            .set(usize::from(qid))
            .and_then(|()| nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &cpus))
        {
            tracing::debug!(qid, error = %e, "io_uring queue thread not pinned");
        }
        let depth = cfg.queue_depth.max(1);
        let entries = u32::try_from(depth.next_power_of_two()).map_err(io::Error::other)?;
        // Completions run in this thread when it waits, not as interrupts
        // of whatever it is doing (DEFER_TASKRUN, which needs a single
        // issuer); older kernels get a plain ring.
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(entries)
            .or_else(|_| IoUring::<squeue::Entry128, cqueue::Entry>::builder().build(entries))?;
        let ents = (0..depth)
            .map(|_| {
                let header = RawBuf::zeroed(size_of::<UringReqHeader>(), 64)?;
                let payload = RawBuf::zeroed(cfg.payload_size, 4096)?;
                let iov = Box::new([header.iovec(), payload.iovec()]);
                Ok(Ent { header, payload, iov })
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Queue {
            qid,
            dev,
            ring,
            ents,
            in_kernel: 0,
            request: vec![0; cfg.payload_size],
        })
    }

    /// The SQE for entry `idx`: `cmd_op` with its `fuse_uring_cmd_req`, and
    /// for REGISTER the entry's iovec pair.
    fn sqe(&self, idx: usize, cmd_op: u32, commit_id: u64) -> squeue::Entry128 {
        let req = UringCmdReq {
            commit_id,
            qid: self.qid,
            ..Default::default()
        };
        let mut area = [0u8; 80];
        area[..size_of::<UringCmdReq>()].copy_from_slice(req.as_bytes());
        let mut cmd = opcode::UringCmd80::new(types::Fd(self.dev.as_raw_fd()), cmd_op).cmd(area);
        let register = cmd_op == FUSE_IO_URING_CMD_REGISTER;
        if register {
            cmd = cmd.addr(Some(self.ents[idx].iov.as_ptr() as u64));
        }
        let mut sqe = cmd.build().user_data(idx as u64);
        if register {
            set_sqe_len(&mut sqe, IOV_SEGS);
        }
        sqe
    }

    /// Queues `sqe` for the next submission.
    fn push(&mut self, sqe: &squeue::Entry128) -> io::Result<()> {
        // The ring has room for every entry's one command; a full queue
        // would be a bookkeeping bug, so submit and retry once.
        for _ in 0..2 {
            // SAFETY: the SQE names (REGISTER) an entry's iovec pair and
            // through it its buffers, all owned by `self.ents`, which are
            // freed only when no command of theirs is in the kernel's hands
            // (see Drop); COMMIT_AND_FETCH names no memory.
            if unsafe { self.ring.submission().push(sqe) }.is_ok() {
                self.in_kernel += 1;
                return Ok(());
            }
            self.ring.submit()?;
        }
        Err(io::Error::other("io_uring submission queue full"))
    }

    /// Registers every entry. Returns the completions that came at once
    /// (requests already waiting), and an error if the kernel refused an
    /// entry (it then turns io_uring off for the connection; the entries
    /// it took come back at unmount, and whatever arrives meanwhile is
    /// served).
    fn register(&mut self) -> (Vec<Completion>, io::Result<()>) {
        for idx in 0..self.ents.len() {
            let sqe = self.sqe(idx, FUSE_IO_URING_CMD_REGISTER, 0);
            if let Err(e) = self.push(&sqe) {
                return (Vec::new(), Err(e));
            }
        }
        if let Err(e) = self.ring.submit() {
            return (Vec::new(), Err(e));
        }
        let (done, refused): (Vec<Completion>, Vec<Completion>) = self
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .partition(|(_, res)| *res >= 0);
        self.in_kernel -= refused.len();
        match refused.first() {
            Some(&(_, res)) => {
                tracing::warn!(qid = self.qid, errno = -res, "kernel refused io_uring registration");
                (done, Err(io::Error::from_raw_os_error(-res)))
            }
            None => (done, Ok(())),
        }
    }

    /// Serves until the kernel has given back every entry.
    fn serve(&mut self, mut ready: Vec<Completion>, handler: &dyn Handler, stats: &Stats) -> io::Result<()> {
        let mut idle_since = stats.now();
        loop {
            // The wait for a batch is charged to its first request; later
            // ones in the batch waited behind it (their wait is the time
            // the thread spent on the ones before).
            let mut wait_from = idle_since;
            let mut started = stats.now();
            for (idx, res) in ready.drain(..) {
                self.in_kernel -= 1;
                let opcode = self.complete(idx as usize, res, handler)?;
                let handled = stats.now();
                if let Some(opcode) = opcode {
                    let spans = match (wait_from, started, handled) {
                        (Some(w), Some(s), Some(h)) => Some(Spans {
                            wait: s - w,
                            handle: h - s,
                            // Committed by the io_uring_enter that waits
                            // for the next request: counted in its wait.
                            reply: Default::default(),
                        }),
                        _ => None,
                    };
                    stats.record(opcode, spans);
                }
                (wait_from, started) = (handled, handled);
            }
            idle_since = wait_from;
            if self.in_kernel == 0 {
                return Ok(());
            }
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => {}
                Err(e) => return Err(e),
            }
            ready.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
        }
    }

    /// Handles one completion of entry `idx`: a request to answer (its
    /// opcode is returned), or the kernel giving the entry back for good.
    fn complete(&mut self, idx: usize, res: i32, handler: &dyn Handler) -> io::Result<Option<u32>> {
        if res < 0 {
            match -res {
                libc::ENOTCONN | libc::ECONNABORTED | libc::ECANCELED => {}
                errno => tracing::warn!(qid = self.qid, idx, errno, "io_uring entry ended"),
            }
            return Ok(None);
        }
        let Queue { ents, request, .. } = self;
        let Some(ent) = ents.get_mut(idx) else {
            return Err(io::Error::other(format!("io_uring completion for unknown entry {idx}")));
        };
        // SAFETY: this completion gave the entry back: the kernel touches
        // neither buffer until the entry's next command is submitted below.
        let (header, payload) = unsafe { (ent.header.bytes_mut(), ent.payload.bytes_mut()) };
        let header = UringReqHeader::mut_from_bytes(header).map_err(|_| io::Error::other("entry header size"))?;
        let (in_header, _) = InHeader::read_from_prefix(&header.in_out).map_err(|_| io::Error::other("in_out size"))?;
        let commit_id = header.ent_in_out.commit_id;
        let len = (header.ent_in_out.payload_sz as usize).min(payload.len());
        request[..len].copy_from_slice(&payload[..len]);
        // The in header's len counts what /dev/fuse would deliver: the
        // header, the fixed argument (in op_in, absent for e.g. LOOKUP,
        // whose name is all payload) and the payload; so the fixed
        // argument's length is what remains, and `op` followed by
        // `payload` are the bytes /dev/fuse would have sent.
        let op_len = (in_header.len as usize)
            .saturating_sub(size_of::<InHeader>() + len)
            .min(header.op_in.len());
        let op = header.op_in;
        let answer = handler.handle(
            &Incoming {
                header: &in_header,
                args: Args::Split {
                    op: &op[..op_len],
                    payload: &request[..len],
                },
            },
            payload,
        );
        let (error, len) = match answer {
            Answer::Reply(n) if n <= payload.len() => (0, n),
            Answer::Reply(n) => {
                tracing::error!(n, "reply longer than the entry's payload buffer");
                (-libc::EIO, 0)
            }
            Answer::Error(errno) => (-errno, 0),
            // Only FORGET and INTERRUPT go unanswered, and they never come
            // through the ring; the entry must be committed all the same.
            Answer::Nothing => {
                tracing::error!(opcode = in_header.opcode, "no answer to a request from the ring");
                (-libc::ENOSYS, 0)
            }
        };
        let out = OutHeader {
            len: (size_of::<OutHeader>() + len) as u32,
            error,
            unique: in_header.unique,
        };
        header.in_out.zero();
        header.in_out[..size_of::<OutHeader>()].copy_from_slice(out.as_bytes());
        header.ent_in_out.payload_sz = len as u32;
        let sqe = self.sqe(idx, FUSE_IO_URING_CMD_COMMIT_AND_FETCH, commit_id);
        self.push(&sqe)?;
        Ok(Some(in_header.opcode))
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        if self.in_kernel > 0 {
            // The kernel may still write into these buffers until it has
            // cancelled the commands (after the ring closes, not before):
            // leaking them is the only safe end.
            tracing::warn!(
                qid = self.qid,
                entries = self.in_kernel,
                "io_uring queue ended early; buffers leaked"
            );
            std::mem::forget(std::mem::take(&mut self.ents));
        }
    }
}

/// Sets `sqe->len`, which the command builder leaves zero.
fn set_sqe_len(sqe: &mut squeue::Entry128, len: u32) {
    let base: *mut squeue::Entry128 = sqe;
    // SAFETY: Entry128 is #[repr(C)] and starts with the 64-byte
    // `io_uring_sqe`, whose u32 `len` is at SQE_LEN_OFFSET (checked against
    // the crate's own layout in the tests); the write stays inside `sqe`.
    unsafe { base.cast::<u8>().add(SQE_LEN_OFFSET).cast::<u32>().write_unaligned(len) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_sqe_has_the_layout_the_kernel_reads() {
        let mut area = [0u8; 80];
        area[16] = 5; // qid
        let mut sqe = opcode::UringCmd80::new(types::Fd(0x0102_0304), FUSE_IO_URING_CMD_REGISTER)
            .cmd(area)
            .addr(Some(0x1122_3344_5566_7788))
            .build()
            .user_data(0xabcd);
        set_sqe_len(&mut sqe, IOV_SEGS);
        // SAFETY: Entry128 is #[repr(C)], 128 initialised bytes.
        let bytes: [u8; 128] = unsafe { std::mem::transmute(sqe) };
        let u32_at = |o: usize| u32::from_ne_bytes(bytes[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_ne_bytes(bytes[o..o + 8].try_into().expect("8 bytes"));
        assert_eq!(bytes[0], 46, "IORING_OP_URING_CMD");
        assert_eq!(u32_at(4), 0x0102_0304, "fd");
        assert_eq!(u32_at(8), FUSE_IO_URING_CMD_REGISTER, "cmd_op");
        assert_eq!(u64_at(16), 0x1122_3344_5566_7788, "addr");
        assert_eq!(u32_at(SQE_LEN_OFFSET), IOV_SEGS, "len");
        assert_eq!(u64_at(32), 0xabcd, "user_data");
        assert_eq!(bytes[48 + 16], 5, "the command area starts at byte 48");
    }

    #[test]
    fn queue_count_matches_the_possible_cpus() {
        let count = queue_count().expect("cpu list");
        let online = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        assert!(count >= online, "{count} possible, {online} usable");
    }
}
