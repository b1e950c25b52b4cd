//! Mounts a tiny handler through [`Session`] on each transport and checks
//! what programs see through the mount, and that the transport reported is
//! the one that carried the requests.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use novafs::Atime;
use tempfile::TempDir;

use crate::serve::{fusermount_options, ServeConfig, Session, SessionStats, Transport, Unmounter};
use crate::session::MountConfig;
use crate::transport::{fusermount, Answer, Args, Handler, Incoming};

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

const LOOKUP: u32 = 1;
const GETATTR: u32 = 3;
const STATFS: u32 = 17;
const INIT: u32 = 26;

const ROOT_SIZE: u64 = 4242;
const ROOT_MODE: u32 = libc::S_IFDIR | 0o755;
const BLOCKS: u64 = 777;
const BSIZE: u32 = 4096;

/// Answers INIT, GETATTR of the root, LOOKUP (nothing exists) and STATFS
/// with bytes laid out here by hand, so the test does not lean on the
/// crate's own reply builders; everything else is ENOSYS.
struct TinyFs;

fn put(out: &mut [u8], at: usize, bytes: &[u8]) {
    out[at..at + bytes.len()].copy_from_slice(bytes);
}

impl Handler for TinyFs {
    fn handle(&self, req: &Incoming<'_>, out: &mut [u8]) -> Answer {
        // Both transports deliver the arguments /dev/fuse would: io_uring
        // split into the fixed struct and the rest.
        let (op, payload) = match req.args {
            Args::Whole(bytes) => (&[][..], bytes),
            Args::Split { op, payload } => (op, payload),
        };
        if op.len() + payload.len() + 40 != req.header.len as usize {
            return Answer::Error(libc::EPROTO);
        }
        match req.header.opcode {
            INIT => {
                // fuse_init_out: 64 bytes; the session sets max_write and
                // the io_uring flag.
                out[..64].fill(0);
                put(out, 0, &7u32.to_ne_bytes()); // major
                put(out, 4, &42u32.to_ne_bytes()); // minor
                put(out, 8, &(128u32 << 10).to_ne_bytes()); // max_readahead
                put(out, 16, &16u16.to_ne_bytes()); // max_background
                put(out, 18, &12u16.to_ne_bytes()); // congestion_threshold
                put(out, 24, &1u32.to_ne_bytes()); // time_gran
                Answer::Reply(64)
            }
            // fuse_getattr_in is 16 bytes.
            GETATTR if op.len() + payload.len() != 16 => Answer::Error(libc::EPROTO),
            GETATTR if req.header.nodeid == 1 => {
                // fuse_attr_out with a zero attr_valid (TTL 0: every stat
                // asks again), then fuse_attr.
                out[..104].fill(0);
                put(out, 16, &1u64.to_ne_bytes()); // ino
                put(out, 24, &ROOT_SIZE.to_ne_bytes()); // size
                put(out, 16 + 60, &ROOT_MODE.to_ne_bytes()); // mode
                put(out, 16 + 64, &2u32.to_ne_bytes()); // nlink
                put(out, 16 + 80, &BSIZE.to_ne_bytes()); // blksize
                Answer::Reply(104)
            }
            // The name comes NUL-terminated.
            LOOKUP if [op, payload].concat() != b"missing\0" => Answer::Error(libc::EPROTO),
            LOOKUP => Answer::Error(libc::ENOENT),
            STATFS => {
                // fuse_kstatfs: 80 bytes.
                out[..80].fill(0);
                put(out, 0, &BLOCKS.to_ne_bytes());
                put(out, 8, &(BLOCKS / 2).to_ne_bytes()); // bfree
                put(out, 16, &(BLOCKS / 2).to_ne_bytes()); // bavail
                put(out, 40, &BSIZE.to_ne_bytes()); // bsize
                put(out, 44, &255u32.to_ne_bytes()); // namelen
                put(out, 48, &BSIZE.to_ne_bytes()); // frsize
                Answer::Reply(80)
            }
            _ => Answer::Error(libc::ENOSYS),
        }
    }
}

/// A live mount of [`TinyFs`]; dropping it unmounts and joins the workers.
struct TinyMount {
    dir: TempDir,
    transport: Transport,
    stats: Arc<SessionStats>,
    unmounter: Unmounter,
    /// Disarmed when the mount is dropped, after the workers are joined.
    _watchdog: Watchdog,
    server: Option<JoinHandle<io::Result<()>>>,
}

fn tiny_config(uring: bool) -> ServeConfig {
    ServeConfig {
        mount: MountConfig {
            read_only: false,
            allow_other: false,
            devices: false,
            setuid: false,
            exec: true,
            threads: 2,
            fsname: "tinyfs".into(),
            uring,
            queue_depth: 2,
            stats: true,
            inode_names: false,
            writeback_cache: false,
        },
        atime: (Atime::Relative, false),
        max_write: 128 << 10,
    }
}

impl TinyMount {
    /// Mounts as root does (mount(2)).
    fn new(uring: bool) -> TinyMount {
        let dir = tempfile::tempdir().expect("mount point");
        let session = Session::mount(Arc::new(TinyFs), dir.path(), &tiny_config(uring)).expect("mount");
        TinyMount::serve(dir, session)
    }

    /// Mounts as a user does (fusermount3, which root may use too).
    fn through_fusermount() -> TinyMount {
        let dir = tempfile::tempdir().expect("mount point");
        let cfg = tiny_config(false);
        let dev = fusermount::mount(dir.path(), &fusermount_options(&cfg)).expect("fusermount3 mount");
        let session =
            Session::start(Arc::new(TinyFs), dev, Unmounter::fusermount(dir.path()), &cfg).expect("INIT handshake");
        TinyMount::serve(dir, session)
    }

    fn serve(dir: TempDir, session: Session) -> TinyMount {
        let (transport, stats, unmounter) = (session.transport(), session.stats(), session.unmounter());
        let watchdog = Watchdog::arm(dir.path());
        let server = std::thread::spawn(move || session.serve());
        TinyMount {
            _watchdog: watchdog,
            dir,
            transport,
            stats,
            unmounter,
            server: Some(server),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Unmounts and returns how the session ended.
    fn finish(mut self) -> io::Result<()> {
        self.unmounter.unmount().expect("unmount");
        let server = self.server.take().expect("still serving");
        server.join().expect("serve thread")
    }
}

impl Drop for TinyMount {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            let _ = nix::mount::umount2(self.dir.path(), nix::mount::MntFlags::MNT_DETACH);
            let _ = server.join();
        }
    }
}

/// Aborts a mount's FUSE connection if the test still holds it after a
/// minute: a transport that loses a request leaves its caller waiting in
/// the kernel for good, and the test should fail, not hang.
struct Watchdog {
    disarm: Option<mpsc::SyncSender<()>>,
    thread: Option<JoinHandle<()>>,
}

const FUSECTL: &str = "/sys/fs/fuse/connections";

impl Watchdog {
    fn arm(mountpoint: &Path) -> Watchdog {
        let connection = connection_of(mountpoint).expect("the mount is in /proc/self/mountinfo");
        let (disarm, armed) = mpsc::sync_channel(1);
        let thread = std::thread::spawn(move || {
            if armed.recv_timeout(Duration::from_secs(60)) == Err(mpsc::RecvTimeoutError::Timeout) {
                eprintln!("watchdog: aborting FUSE connection {connection}: the test hung");
                abort_connection(connection);
            }
        });
        Watchdog {
            disarm: Some(disarm),
            thread: Some(thread),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.disarm.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The FUSE connection number of the mount on `mountpoint`: the minor of
/// its device, read from mountinfo (a stat would ask the daemon).
fn connection_of(mountpoint: &Path) -> Option<u32> {
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let dir = mountpoint.to_str()?;
    let line = info.lines().find(|l| l.split(' ').nth(4) == Some(dir))?;
    line.split(' ').nth(2)?.split_once(':')?.1.parse().ok()
}

/// Writes to the connection's `abort` in fusectl, mounting fusectl for the
/// moment if it is not.
fn abort_connection(connection: u32) {
    let fusectl = Path::new(FUSECTL);
    let mounted_here = !fusectl.join(connection.to_string()).exists()
        && nix::mount::mount(
            Some("fusectl"),
            fusectl,
            Some("fusectl"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        )
        .is_ok();
    if let Err(e) = fs::write(fusectl.join(connection.to_string()).join("abort"), "1") {
        eprintln!("watchdog: cannot abort connection {connection}: {e}");
    }
    if mounted_here {
        let _ = nix::mount::umount2(fusectl, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Sets the fuse module's `enable_uring` for as long as it lives, then puts
/// the old value back.
struct UringSwitch {
    old: String,
    /// The tests that set the switch take turns.
    _turn: MutexGuard<'static, ()>,
}

static URING_SWITCH: Mutex<()> = Mutex::new(());

impl UringSwitch {
    fn on() -> UringSwitch {
        UringSwitch::set("Y")
    }

    fn off() -> UringSwitch {
        UringSwitch::set("N")
    }

    fn set(value: &str) -> UringSwitch {
        let turn = URING_SWITCH.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let old = fs::read_to_string(ENABLE_URING).expect("read enable_uring");
        fs::write(ENABLE_URING, value).expect("set enable_uring");
        UringSwitch { old, _turn: turn }
    }
}

impl Drop for UringSwitch {
    fn drop(&mut self) {
        if let Err(e) = fs::write(ENABLE_URING, self.old.trim()) {
            eprintln!("cannot restore {ENABLE_URING} to {:?}: {e}", self.old);
        }
    }
}

/// Whether `done` holds within a second: a /dev/fuse worker counts a
/// request after writing its reply, so the caller may see the reply first.
fn soon(done: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(1);
    while !done() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

fn require_fuse_root() {
    let opened = fs::OpenOptions::new().read(true).write(true).open("/dev/fuse");
    assert!(opened.is_ok(), "this test needs FUSE: /dev/fuse: {opened:?}");
    assert!(nix::unistd::geteuid().is_root(), "this test needs root");
}

/// What a program sees through the mount: the root's attributes, a failed
/// lookup, the file system's statistics.
fn check_through(mnt: &Path) {
    let root = fs::metadata(mnt).expect("stat the root");
    assert_eq!(
        (root.ino(), root.len(), root.mode(), root.nlink()),
        (1, ROOT_SIZE, ROOT_MODE, 2)
    );
    let missing = fs::metadata(mnt.join("missing")).expect_err("nothing but the root exists");
    assert_eq!(missing.raw_os_error(), Some(libc::ENOENT), "{missing}");
    let st = nix::sys::statvfs::statvfs(mnt).expect("statfs");
    assert_eq!(
        (st.blocks(), st.blocks_free(), st.fragment_size()),
        (BLOCKS, BLOCKS / 2, u64::from(BSIZE))
    );
}

#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-fuse/build.rs)"
)]
fn dev_fuse_transport_serves_stat_lookup_and_statfs() {
    require_fuse_root();
    let mount = TinyMount::new(false);
    assert_eq!(mount.transport, Transport::Dev);
    assert_eq!(mount.transport.to_string(), "/dev/fuse");
    check_through(mount.path());
    let dev = &mount.stats.dev;
    assert!(
        soon(|| dev.count(GETATTR) >= 1 && dev.count(LOOKUP) >= 1 && dev.count(STATFS) >= 1),
        "{}",
        mount.stats.render()
    );
    assert_eq!(mount.stats.uring.total(), 0);
    mount.finish().expect("the session ends cleanly at unmount");
}

#[test]
#[cfg_attr(
    not(novafs_fuse_root),
    ignore = "needs /dev/fuse and root (see crates/novafs-fuse/build.rs)"
)]
fn fusermount3_mount_hands_over_a_working_descriptor() {
    require_fuse_root();
    let mount = TinyMount::through_fusermount();
    let mounts = fs::read_to_string("/proc/mounts").expect("/proc/mounts");
    let dir = mount.path().to_str().expect("utf-8 temp path");
    let line = mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == Some(dir))
        .expect("the mount is listed");
    assert!(
        line.starts_with("tinyfs ") && line.split(' ').nth(2) == Some("fuse.novafs"),
        "{line}"
    );
    check_through(mount.path());
    assert!(soon(|| mount.stats.dev.count(GETATTR) >= 1));
    mount.finish().expect("the session ends cleanly at unmount");
}

#[test]
#[cfg_attr(
    not(novafs_fuse_uring),
    ignore = "needs root and a kernel with FUSE over io_uring (/sys/module/fuse/parameters/enable_uring)"
)]
fn io_uring_transport_serves_stat_lookup_and_statfs() {
    require_fuse_root();
    let switch = UringSwitch::on();
    let mount = TinyMount::new(true);
    drop(switch);
    assert_eq!(mount.transport, Transport::Uring, "{}", mount.stats.render());
    assert_eq!(mount.transport.to_string(), "FUSE over io_uring");
    check_through(mount.path());
    let (uring, dev) = (&mount.stats.uring, &mount.stats.dev);
    assert!(
        uring.count(GETATTR) >= 1 && uring.count(LOOKUP) >= 1 && uring.count(STATFS) >= 1,
        "{}",
        mount.stats.render()
    );
    // Only INIT (and forgets) come through /dev/fuse.
    assert_eq!(
        (dev.count(GETATTR), dev.count(LOOKUP), dev.count(STATFS)),
        (0, 0, 0),
        "{}",
        mount.stats.render()
    );
    assert_eq!(dev.count(INIT), 1);
    mount.finish().expect("the session ends cleanly at unmount");
}

#[test]
#[cfg_attr(
    not(novafs_fuse_uring),
    ignore = "needs root and a kernel with FUSE over io_uring (/sys/module/fuse/parameters/enable_uring)"
)]
fn io_uring_switched_off_leaves_the_mount_on_dev_fuse() {
    require_fuse_root();
    let switch = UringSwitch::off();
    let mount = TinyMount::new(true);
    drop(switch);
    assert_eq!(mount.transport, Transport::Dev);
    check_through(mount.path());
    assert!(soon(|| mount.stats.dev.count(GETATTR) >= 1), "{}", mount.stats.render());
    assert_eq!(mount.stats.uring.total(), 0);
    mount.finish().expect("the session ends cleanly at unmount");
}

/// The round trip of a trivial request on each transport: `stat` of the
/// root with TTL 0 (one GETATTR each), interleaved rounds, medians.
#[test]
#[ignore = "benchmark: cargo test -p novafs-fuse -- --ignored --nocapture stat_round_trip"]
fn stat_round_trip_dev_fuse_against_io_uring() {
    require_fuse_root();
    const STATS_PER_ROUND: u32 = 10_000;
    const ROUNDS: usize = 11;
    let dev = TinyMount::new(false);
    let uring = {
        let _switch = UringSwitch::on();
        TinyMount::new(true)
    };
    assert_eq!((dev.transport, uring.transport), (Transport::Dev, Transport::Uring));
    let time = |m: &TinyMount| {
        let start = Instant::now();
        for _ in 0..STATS_PER_ROUND {
            fs::metadata(m.path()).expect("stat");
        }
        start.elapsed().as_secs_f64() * 1e6 / f64::from(STATS_PER_ROUND)
    };
    let (mut on_dev, mut on_uring) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        // Alternate which goes first.
        if round % 2 == 0 {
            on_dev.push(time(&dev));
            on_uring.push(time(&uring));
        } else {
            on_uring.push(time(&uring));
            on_dev.push(time(&dev));
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (d, u) = (median(&mut on_dev), median(&mut on_uring));
    println!("stat round trip, median of {ROUNDS} rounds of {STATS_PER_ROUND}:");
    println!(
        "  /dev/fuse          {d:.2} us  (best {:.2}; rounds {on_dev:.2?})",
        on_dev[0]
    );
    println!(
        "  FUSE over io_uring {u:.2} us  (best {:.2}; rounds {on_uring:.2?})",
        on_uring[0]
    );
    println!("  io_uring speed-up  {:.2}x", d / u);
    println!("{}", dev.stats.render());
    println!("{}", uring.stats.render());
    assert!(uring.stats.uring.count(GETATTR) >= u64::from(STATS_PER_ROUND) * ROUNDS as u64);
    dev.finish().expect("dev session ends");
    uring.finish().expect("uring session ends");
}
