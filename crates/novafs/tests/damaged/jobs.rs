//! What a supervisor hands its worker (a job of cases and images), and the
//! supervisor: it runs the worker as a subprocess, a new one after each
//! abort, and reports, groups and saves what failed.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::cases::*;
use super::run::*;

// ---------------------------------------------------------------------------
// Jobs: what a supervisor hands its worker.

#[derive(Clone, Debug)]
pub enum Entry {
    Case(Case),
    /// A whole damaged image (gzipped), from the corpus.
    Image(PathBuf),
}

pub const JOB_SEPARATOR: &str = "%%";

pub fn job_text(entries: &[Entry]) -> String {
    let mut s = String::new();
    for e in entries {
        match e {
            Entry::Case(c) => s.push_str(&c.to_text()),
            Entry::Image(p) => {
                let _ = writeln!(s, "image {}", p.display());
            }
        }
        let _ = writeln!(s, "{JOB_SEPARATOR}");
    }
    s
}

pub fn parse_job(text: &str) -> Vec<Entry> {
    text.split(&format!("{JOB_SEPARATOR}\n"))
        .filter(|t| !t.trim().is_empty())
        .map(|t| match t.trim().strip_prefix("image ") {
            Some(p) => Entry::Image(PathBuf::from(p)),
            None => Entry::Case(Case::parse(t).unwrap()),
        })
        .collect()
}

pub fn gunzip(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path)?).read_to_end(&mut out)?;
    Ok(out)
}

/// Escapes a message onto one line of the results file.
pub fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n").replace('\t', "\\t")
}

pub fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(o) => out.push(o),
                None => {}
            }
        } else {
            out.push(c);
        }
    }
    out
}

pub const ENV_JOB: &str = "NOVAFS_DAMAGED_WORKER_JOB";
pub const ENV_FROM: &str = "NOVAFS_DAMAGED_WORKER_FROM";
pub const ENV_RESULTS: &str = "NOVAFS_DAMAGED_WORKER_RESULTS";
pub const ENV_PROGRESS: &str = "NOVAFS_DAMAGED_WORKER_PROGRESS";

// ---------------------------------------------------------------------------
// The supervisor.

#[derive(Default)]
pub struct Supervised {
    pub findings: BTreeMap<usize, Vec<Finding>>,
    /// "step=outcome" → cases.
    pub notes: BTreeMap<String, usize>,
    pub cases: usize,
    pub workers: usize,
    pub largest_alloc: usize,
}

/// Runs `entries` in worker processes, a new one after each abort.
/// `echo` prints the workers' whole output.
pub fn supervise(tag: &str, entries: &[Entry], echo: bool) -> Supervised {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("damaged-images-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let job = dir.join("job");
    std::fs::write(&job, job_text(entries)).unwrap();
    let progress = dir.join("progress");
    let mut sup = Supervised::default();
    let mut from = 0;
    while from < entries.len() {
        let results = dir.join(format!("results-{}", sup.workers));
        let _ = std::fs::remove_file(&progress);
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "subprocess_worker",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ENV_JOB, &job)
            .env(ENV_FROM, from.to_string())
            .env(ENV_RESULTS, &results)
            .env(ENV_PROGRESS, &progress)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        sup.workers += 1;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if echo {
            eprint!("{stderr}");
        }
        let mut done = false;
        for line in std::fs::read_to_string(&results).unwrap_or_default().lines() {
            let f: Vec<&str> = line.split('\t').collect();
            match f.as_slice() {
                ["FIND", i, kind, site, msg] => sup.findings.entry(i.parse().unwrap()).or_default().push(Finding {
                    kind: kind.to_string(),
                    site: unescape(site),
                    message: unescape(msg),
                }),
                ["CASE", _, notes] => {
                    sup.cases += 1;
                    for n in notes.split(' ').filter(|n| !n.is_empty()) {
                        *sup.notes.entry(n.to_string()).or_default() += 1;
                    }
                }
                ["MAXALLOC", n] => sup.largest_alloc = sup.largest_alloc.max(n.parse().unwrap()),
                ["DONE"] => done = true,
                _ => {}
            }
        }
        if done && out.status.success() {
            break;
        }
        // The worker died: blame the case it was running.
        let Some(k) = std::fs::read_to_string(&progress)
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
        else {
            panic!("the worker died before its first case ({}):\n{stderr}", out.status);
        };
        let tail = stderr.rsplit(&format!("@@case {k}\n")).next().unwrap_or(&stderr);
        let (kind, site) = tail
            .lines()
            .filter_map(|l| l.strip_prefix("@@abort "))
            .next_back()
            .and_then(|l| l.split_once(' '))
            .map_or(("crash", "unknown".to_string()), |(k, s)| (k, s.to_string()));
        // What the worker said, without std's backtrace after it.
        let message: Vec<&str> = tail
            .lines()
            .take_while(|l| !l.starts_with("stack backtrace:"))
            .filter(|l| !l.starts_with("@@"))
            .collect();
        let message = message[message.len().saturating_sub(40)..].join("\n");
        let message = message.strip_prefix("damaged_images: ").unwrap_or(&message);
        sup.findings.entry(k).or_default().push(Finding {
            kind: kind.to_string(),
            site,
            message: format!("{message}\n(the worker died: {})", out.status),
        });
        sup.cases += 1;
        from = k + 1;
    }
    let _ = std::fs::remove_dir_all(&dir);
    sup
}

pub fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

/// Prints every failure, grouped by signature, and returns the report.
pub fn report(labels: &[String], entries: &[Entry], sup: &Supervised) -> (String, BTreeMap<String, Vec<usize>>) {
    let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (&i, fs) in &sup.findings {
        let mut sigs: Vec<String> = fs.iter().map(Finding::signature).collect();
        sigs.dedup();
        for s in sigs {
            groups.entry(s).or_default().push(i);
        }
    }
    let mut s = String::new();
    for (sig, cases) in &groups {
        let first = cases[0];
        let f = sup.findings[&first].iter().find(|f| f.signature() == *sig).unwrap();
        let _ = writeln!(s, "\n=== {sig}: {} case(s), first: {}", cases.len(), labels[first]);
        let _ = writeln!(s, "site: {}", f.site);
        let _ = writeln!(s, "{}", f.message.trim_end());
        if let Entry::Case(c) = &entries[first] {
            let _ = writeln!(s, "case:\n{}", c.to_text().trim_end());
        }
        let more: Vec<&str> = cases[1..].iter().take(8).map(|&i| labels[i].as_str()).collect();
        if !more.is_empty() {
            let _ = writeln!(s, "also: {}", more.join("; "));
        }
    }
    (s, groups)
}

pub fn summary(sup: &Supervised, elapsed: Duration) -> String {
    let notes: Vec<String> = sup.notes.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    format!(
        "{} cases in {:.1} s, {} worker process(es); largest allocation {} bytes\noutcomes: {}",
        sup.cases,
        elapsed.as_secs_f64(),
        sup.workers,
        sup.largest_alloc,
        notes.join(" ")
    )
}

/// Saves the first case of each failure not already in the corpus.
pub fn save_to_corpus(entries: &[Entry], sup: &Supervised, groups: &BTreeMap<String, Vec<usize>>) -> Vec<PathBuf> {
    let dir = corpus_dir();
    let known: HashSet<String> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .flat_map(|t| {
            t.lines()
                .filter_map(|l| l.strip_prefix("# signature: ").map(str::to_string))
                .collect::<Vec<_>>()
        })
        .collect();
    let mut saved = Vec::new();
    for (sig, cases) in groups {
        let Entry::Case(case) = &entries[cases[0]] else {
            continue;
        };
        if known.contains(sig) {
            continue;
        }
        let f = sup.findings[&cases[0]].iter().find(|f| f.signature() == *sig).unwrap();
        // "panic @ novafs::inode::Meta::apply" → "panic-inode-Meta-apply".
        let stem: String = sig
            .replace("closure", "")
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect::<String>()
            .split('-')
            .filter(|p| !p.is_empty() && *p != "novafs")
            .collect::<Vec<_>>()
            .join("-");
        let origin = case.origin.replace("seed=", "s").replace(" index=", "-i");
        let path = dir.join(format!("{}-{origin}.txt", &stem[..stem.len().min(60)]));
        let first_line = f.message.lines().next().unwrap_or("");
        let text = format!(
            "# Found by tests/damaged_images.rs; replayed by its corpus test.\n\
             # signature: {sig}\n# site: {}\n# message: {first_line}\n{}",
            f.site,
            case.to_text()
        );
        if std::fs::write(&path, text).is_ok() {
            saved.push(path);
        }
    }
    saved
}
