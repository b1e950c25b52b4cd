//! The control channel of a mount's daemon: a Unix socket beside its
//! state file (in the private state directory), through which commands
//! reach the mounted file system while FUSE keeps serving. One request per
//! connection, one line:
//!
//! - `scrub RATE` (bytes per second, 0 for no limit): answered with lines
//!   `progress DONE TOTAL`, `damaged INO LOST OTHER_NAMES RANGES PATH WHY`
//!   (LOST 0 or 1, RANGES `START-END,...` or `-`, PATH hex or `-`), then
//!   `done KEY=VALUE...`;
//! - `snapshot-create NAME`, `snapshot-delete NAME`: `done EPOCH`;
//! - `snapshot-list`: a line `snapshot NAME EPOCH CREATED_NS HELD_PAGES`
//!   per snapshot, then `done`;
//! - `snapshot-mount NAME MOUNTPOINT`: the daemon serves a read-only mount
//!   of the snapshot there; `done`;
//! - `stats`: the FUSE requests served so far by operation, a line `line
//!   TEXT` per line of the table, then `done`.
//!
//! Names and paths travel hex-encoded. Any request may be answered
//! `error MESSAGE` instead.
//!
//! Requests are served concurrently, each connection on a thread of its
//! own, so that snapshots are taken, listed and deleted while a scrub
//! runs. Scrubs still run one at a time (a second waits for the first),
//! as do snapshot mounts. At most [`MAX_REQUESTS`] are served at once;
//! a connection beyond that is answered `error busy: too many control
//! requests, try again` and closed.

use std::cell::RefCell;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use novafs::{Damaged, Fs, ScrubOptions, ScrubReport, Snapshot};
use novafs_fuse::MountStats;

/// Mounts snapshot NAME of the file system read-only at a mount point
/// (the daemon's `SnapshotMounts`).
pub type MountSnapshot = Box<dyn Fn(&Fs, &[u8], &Path) -> Result<()> + Send + Sync>;

/// The most requests served at once.
pub const MAX_REQUESTS: usize = 16;

/// The answer to a connection beyond [`MAX_REQUESTS`].
const BUSY: &str = "error busy: too many control requests, try again\n";

/// How long the accept loop, and a connection's thread on its client,
/// wait between looks at the stop flag.
const POLL: Duration = Duration::from_millis(100);

/// How long a connection turned away is given to send its request (read
/// before the answer, so that the client's write does not fail).
const BUSY_READ: Duration = Duration::from_millis(50);

/// The longest request line read (a hex-encoded name and path are far
/// shorter).
const MAX_LINE: u64 = 64 << 10;

/// The daemon's side: a thread accepting connections until
/// [`Server::stop`], each answered on a thread of its own.
pub struct Server {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// What the connections' threads share.
struct Shared {
    fs: Arc<Fs>,
    stats: MountStats,
    mount_snapshot: MountSnapshot,
    /// Held by the running scrub.
    scrubbing: Mutex<()>,
    /// Held by a snapshot mount under way.
    mounting: Mutex<()>,
}

impl Server {
    /// Listens on `path` (a stale socket of a dead daemon is replaced).
    pub fn start(path: &Path, fs: Arc<Fs>, stats: MountStats, mount_snapshot: MountSnapshot) -> io::Result<Server> {
        let shared = Shared {
            fs,
            stats,
            mount_snapshot,
            scrubbing: Mutex::new(()),
            mounting: Mutex::new(()),
        };
        Server::listen(path, MAX_REQUESTS, move |conn, stop| answer(conn, &shared, stop))
    }

    /// Listens on `path`, serving each connection with `serve` (given the
    /// stop flag) on a thread of its own, at most `max` at once.
    fn listen(
        path: &Path,
        max: usize,
        serve: impl Fn(UnixStream, &AtomicBool) + Send + Sync + 'static,
    ) -> io::Result<Server> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = thread::Builder::new()
            .name("control".into())
            .spawn(move || accept(&listener, max, Arc::new(serve), &flag))?;
        Ok(Server {
            path: path.to_path_buf(),
            stop,
            thread: Some(thread),
        })
    }

    /// Ends the running commands at their next step, then waits for every
    /// connection's thread and the accepting one, after which none holds a
    /// reference to the file system; removes the socket.
    pub fn stop(mut self) {
        // The accept loop sees the flag within `POLL`, even when the
        // socket's file is gone (a connection could not wake it then).
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("control channel: the accepting thread panicked");
            }
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The accept loop: each connection served on a thread of its own, at
/// most `max` at once, until the stop flag is set; then waits for them.
fn accept<F>(listener: &UnixListener, max: usize, serve: Arc<F>, stop: &Arc<AtomicBool>)
where
    F: Fn(UnixStream, &AtomicBool) + Send + Sync + 'static,
{
    let mut running: Vec<JoinHandle<()>> = Vec::new();
    if let Err(e) = listener.set_nonblocking(true) {
        tracing::warn!("control channel: {e}");
    }
    // A client connecting while the daemon stops gets nothing served.
    while !stop.load(Ordering::Acquire) {
        let mut ready = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        match poll(&mut ready, PollTimeout::from(POLL.as_millis() as u16)) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!("control channel: {e}");
                thread::sleep(POLL);
                continue;
            }
        }
        let conn = match listener.accept() {
            Ok((c, _)) => c,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => {
                tracing::warn!("control channel: {e}");
                continue;
            }
        };
        if let Err(e) = conn.set_nonblocking(false) {
            tracing::warn!("control channel: {e}");
            continue;
        }
        running = reap(running);
        if running.len() >= max {
            tracing::warn!("control channel: {max} requests in progress already; one more turned away");
            turn_away(&conn);
            continue;
        }
        let (serve, stop) = (serve.clone(), stop.clone());
        match thread::Builder::new()
            .name("control-conn".into())
            .spawn(move || serve(conn, &stop))
        {
            Ok(t) => running.push(t),
            Err(e) => tracing::warn!("control channel: no thread for a request: {e}"),
        }
    }
    for t in running {
        join(t);
    }
}

/// The threads of `running` still running; the others joined.
fn reap(running: Vec<JoinHandle<()>>) -> Vec<JoinHandle<()>> {
    let (done, running): (Vec<_>, Vec<_>) = running.into_iter().partition(JoinHandle::is_finished);
    done.into_iter().for_each(join);
    running
}

fn join(t: JoinHandle<()>) {
    if t.join().is_err() {
        tracing::error!("control channel: a request's thread panicked");
    }
}

/// Answers `BUSY` to a connection, after reading its request (briefly: a
/// client that sends none is not waited for), since a client whose
/// request is refused unread may see its write fail, not the answer.
fn turn_away(conn: &UnixStream) {
    let deadline = Instant::now() + BUSY_READ;
    let mut buf = [0u8; 4096];
    let mut read = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || conn.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match (&*conn).read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                read += n;
                if buf[..n].contains(&b'\n') || read as u64 >= MAX_LINE {
                    break;
                }
            }
        }
    }
    let sent = conn
        .set_write_timeout(Some(BUSY_READ))
        .and_then(|()| (&*conn).write_all(BUSY.as_bytes()));
    if let Err(e) = sent {
        tracing::debug!("control channel: answering busy: {e}");
    }
}

/// A connection whose reads and writes wait for the client as long as it
/// takes, but end (timed out) once the daemon stops: its socket's
/// timeouts ([`POLL`]) let it look at the stop flag.
#[derive(Clone, Copy)]
struct Patient<'a> {
    conn: &'a UnixStream,
    stop: &'a AtomicBool,
}

impl Patient<'_> {
    fn retry<T>(&self, mut op: impl FnMut() -> io::Result<T>) -> io::Result<T> {
        loop {
            match op() {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
                        && !self.stop.load(Ordering::Acquire) => {}
                r => return r,
            }
        }
    }
}

impl Read for Patient<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let conn = self.conn;
        self.retry(|| (&*conn).read(buf))
    }
}

impl Write for Patient<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let conn = self.conn;
        self.retry(|| (&*conn).write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn answer(conn: UnixStream, shared: &Shared, stop: &AtomicBool) {
    let set = conn
        .set_read_timeout(Some(POLL))
        .and_then(|()| conn.set_write_timeout(Some(POLL)));
    if let Err(e) = set {
        tracing::warn!("control channel: {e}");
        return;
    }
    let client = Patient { conn: &conn, stop };
    let mut line = String::new();
    if let Err(e) = BufReader::new(client.take(MAX_LINE)).read_line(&mut line) {
        tracing::debug!("control channel: reading a request: {e}");
        return;
    }
    if stop.load(Ordering::Acquire) {
        return;
    }
    let fs = &*shared.fs;
    let mut out = io::BufWriter::new(client);
    let reply = match line.split_whitespace().collect::<Vec<_>>()[..] {
        ["scrub", rate] => match rate.parse::<u64>() {
            Ok(rate) => {
                let _one = shared.scrubbing.lock().unwrap_or_else(|p| p.into_inner());
                scrub(fs, rate, stop, &mut out)
            }
            Err(_) => writeln!(out, "error bad rate '{rate}'"),
        },
        ["snapshot-list"] => {
            let mut r = Ok(());
            for s in fs.snapshots() {
                r = r.and_then(|()| writeln!(out, "snapshot {}", encode_snapshot(&s)));
            }
            r.and_then(|()| writeln!(out, "done"))
        }
        ["snapshot-create", name] => reply(
            &mut out,
            unhex(name).and_then(|n| fs.take_snapshot(&n).map(|s| s.epoch).map_err(snapshot_error)),
        ),
        ["snapshot-delete", name] => reply(
            &mut out,
            unhex(name).and_then(|n| fs.delete_snapshot(&n).map(|s| s.epoch).map_err(snapshot_error)),
        ),
        ["snapshot-mount", name, mnt] => {
            let done = unhex(name).and_then(|n| {
                let mnt = PathBuf::from(std::ffi::OsString::from_vec(unhex(mnt)?));
                let _one = shared.mounting.lock().unwrap_or_else(|p| p.into_inner());
                (shared.mount_snapshot)(fs, &n, &mnt)
            });
            reply(&mut out, done.map(|()| ""))
        }
        ["stats"] => {
            let table = shared.stats.render();
            let mut r = Ok(());
            for l in table.lines() {
                r = r.and_then(|()| writeln!(out, "line {l}"));
            }
            r.and_then(|()| writeln!(out, "done"))
        }
        _ => writeln!(out, "error unknown request '{}'", line.trim()),
    };
    if let Err(e) = reply.and_then(|()| out.flush()) {
        tracing::warn!("control channel: {e}");
    }
}

/// A snapshot request's failure, said for the command line.
pub fn snapshot_error(e: novafs::Error) -> anyhow::Error {
    match e {
        novafs::Error::NotFound => anyhow!("no such snapshot; `novafs snapshot list` shows them"),
        novafs::Error::Exists => anyhow!("a snapshot of that name exists already"),
        novafs::Error::Busy(why) => anyhow!("the snapshot is in use ({why}); unmount it first"),
        e => anyhow!("{e}"),
    }
}

/// `done VALUE` or `error MESSAGE`.
fn reply(out: &mut impl Write, r: Result<impl std::fmt::Display>) -> io::Result<()> {
    match r {
        Ok(v) => writeln!(out, "done {v}"),
        Err(e) => writeln!(out, "error {}", format!("{e:#}").replace('\n', " ")),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Result<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        bail!("bad hex '{s}'");
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|_| anyhow!("bad hex '{s}'")))
        .collect()
}

fn encode_snapshot(s: &Snapshot) -> String {
    format!("{} {} {} {}", hex(&s.name), s.epoch, s.created_ns, s.held_pages)
}

/// Sends request `line` to the daemon listening on `path`; its reply
/// comes on the returned reader.
fn send(path: &Path, line: &str) -> Result<BufReader<UnixStream>> {
    let mut conn =
        UnixStream::connect(path).with_context(|| format!("cannot reach the daemon at {}", path.display()))?;
    if let Err(e) = conn.write_all(format!("{line}\n").as_bytes()) {
        // A daemon too busy to serve it may have answered and closed
        // already: its answer says more than the failed write.
        let mut reply = String::new();
        if BufReader::new(conn).read_line(&mut reply).is_ok() {
            if let Some(why) = reply.trim_end().strip_prefix("error ") {
                bail!("{why}");
            }
        }
        return Err(e).context("cannot send the request to the daemon");
    }
    Ok(BufReader::new(conn))
}

/// One request and its single `done VALUE` line.
fn request(path: &Path, line: &str) -> Result<String> {
    let mut reply = String::new();
    send(path, line)?.read_line(&mut reply).context("the daemon's reply")?;
    let reply = reply.trim_end();
    match reply.split_once(' ').unwrap_or((reply, "")) {
        ("done", v) => Ok(v.to_string()),
        ("error", why) => bail!("{why}"),
        _ => bail!("unexpected reply from the daemon: {reply}"),
    }
}

/// Takes snapshot `name` of the mount whose daemon listens on `path`.
pub fn snapshot_create(path: &Path, name: &[u8]) -> Result<u64> {
    let v = request(path, &format!("snapshot-create {}", hex(name)))?;
    v.parse().map_err(|_| anyhow!("bad epoch '{v}' from the daemon"))
}

/// Deletes snapshot `name` of the mount whose daemon listens on `path`.
pub fn snapshot_delete(path: &Path, name: &[u8]) -> Result<()> {
    request(path, &format!("snapshot-delete {}", hex(name))).map(drop)
}

/// Asks the daemon on `path` to mount snapshot `name` read-only at `mnt`.
pub fn snapshot_mount(path: &Path, name: &[u8], mnt: &Path) -> Result<()> {
    request(
        path,
        &format!("snapshot-mount {} {}", hex(name), hex(mnt.as_os_str().as_bytes())),
    )
    .map(drop)
}

/// The request table of the mount whose daemon listens on `path`.
pub fn stats(path: &Path) -> Result<String> {
    let mut table = String::new();
    for line in send(path, "stats")?.lines() {
        let line = line.context("the daemon's reply")?;
        match line.split_once(' ').unwrap_or((&line, "")) {
            ("line", text) => {
                table.push_str(text);
                table.push('\n');
            }
            ("done", _) => return Ok(table),
            ("error", why) => bail!("{why}"),
            _ => bail!("unexpected reply from the daemon: {line}"),
        }
    }
    bail!("the daemon closed the control channel before the table ended")
}

/// The snapshots of the mount whose daemon listens on `path`.
pub fn snapshot_list(path: &Path) -> Result<Vec<Snapshot>> {
    let mut out = Vec::new();
    for line in send(path, "snapshot-list")?.lines() {
        let line = line.context("the daemon's reply")?;
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[..] {
            ["snapshot", name, epoch, created, held] => {
                let n = |w: &str| w.parse::<u64>().map_err(|_| anyhow!("bad reply line '{line}'"));
                out.push(Snapshot {
                    name: unhex(name)?,
                    epoch: n(epoch)?,
                    created_ns: created.parse().map_err(|_| anyhow!("bad reply line '{line}'"))?,
                    held_pages: n(held)?,
                });
            }
            ["done"] => return Ok(out),
            _ if line.starts_with("error ") => bail!("{}", &line["error ".len()..]),
            _ => bail!("unexpected reply from the daemon: {line}"),
        }
    }
    bail!("the daemon closed the control channel before the list ended")
}

fn scrub(fs: &Fs, rate: u64, stop: &AtomicBool, out: &mut impl Write) -> io::Result<()> {
    tracing::info!(rate, "scrub started from the control channel");
    let opts = ScrubOptions::default().rate((rate > 0).then_some(rate));
    let out = RefCell::new(out);
    // A client that went away, or an unmount, stops the scrub.
    let progress = |done, total| {
        let mut w = out.borrow_mut();
        !stop.load(Ordering::Acquire) && writeln!(w, "progress {done} {total}").and_then(|()| w.flush()).is_ok()
    };
    let result = fs.scrub(opts, &progress);
    let w = out.into_inner();
    match result {
        Ok(rep) => {
            tracing::info!(?rep, "scrub finished");
            for d in &rep.damaged {
                writeln!(w, "damaged {}", encode_damaged(d))?;
            }
            writeln!(w, "done {}", encode(&rep))
        }
        Err(e) => writeln!(w, "error {e}"),
    }
}

/// One damaged object as the words of its `damaged` line.
fn encode_damaged(d: &Damaged) -> String {
    let ranges: Vec<String> = d.ranges.iter().map(|r| format!("{}-{}", r.start, r.end)).collect();
    let (path, others) = d.path.as_ref().map_or(("-".to_string(), 0), |(p, n)| (hex(p), *n));
    format!(
        "{} {} {others} {} {path} {}",
        d.ino,
        u8::from(d.lost),
        if ranges.is_empty() {
            "-".to_string()
        } else {
            ranges.join(",")
        },
        d.why.replace('\n', " ")
    )
}

fn decode_damaged(line: &str) -> Result<Damaged> {
    let bad = || anyhow!("bad damaged line '{line}'");
    let mut w = line.splitn(6, ' ');
    let mut word = || w.next().ok_or_else(bad);
    let num = |s: &str| s.parse::<u64>().map_err(|_| bad());
    let ino = num(word()?)?;
    let lost = word()? == "1";
    let others = num(word()?)?;
    let ranges = match word()? {
        "-" => Vec::new(),
        rs => rs
            .split(',')
            .map(|r| {
                let (a, b) = r.split_once('-').ok_or_else(bad)?;
                Ok(num(a)?..num(b)?)
            })
            .collect::<Result<_>>()?,
    };
    let path = match word()? {
        "-" => None,
        p => Some((unhex(p)?, others)),
    };
    let why = word().unwrap_or_default().to_string();
    Ok(Damaged {
        ino,
        path,
        lost,
        ranges,
        why,
    })
}

/// A report's counters as `key=value` words.
fn encode(r: &ScrubReport) -> String {
    format!(
        "inodes={} pages={} metadata_repaired={} replicas_rewritten={} data_repaired={} stopped={}",
        r.inodes, r.pages, r.metadata_repaired, r.replicas_rewritten, r.data_repaired, r.stopped
    )
}

fn decode(words: &str) -> Result<ScrubReport> {
    let mut r = ScrubReport::default();
    for word in words.split_whitespace() {
        let (k, v) = word.split_once('=').ok_or_else(|| anyhow!("bad reply word '{word}'"))?;
        let n = || v.parse::<u64>().map_err(|_| anyhow!("bad reply value '{word}'"));
        match k {
            "inodes" => r.inodes = n()?,
            "pages" => r.pages = n()?,
            "metadata_repaired" => r.metadata_repaired = n()?,
            "replicas_rewritten" => r.replicas_rewritten = n()?,
            "data_repaired" => r.data_repaired = n()?,
            "stopped" => r.stopped = v == "true",
            _ => {} // a newer daemon's counter
        }
    }
    Ok(r)
}

/// The client's side: asks the daemon listening on `path` to scrub at
/// `rate` bytes per second (0: no limit); `progress(done, total)` sees
/// its progress lines.
pub fn request_scrub(path: &Path, rate: u64, progress: &dyn Fn(u64, u64)) -> Result<ScrubReport> {
    let mut damaged = Vec::new();
    for line in send(path, &format!("scrub {rate}"))?.lines() {
        let line = line.context("the daemon's reply")?;
        let (kind, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        match kind {
            "progress" => {
                let mut it = rest.split_whitespace().map(|w| w.parse::<u64>().unwrap_or(0));
                progress(it.next().unwrap_or(0), it.next().unwrap_or(0));
            }
            "damaged" => damaged.push(decode_damaged(rest)?),
            "done" => {
                let mut rep = decode(rest)?;
                rep.damaged = damaged;
                return Ok(rep);
            }
            "error" => bail!("the daemon says: {rest}"),
            _ => bail!("unexpected reply from the daemon: {line}"),
        }
    }
    bail!("the daemon closed the control channel before the scrub ended (was it unmounted?)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn connect(path: &Path) -> BufReader<UnixStream> {
        let mut conn = UnixStream::connect(path).expect("connect");
        conn.write_all(b"hold\n").expect("send");
        BufReader::new(conn)
    }

    fn line(conn: &mut BufReader<UnixStream>) -> String {
        let mut line = String::new();
        conn.read_line(&mut line).expect("read");
        line
    }

    /// `connect`, again while the server turns it away, until its request
    /// is held (`held` grows): a thread that has answered may not have
    /// ended yet, and counts against the bound until it has.
    fn connect_held(path: &Path, held: &AtomicUsize) -> BufReader<UnixStream> {
        let start = Instant::now();
        loop {
            let before = held.load(Ordering::SeqCst);
            let mut conn = connect(path);
            conn.get_ref()
                .set_read_timeout(Some(Duration::from_millis(10)))
                .expect("timeout");
            loop {
                assert!(start.elapsed() < Duration::from_secs(60), "never held");
                if held.load(Ordering::SeqCst) > before {
                    conn.get_ref().set_read_timeout(None).expect("timeout");
                    return conn;
                }
                let mut reply = String::new();
                match conn.read_line(&mut reply) {
                    Ok(_) if reply == BUSY => break,
                    Ok(_) => panic!("unexpected reply {reply:?}"),
                    Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
                    Err(e) => panic!("read: {e}"),
                }
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits for `cond`; the bound only catches a hang, so it is generous:
    /// threads of a loaded machine (CI beside builds) can wait seconds.
    fn wait_until(what: &str, cond: impl Fn() -> bool) {
        let start = Instant::now();
        while !cond() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "timed out waiting for {what}"
            );
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Requests held by a server bounded to 2 at once: a third is turned
    /// away busy, one after them is served, and `stop` ends the held ones
    /// and waits for their threads, none of which holds what they share
    /// (standing for the file system) afterwards.
    #[test]
    fn requests_beyond_the_bound_are_turned_away_and_stop_joins_the_rest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ctl");
        let held = Arc::new(AtomicUsize::new(0));
        let release = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(());
        let (h, r, s) = (held.clone(), release.clone(), shared.clone());
        let server = Server::listen(&path, 2, move |conn, stop| {
            let _shared = &s;
            let mut request = String::new();
            if BufReader::new(&conn).read_line(&mut request).is_err() {
                return;
            }
            h.fetch_add(1, Ordering::SeqCst);
            while !r.load(Ordering::SeqCst) && !stop.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(5));
            }
            let _ = (&conn).write_all(b"done\n");
        })
        .expect("listen");

        let (mut a, mut b) = (connect(&path), connect(&path));
        wait_until("two requests held", || held.load(Ordering::SeqCst) == 2);
        let err = request(&path, "hold").expect_err("a third is turned away");
        assert_eq!(err.to_string(), "busy: too many control requests, try again");
        let mut c = connect(&path);
        assert_eq!(line(&mut c), BUSY);
        assert_eq!(line(&mut c), "", "closed after the answer");

        release.store(true, Ordering::SeqCst);
        assert_eq!(line(&mut a), "done\n");
        assert_eq!(line(&mut b), "done\n");
        // Served once their threads have ended.
        wait_until("a request served after them", || {
            let mut d = connect(&path);
            let reply = line(&mut d);
            assert!(reply == "done\n" || reply == BUSY, "{reply}");
            reply == "done\n"
        });

        release.store(false, Ordering::SeqCst);
        let before = held.load(Ordering::SeqCst);
        let (mut e, mut f) = (connect_held(&path, &held), connect_held(&path, &held));
        assert_eq!(held.load(Ordering::SeqCst), before + 2);
        assert_eq!(Arc::strong_count(&shared), 2);
        server.stop();
        assert_eq!(Arc::strong_count(&shared), 1, "a thread outlived stop");
        assert_eq!(line(&mut e), "done\n");
        assert_eq!(line(&mut f), "done\n");
        assert!(UnixStream::connect(&path).is_err(), "the socket is gone");
    }
}
