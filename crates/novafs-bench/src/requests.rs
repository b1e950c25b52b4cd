//! The FUSE requests a mount's daemon served, by transport and opcode, read
//! from the table `novafs stats MOUNTPOINT` prints: per transport a title
//! line, a header line, then `OPCODE COUNT WAIT HANDLE REPLY` per opcode
//! seen, the three spans in mean microseconds per request, or `-` when the
//! mount was made without `-o stats`. Tables are separated by a blank line.
//!
//! The daemon's counters only grow while it runs, so the requests of a
//! stretch of a run are the difference of two tables ([`Requests::since`]).
//! To subtract, spans are kept as totals (count × mean). The table prints
//! means to 0.01 µs, so a total is off by at most 0.005 µs × count, and a
//! difference by that on both tables' counts; a span that comes out below
//! zero by that rounding is taken as zero. A leaf: imports nothing of the
//! harness.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};

/// Time of requests in the daemon's three spans, µs: a total over requests,
/// or a mean ([`Row::mean`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spans {
    /// A worker waiting for the request: the kernel's forward trip plus idle time.
    pub wait_us: f64,
    /// Inside novafs.
    pub handle_us: f64,
    /// Sending the reply.
    pub reply_us: f64,
}

impl Spans {
    fn plus(self, o: Spans) -> Spans {
        Spans {
            wait_us: self.wait_us + o.wait_us,
            handle_us: self.handle_us + o.handle_us,
            reply_us: self.reply_us + o.reply_us,
        }
    }

    /// `self - o`, each span at least zero (see the module's note on rounding).
    fn minus(self, o: Spans) -> Spans {
        Spans {
            wait_us: (self.wait_us - o.wait_us).max(0.0),
            handle_us: (self.handle_us - o.handle_us).max(0.0),
            reply_us: (self.reply_us - o.reply_us).max(0.0),
        }
    }
}

/// The requests of one opcode on one transport.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Row {
    pub count: u64,
    /// Total time per span over the `count` requests; `None` when the
    /// daemon did not time them (mounted without `-o stats`).
    pub spans: Option<Spans>,
}

impl Row {
    /// No requests, and (so that adding a timed row keeps its times) no time.
    const ZERO: Row = Row {
        count: 0,
        spans: Some(Spans {
            wait_us: 0.0,
            handle_us: 0.0,
            reply_us: 0.0,
        }),
    };

    fn plus(self, o: Row) -> Row {
        Row {
            count: self.count + o.count,
            spans: self.spans.zip(o.spans).map(|(a, b)| a.plus(b)),
        }
    }

    /// Mean time per request in each span, µs.
    pub fn mean(&self) -> Option<Spans> {
        let n = self.count.max(1) as f64;
        self.spans.map(|s| Spans {
            wait_us: s.wait_us / n,
            handle_us: s.handle_us / n,
            reply_us: s.reply_us / n,
        })
    }
}

/// Requests by (transport, opcode), as the table names them: "/dev/fuse"
/// or "FUSE over io_uring", "LOOKUP".
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Requests {
    rows: BTreeMap<(String, String), Row>,
}

const HEADER: [&str; 5] = ["opcode", "count", "wait_us", "handle_us", "reply_us"];

impl Requests {
    /// Parse the output of `novafs stats`.
    pub fn parse(text: &str) -> Result<Requests> {
        let mut out = Requests::default();
        // The transport of the table being read, and whether its header has been seen.
        let mut table: Option<(String, bool)> = None;
        let mut tables = 0;
        for (i, line) in text.lines().enumerate() {
            let at = || format!("line {} of `novafs stats`: {line:?}", i + 1);
            let words: Vec<&str> = line.split_whitespace().collect();
            if words.is_empty() {
                if table.as_ref().is_some_and(|(_, header)| !header) {
                    bail!("{}: a table without its header", at());
                }
                table = None;
                continue;
            }
            match &mut table {
                None => {
                    // The title, e.g. "FUSE over io_uring (a reply is …)".
                    let transport = line.split(" (").next().unwrap_or(line).trim();
                    table = Some((transport.to_string(), false));
                }
                Some((_, header @ false)) => {
                    if words != HEADER {
                        bail!("{}: expected the header {:?}", at(), HEADER.join(" "));
                    }
                    *header = true;
                    tables += 1;
                }
                Some((transport, true)) => {
                    let (opcode, row) = parse_row(&words).with_context(at)?;
                    let key = (transport.clone(), opcode.to_string());
                    if out.rows.insert(key, row).is_some() {
                        bail!("{}: {opcode} appears twice in one table", at());
                    }
                }
            }
        }
        if table.is_some_and(|(_, header)| !header) || tables == 0 {
            bail!("`novafs stats` printed no table: {text:?}");
        }
        Ok(out)
    }

    /// The requests served between `before` (an earlier table of the same
    /// daemon) and `self`. An error when a counter went back: the daemon
    /// was restarted in between.
    pub fn since(&self, before: &Requests) -> Result<Requests> {
        if let Some((t, op)) = before.rows.keys().find(|k| !self.rows.contains_key(*k)) {
            bail!("{op} on {t} was counted before and is not now: the daemon restarted in between");
        }
        let mut out = Requests::default();
        for (key, after) in &self.rows {
            let b = before.rows.get(key).copied().unwrap_or(Row::ZERO);
            let count = after.count.checked_sub(b.count).with_context(|| {
                format!(
                    "{} on {} went back from {} to {} requests: the daemon restarted in between",
                    key.1, key.0, b.count, after.count
                )
            })?;
            if count == 0 {
                continue;
            }
            let spans = after.spans.zip(b.spans).map(|(a, b)| a.minus(b));
            out.rows.insert(key.clone(), Row { count, spans });
        }
        Ok(out)
    }

    /// Add `other`'s requests to these (the rounds of a workload).
    pub fn add(&mut self, other: &Requests) {
        for (key, r) in &other.rows {
            let e = self.rows.entry(key.clone()).or_insert(Row::ZERO);
            *e = e.plus(*r);
        }
    }

    /// The transports that served requests, most requests first.
    pub fn transports(&self) -> Vec<&str> {
        let mut t: Vec<(&str, u64)> = Vec::new();
        for ((transport, _), r) in &self.rows {
            match t.iter_mut().find(|(name, _)| name == transport) {
                Some((_, n)) => *n += r.count,
                None => t.push((transport, r.count)),
            }
        }
        t.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        t.into_iter().map(|(name, _)| name).collect()
    }

    /// (opcode, row) of the requests `transport` served, most first.
    pub fn rows(&self, transport: &str) -> Vec<(&str, Row)> {
        let mut v: Vec<(&str, Row)> = self
            .rows
            .iter()
            .filter(|((t, _), _)| t == transport)
            .map(|((_, op), r)| (op.as_str(), *r))
            .collect();
        v.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(a.0.cmp(b.0)));
        v
    }

    /// All requests `transport` served, together.
    pub fn total(&self, transport: &str) -> Row {
        self.rows(transport).iter().fold(Row::ZERO, |acc, (_, r)| acc.plus(*r))
    }
}

/// `OPCODE COUNT WAIT HANDLE REPLY`, the spans mean µs or all three `-`.
fn parse_row<'a>(words: &[&'a str]) -> Result<(&'a str, Row)> {
    let [opcode, count, spans @ ..] = words else {
        bail!("expected an opcode and a count");
    };
    if spans.len() != 3 {
        bail!("expected 5 columns, found {}", words.len());
    }
    let count: u64 = count.parse().with_context(|| format!("bad count {count:?}"))?;
    let spans = if spans.iter().all(|s| *s == "-") {
        None
    } else {
        let mut total = [0.0; 3];
        for (t, s) in total.iter_mut().zip(spans) {
            let mean: f64 = s.parse().with_context(|| format!("bad mean {s:?}"))?;
            if !mean.is_finite() || mean < 0.0 {
                bail!("bad mean {s:?}");
            }
            *t = mean * count as f64;
        }
        Some(Spans {
            wait_us: total[0],
            handle_us: total[1],
            reply_us: total[2],
        })
    };
    Ok((opcode, Row { count, spans }))
}

/// The requests of a stretch of a run and the work they served.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Breakdown {
    /// Flowops (filebench's operations) done in the stretch.
    pub flowops: u64,
    pub requests: Requests,
}

impl Breakdown {
    pub fn add(&mut self, other: &Breakdown) {
        self.flowops += other.flowops;
        self.requests.add(&other.requests);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMED: &str = "/dev/fuse
opcode              count    wait_us  handle_us   reply_us
INIT                    1       0.00       0.00       0.00

FUSE over io_uring (a reply is committed by the call that waits for the next request: its time is in wait_us)
opcode              count    wait_us  handle_us   reply_us
LOOKUP                  4      10.00       2.50       0.00
GETATTR                 2     300.25       1.00       0.50
";

    const UNTIMED: &str = "/dev/fuse
opcode              count    wait_us  handle_us   reply_us
LOOKUP                  1          -          -          -
GETXATTR                4          -          -          -
";

    fn spans(wait_us: f64, handle_us: f64, reply_us: f64) -> Option<Spans> {
        Some(Spans {
            wait_us,
            handle_us,
            reply_us,
        })
    }

    fn row(r: &Requests, t: &str, op: &str) -> Row {
        r.rows[&(t.to_string(), op.to_string())]
    }

    #[test]
    fn a_timed_table_gives_totals_per_transport_and_opcode() {
        let r = Requests::parse(TIMED).expect("parse");
        let uring = "FUSE over io_uring";
        assert_eq!(r.transports(), [uring, "/dev/fuse"]);
        assert_eq!(
            r.rows(uring),
            vec![
                (
                    "LOOKUP",
                    Row {
                        count: 4,
                        spans: spans(40.0, 10.0, 0.0)
                    }
                ),
                (
                    "GETATTR",
                    Row {
                        count: 2,
                        spans: spans(600.5, 2.0, 1.0)
                    }
                ),
            ]
        );
        assert_eq!(
            r.rows("/dev/fuse"),
            vec![(
                "INIT",
                Row {
                    count: 1,
                    spans: spans(0.0, 0.0, 0.0)
                }
            )]
        );
        assert_eq!(row(&r, uring, "GETATTR").mean(), spans(300.25, 1.0, 0.5));
        assert_eq!(
            r.total(uring),
            Row {
                count: 6,
                spans: spans(640.5, 12.0, 1.0)
            }
        );
    }

    #[test]
    fn an_untimed_table_gives_counts_without_times() {
        let r = Requests::parse(UNTIMED).expect("parse");
        assert_eq!(row(&r, "/dev/fuse", "GETXATTR"), Row { count: 4, spans: None });
        assert_eq!(r.total("/dev/fuse"), Row { count: 5, spans: None });
        assert_eq!(row(&r, "/dev/fuse", "LOOKUP").mean(), None);
    }

    #[test]
    fn malformed_tables_are_errors() {
        let header = "opcode count wait_us handle_us reply_us";
        for bad in [
            String::new(),
            "/dev/fuse\n".to_string(),
            "/dev/fuse\nopcode count\nLOOKUP 1 - - -\n".to_string(),
            format!("/dev/fuse\n{header}\nLOOKUP 1 - -\n"),
            format!("/dev/fuse\n{header}\nLOOKUP one - - -\n"),
            format!("/dev/fuse\n{header}\nLOOKUP 1 2.0 - -\n"),
            format!("/dev/fuse\n{header}\nLOOKUP 1 2.0 x 1.0\n"),
            format!("/dev/fuse\n{header}\nLOOKUP 1 -2.0 1.0 1.0\n"),
            format!("/dev/fuse\n{header}\nLOOKUP 1 - - -\nLOOKUP 2 - - -\n"),
            format!("/dev/fuse\n{header}\n\nFUSE over io_uring\n\n"),
        ] {
            assert!(Requests::parse(&bad).is_err(), "accepted {bad:?}");
        }
        // The same opcode on two transports is two rows.
        let two = format!("/dev/fuse\n{header}\nLOOKUP 1 - - -\n\nFUSE over io_uring\n{header}\nLOOKUP 2 - - -\n");
        let two = Requests::parse(&two).expect("parse");
        assert_eq!(
            (two.total("/dev/fuse").count, two.total("FUSE over io_uring").count),
            (1, 2)
        );
    }

    #[test]
    fn the_difference_of_two_tables_is_what_was_served_between_them() {
        let header = "opcode count wait_us handle_us reply_us";
        let before = Requests::parse(&format!(
            "/dev/fuse\n{header}\nINIT 1 0.00 0.00 0.00\nLOOKUP 10 5.00 1.00 0.50\nWRITE 3 1.00 1.00 1.00\n"
        ))
        .expect("before");
        let after = Requests::parse(&format!(
            "/dev/fuse\n{header}\nINIT 1 0.00 0.00 0.00\nLOOKUP 30 4.00 2.00 0.50\nWRITE 3 1.00 1.00 1.00\nFSYNC 2 7.00 3.00 1.00\n"
        ))
        .expect("after");
        let d = after.since(&before).expect("since");
        // INIT and WRITE did not change and are left out; LOOKUP: 20
        // requests, 120 - 50 µs waiting, 60 - 10 handling, 15 - 5 replying.
        assert_eq!(
            d.rows("/dev/fuse"),
            vec![
                (
                    "LOOKUP",
                    Row {
                        count: 20,
                        spans: spans(70.0, 50.0, 10.0)
                    }
                ),
                (
                    "FSYNC",
                    Row {
                        count: 2,
                        spans: spans(14.0, 6.0, 2.0)
                    }
                ),
            ]
        );
        assert_eq!(after.since(&after).expect("nothing").transports().len(), 0);
        // A counter that went back or vanished: the daemon restarted.
        assert!(before.since(&after).is_err());
        let restarted = Requests::parse(&format!("/dev/fuse\n{header}\nINIT 1 0.00 0.00 0.00\n")).expect("parse");
        assert!(restarted.since(&before).is_err());
    }

    #[test]
    fn rounding_never_makes_a_span_negative() {
        let header = "opcode count wait_us handle_us reply_us";
        let before = Requests::parse(&format!("/dev/fuse\n{header}\nREAD 1000 2.01 1.00 0.00\n")).expect("before");
        let after = Requests::parse(&format!("/dev/fuse\n{header}\nREAD 1001 2.00 1.00 0.00\n")).expect("after");
        let d = after.since(&before).expect("since");
        assert_eq!(d.total("/dev/fuse").count, 1);
        assert_eq!(d.total("/dev/fuse").spans, spans(0.0, 1.0, 0.0));
    }

    #[test]
    fn rounds_add_up_and_an_untimed_one_drops_the_times() {
        let header = "opcode count wait_us handle_us reply_us";
        let timed = Requests::parse(&format!("/dev/fuse\n{header}\nREAD 2 3.00 1.00 0.50\n")).expect("timed");
        let mut sum = Breakdown {
            flowops: 10,
            requests: timed.clone(),
        };
        sum.add(&Breakdown {
            flowops: 5,
            requests: timed.clone(),
        });
        assert_eq!(sum.flowops, 15);
        assert_eq!(
            sum.requests.total("/dev/fuse"),
            Row {
                count: 4,
                spans: spans(12.0, 4.0, 2.0)
            }
        );
        sum.requests
            .add(&Requests::parse(&format!("/dev/fuse\n{header}\nREAD 1 - - -\n")).expect("untimed"));
        assert_eq!(sum.requests.total("/dev/fuse"), Row { count: 5, spans: None });
    }
}
