//! The control channel of a mount's daemon: a Unix socket beside its
//! state file (in the private state directory), through which commands
//! reach the mounted file system while FUSE keeps serving. One request per
//! connection, one line:
//!
//! - `scrub RATE` (bytes per second, 0 for no limit): answered with lines
//!   `progress DONE TOTAL`, `damaged INO WHY`, then `done KEY=VALUE...`;
//! - `snapshot-create NAME`, `snapshot-delete NAME`: `done EPOCH`;
//! - `snapshot-list`: a line `snapshot NAME EPOCH CREATED_NS HELD_PAGES`
//!   per snapshot, then `done`;
//! - `snapshot-mount NAME MOUNTPOINT`: the daemon serves a read-only mount
//!   of the snapshot there; `done`.
//!
//! Names and paths travel hex-encoded. Any request may be answered
//! `error MESSAGE` instead.

use std::cell::RefCell;
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use anyhow::{anyhow, bail, Context, Result};
use novafs::{Fs, ScrubOptions, ScrubReport, Snapshot};

/// Mounts snapshot NAME of the file system read-only at a mount point
/// (the daemon's `SnapshotMounts`).
pub type MountSnapshot = Box<dyn Fn(&Fs, &[u8], &Path) -> Result<()> + Send>;

/// The daemon's side: a thread answering requests until [`Server::stop`].
pub struct Server {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Listens on `path` (a stale socket of a dead daemon is replaced).
    pub fn start(path: &Path, fs: Arc<Fs>, mount_snapshot: MountSnapshot) -> io::Result<Server> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = thread::Builder::new().name("control".into()).spawn(move || {
            for conn in listener.incoming() {
                if flag.load(Ordering::Acquire) {
                    break;
                }
                match conn {
                    Ok(c) => answer(c, &fs, &flag, &mount_snapshot),
                    Err(e) => tracing::warn!("control channel: {e}"),
                }
            }
        })?;
        Ok(Server {
            path: path.to_path_buf(),
            stop,
            thread: Some(thread),
        })
    }

    /// Ends a running command at its next step and the thread, which then
    /// holds no reference to the file system; removes the socket.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        // Wakes the accept loop, which sees the flag.
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn answer(conn: UnixStream, fs: &Fs, stop: &AtomicBool, mount_snapshot: &MountSnapshot) {
    let mut line = String::new();
    let Ok(reader) = conn.try_clone() else { return };
    if BufReader::new(reader).read_line(&mut line).is_err() {
        return;
    }
    let mut out = io::BufWriter::new(conn);
    let reply = match line.split_whitespace().collect::<Vec<_>>()[..] {
        ["scrub", rate] => match rate.parse::<u64>() {
            Ok(rate) => scrub(fs, rate, stop, &mut out),
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
                mount_snapshot(fs, &n, &mnt)
            });
            reply(&mut out, done.map(|()| ""))
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
    writeln!(conn, "{line}")?;
    Ok(BufReader::new(conn))
}

/// One request and its single `done VALUE` line.
fn request(path: &Path, line: &str) -> Result<String> {
    let mut conn =
        UnixStream::connect(path).with_context(|| format!("cannot reach the daemon at {}", path.display()))?;
    writeln!(conn, "{line}")?;
    let mut reply = String::new();
    BufReader::new(conn)
        .read_line(&mut reply)
        .context("the daemon's reply")?;
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
    let opts = ScrubOptions {
        rate: (rate > 0).then_some(rate),
    };
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
            for (ino, why) in &rep.damaged {
                writeln!(w, "damaged {ino} {}", why.replace('\n', " "))?;
            }
            writeln!(w, "done {}", encode(&rep))
        }
        Err(e) => writeln!(w, "error {e}"),
    }
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
            "damaged" => {
                let (ino, why) = rest.split_once(' ').unwrap_or((rest, ""));
                damaged.push((ino.parse().unwrap_or(0), why.to_string()));
            }
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
