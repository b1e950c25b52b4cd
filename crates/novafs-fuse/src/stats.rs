//! Where each request's time goes, per opcode, as the daemon sees it: how
//! long a worker waited for it (the kernel's forward trip plus idle time and
//! queueing), how long the handler took, and how long sending the reply
//! took. Counters are relaxed atomics shared by all workers; a disabled
//! `Stats` reads no clock at all.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Opcodes at or above this share the last row ("other").
const ROWS: usize = 64;

/// Per-opcode request timing of one transport.
pub(crate) struct Stats {
    enabled: bool,
    rows: Box<[Row; ROWS]>,
}

#[derive(Default)]
struct Row {
    count: AtomicU64,
    wait_ns: AtomicU64,
    handle_ns: AtomicU64,
    reply_ns: AtomicU64,
}

/// One request's three spans.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Spans {
    pub wait: Duration,
    pub handle: Duration,
    pub reply: Duration,
}

impl Stats {
    pub(crate) fn new(enabled: bool) -> Stats {
        Stats {
            enabled,
            rows: Box::new(std::array::from_fn(|_| Row::default())),
        }
    }

    /// The clock, read only when timing is on.
    #[inline]
    pub(crate) fn now(&self) -> Option<Instant> {
        self.enabled.then(Instant::now)
    }

    /// Counts one request of `opcode`, whether or not timing is on (the
    /// count alone costs one relaxed add and tells which transport served
    /// what).
    #[inline]
    pub(crate) fn record(&self, opcode: u32, spans: Option<Spans>) {
        let row = &self.rows[(opcode as usize).min(ROWS - 1)];
        row.count.fetch_add(1, Ordering::Relaxed);
        if let Some(s) = spans {
            row.wait_ns.fetch_add(nanos(s.wait), Ordering::Relaxed);
            row.handle_ns.fetch_add(nanos(s.handle), Ordering::Relaxed);
            row.reply_ns.fetch_add(nanos(s.reply), Ordering::Relaxed);
        }
    }

    /// Requests of `opcode` counted so far.
    #[cfg(test)]
    pub(crate) fn count(&self, opcode: u32) -> u64 {
        self.rows[(opcode as usize).min(ROWS - 1)].count.load(Ordering::Relaxed)
    }

    /// All requests counted so far.
    pub(crate) fn total(&self) -> u64 {
        self.rows.iter().map(|r| r.count.load(Ordering::Relaxed)).sum()
    }

    /// A plain-text table: one line per opcode seen, mean microseconds per
    /// request in each span (times only when timing was on).
    pub(crate) fn render(&self, title: &str) -> String {
        let mut out = format!(
            "{title}\n{:<14} {:>10} {:>10} {:>10} {:>10}\n",
            "opcode", "count", "wait_us", "handle_us", "reply_us"
        );
        for (op, row) in self.rows.iter().enumerate() {
            let count = row.count.load(Ordering::Relaxed);
            if count == 0 {
                continue;
            }
            let mean = |ns: &AtomicU64| ns.load(Ordering::Relaxed) as f64 / count as f64 / 1000.0;
            let name = if op == ROWS - 1 {
                "other"
            } else {
                opcode_name(op as u32)
            };
            let _ = if self.enabled {
                writeln!(
                    out,
                    "{name:<14} {count:>10} {:>10.2} {:>10.2} {:>10.2}",
                    mean(&row.wait_ns),
                    mean(&row.handle_ns),
                    mean(&row.reply_ns)
                )
            } else {
                writeln!(out, "{name:<14} {count:>10} {:>10} {:>10} {:>10}", "-", "-", "-")
            };
        }
        out
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The opcode's name in `enum fuse_opcode`, for the table and the trace log.
pub(crate) fn opcode_name(op: u32) -> &'static str {
    const NAMES: [&str; 54] = [
        "0",
        "LOOKUP",
        "FORGET",
        "GETATTR",
        "SETATTR",
        "READLINK",
        "SYMLINK",
        "7",
        "MKNOD",
        "MKDIR",
        "UNLINK",
        "RMDIR",
        "RENAME",
        "LINK",
        "OPEN",
        "READ",
        "WRITE",
        "STATFS",
        "RELEASE",
        "19",
        "FSYNC",
        "SETXATTR",
        "GETXATTR",
        "LISTXATTR",
        "REMOVEXATTR",
        "FLUSH",
        "INIT",
        "OPENDIR",
        "READDIR",
        "RELEASEDIR",
        "FSYNCDIR",
        "GETLK",
        "SETLK",
        "SETLKW",
        "ACCESS",
        "CREATE",
        "INTERRUPT",
        "BMAP",
        "DESTROY",
        "IOCTL",
        "POLL",
        "NOTIFY_REPLY",
        "BATCH_FORGET",
        "FALLOCATE",
        "READDIRPLUS",
        "RENAME2",
        "LSEEK",
        "COPY_FILE_RANGE",
        "SETUPMAPPING",
        "REMOVEMAPPING",
        "SYNCFS",
        "TMPFILE",
        "STATX",
        "COPY_RANGE_64",
    ];
    NAMES.get(op as usize).copied().unwrap_or("other")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disabled_stats_count_but_read_no_clock() {
        let s = Stats::new(false);
        assert!(s.now().is_none());
        s.record(3, None);
        s.record(3, None);
        s.record(1000, None);
        assert_eq!((s.count(3), s.count(63), s.total()), (2, 1, 3));
        let table = s.render("t");
        assert!(table.contains("GETATTR"), "{table}");
        assert!(table.contains("other"), "{table}");
    }

    #[test]
    fn enabled_stats_render_mean_microseconds() {
        let s = Stats::new(true);
        assert!(s.now().is_some());
        let spans = |us| Spans {
            wait: Duration::from_micros(us),
            handle: Duration::from_micros(2 * us),
            reply: Duration::from_micros(3 * us),
        };
        s.record(1, Some(spans(10)));
        s.record(1, Some(spans(30)));
        let table = s.render("dev");
        let line = table.lines().find(|l| l.starts_with("LOOKUP")).expect("a LOOKUP row");
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols, ["LOOKUP", "2", "20.00", "40.00", "60.00"]);
    }
}
