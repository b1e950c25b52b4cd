//! The control channel of a mount's daemon: a Unix socket beside its
//! state file (in the private state directory), through which commands
//! reach the mounted file system while FUSE keeps serving. One request per
//! connection, one line: `scrub RATE` (bytes per second, 0 for no limit).
//! The daemon answers with lines: `progress DONE TOTAL`, `damaged INO WHY`,
//! then `done KEY=VALUE...` or `error MESSAGE`.

use std::cell::RefCell;
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use anyhow::{anyhow, bail, Context, Result};
use novafs::{Fs, ScrubOptions, ScrubReport};

/// The daemon's side: a thread answering requests until [`Server::stop`].
pub struct Server {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Listens on `path` (a stale socket of a dead daemon is replaced).
    pub fn start(path: &Path, fs: Arc<Fs>) -> io::Result<Server> {
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
                    Ok(c) => answer(c, &fs, &flag),
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

fn answer(conn: UnixStream, fs: &Fs, stop: &AtomicBool) {
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
        _ => writeln!(out, "error unknown request '{}'", line.trim()),
    };
    if let Err(e) = reply.and_then(|()| out.flush()) {
        tracing::warn!("control channel: {e}");
    }
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
    let mut conn =
        UnixStream::connect(path).with_context(|| format!("cannot reach the daemon at {}", path.display()))?;
    writeln!(conn, "scrub {rate}")?;
    let mut damaged = Vec::new();
    for line in BufReader::new(conn).lines() {
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
