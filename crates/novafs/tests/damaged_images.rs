//! Damaged images: no bad byte anywhere in the metadata may panic, hang,
//! loop, or make inspect, fsck or mount fail with anything but a clear
//! error (DESIGN.md §5: everything read from the media is untrusted).
//!
//! How it works:
//! - The two tests that run by default are supervisors. They build a small
//!   populated image in three states (cleanly unmounted, crashed, crashed
//!   with a committed journal transaction waiting), derive damaged cases
//!   from them, and hand the list to a worker: this test binary started
//!   again as a subprocess (`subprocess_worker`). An abort — an allocation
//!   the capping allocator refused, or the watchdog — kills only the worker;
//!   the supervisor blames the case it was on and starts a new worker after
//!   it, so one run lists every failing case.
//! - A capping global allocator refuses any single allocation above 1 GiB:
//!   a length read from damaged media then aborts at once ("memory
//!   allocation of N bytes failed") instead of eating the machine.
//! - A watchdog aborts a case that runs longer than 20 s (a hang or a loop).
//! - Failing cases are saved to tests/corpus/ as replayable text, one per
//!   distinct failure; `corpus_cases_are_handled` replays the whole corpus.
//!
//! Environment: `NOVAFS_FUZZ_SEED=N` (the seed that otherwise changes every
//! run), `NOVAFS_FUZZ_LONG=1` (many more cases), `NOVAFS_FUZZ_CASES=N`
//! (cases per seed), `NOVAFS_FUZZ_ONLY=SEED[:INDEX]` (only those cases, with
//! the worker's whole output), `NOVAFS_FUZZ_LIST=1` (print the cases, run
//! none), `NOVAFS_FUZZ_SAVE=0` (leave the corpus alone),
//! `NOVAFS_FUZZ_DEADLINE_SECS=N` (the watchdog), `NOVAFS_FUZZ_VERBOSE=1`
//! (the corpus workers' whole output), `RUST_BACKTRACE=1`.
#![allow(clippy::unwrap_used)]

mod damaged;

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use damaged::bases::*;
use damaged::cases::*;
use damaged::jobs::*;
use damaged::run::*;
use damaged::watch::*;

/// The worker: runs the job's cases from index `from` on, writing each
/// case's findings as it goes, so an abort loses nothing but itself.
#[test]
#[ignore = "the worker process of the other tests of this file; they start it"]
fn subprocess_worker() {
    let Ok(job) = std::env::var(ENV_JOB) else {
        return;
    };
    let from: usize = std::env::var(ENV_FROM).unwrap().parse().unwrap();
    let results = std::env::var(ENV_RESULTS).unwrap();
    let progress = std::env::var(ENV_PROGRESS).unwrap();
    install_panic_hook();
    start_watchdog();
    let entries = parse_job(&std::fs::read_to_string(job).unwrap());
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(results)
        .unwrap();
    for (i, entry) in entries.iter().enumerate().skip(from) {
        std::fs::write(&progress, i.to_string()).unwrap();
        eprintln!("@@case {i}");
        let outcome = match entry {
            Entry::Case(case) => {
                let bases = Bases::shared();
                let base = bases.get(case.base);
                if case.layout != base.map.layout() {
                    eprintln!(
                        "damaged_images: case {i} was made on another layout ({:08x}, now {:08x}): \
                         it may not hit what it once did",
                        case.layout,
                        base.map.layout()
                    );
                }
                let expect = Expectations {
                    model: Some(&bases.model),
                    strict: case.strict(&base.map),
                };
                run_case(&case.to_text(), base.bytes.clone(), &case.writes, &case.poisons, expect)
            }
            Entry::Image(path) => {
                let expect = Expectations {
                    model: None,
                    strict: false,
                };
                match gunzip(path) {
                    Ok(img) => run_case(&format!("image {}", path.display()), img, &[], &[], expect),
                    Err(e) => Outcome {
                        findings: vec![Finding {
                            kind: "bad-case".into(),
                            site: "harness".into(),
                            message: format!("{}: {e}", path.display()),
                        }],
                        notes: String::new(),
                    },
                }
            }
        };
        for f in &outcome.findings {
            writeln!(
                out,
                "FIND\t{i}\t{}\t{}\t{}",
                f.kind,
                escape(&f.site),
                escape(&f.message)
            )
            .unwrap();
        }
        writeln!(out, "CASE\t{i}\t{}", outcome.notes).unwrap();
    }
    writeln!(out, "MAXALLOC\t{}", LARGEST.load(Ordering::Relaxed)).unwrap();
    writeln!(out, "DONE").unwrap();
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Seeds that every run tries, besides the one that changes.
const FIXED_SEEDS: [u64; 4] = [1, 2, 3, 0xDA7A];

/// Damaged copies of the base images: every step may fail, none may panic,
/// hang, abort, or fail without saying the image is damaged.
#[test]
fn damaged_images_fail_cleanly() {
    let t0 = Instant::now();
    let run_seed = std::env::var("NOVAFS_FUZZ_SEED")
        .ok()
        .map(|s| parse_num(s.trim()).expect("NOVAFS_FUZZ_SEED is a number"))
        .unwrap_or_else(|| {
            let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
            (t.as_nanos() as u64 ^ u64::from(std::process::id()).rotate_left(32)) % 1_000_000_007
        });
    let long = env_flag("NOVAFS_FUZZ_LONG");
    let per_seed: u64 = std::env::var("NOVAFS_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if long { 2500 } else { 50 });
    let only = std::env::var("NOVAFS_FUZZ_ONLY").ok();
    let mut plan: Vec<(u64, u64)> = Vec::new();
    match &only {
        Some(spec) => {
            let (seed, index) = match spec.split_once(':') {
                Some((s, i)) => (s, Some(i)),
                None => (spec.as_str(), None),
            };
            let seed = parse_num(seed).expect("NOVAFS_FUZZ_ONLY=SEED[:INDEX]");
            match index.map(|i| parse_num(i).expect("NOVAFS_FUZZ_ONLY=SEED[:INDEX]")) {
                Some(i) => plan.push((seed, i)),
                None => plan.extend((0..per_seed).map(|i| (seed, i))),
            }
        }
        None => {
            for seed in FIXED_SEEDS {
                plan.extend((0..per_seed).map(|i| (seed, i)));
            }
            // The changing seed gets as many cases as two fixed ones.
            plan.extend((0..2 * per_seed).map(|i| (run_seed, i)));
        }
    }
    eprintln!(
        "damaged_images: run seed {run_seed} (NOVAFS_FUZZ_SEED={run_seed} repeats this run); fixed seeds \
         {FIXED_SEEDS:?}; {} cases",
        plan.len()
    );
    let bases = Bases::shared();
    for (v, b) in &bases.bases {
        let m = &b.map;
        eprintln!(
            "damaged_images: base {}: layout {:08x}, {} inodes, {} log pages, {} entries, {} chunk pages, \
             {} ring pages, {} saved-state pages",
            v.name(),
            m.layout(),
            m.inodes.len(),
            m.log_pages.len(),
            m.entries.len(),
            m.chunk_pages.len(),
            m.ring_pages.len(),
            m.chain.len()
        );
    }
    let entries: Vec<Entry> = plan
        .iter()
        .map(|&(seed, index)| Entry::Case(generate(bases, seed, index)))
        .collect();
    let labels: Vec<String> = plan
        .iter()
        .zip(&entries)
        .map(|(&(seed, index), e)| match e {
            Entry::Case(c) => format!("NOVAFS_FUZZ_ONLY={seed}:{index} ({} {})", c.base.name(), c.class.name()),
            Entry::Image(_) => unreachable!(),
        })
        .collect();
    if env_flag("NOVAFS_FUZZ_LIST") {
        for (label, e) in labels.iter().zip(&entries) {
            if let Entry::Case(c) = e {
                println!("# {label}\n{}", c.to_text());
            }
        }
        return;
    }
    let sup = supervise("fuzz", &entries, only.is_some());
    let (text, groups) = report(&labels, &entries, &sup);
    eprintln!("damaged_images: {}", summary(&sup, t0.elapsed()));
    if groups.is_empty() {
        return;
    }
    let saved = if std::env::var("NOVAFS_FUZZ_SAVE").as_deref() != Ok("0") {
        save_to_corpus(&entries, &sup, &groups)
    } else {
        Vec::new()
    };
    let saved: Vec<String> = saved.iter().map(|p| p.display().to_string()).collect();
    panic!(
        "{} of {} damaged images were not handled cleanly (run seed {run_seed}); {} distinct failure(s):\n{text}\n\
         new corpus files: {saved:?}\nreproduce one with NOVAFS_FUZZ_ONLY=SEED:INDEX (and RUST_BACKTRACE=1)",
        sup.findings.len(),
        sup.cases,
        groups.len()
    );
}

/// Every image in tests/corpus/ — cases saved as text, whole images
/// gzipped — is handled cleanly.
#[test]
fn corpus_cases_are_handled() {
    let t0 = Instant::now();
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| {
            let n = p.to_string_lossy();
            n.ends_with(".txt") || n.ends_with(".img.gz")
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "the corpus is empty");
    let entries: Vec<Entry> = files
        .iter()
        .map(|p| {
            if p.to_string_lossy().ends_with(".img.gz") {
                Entry::Image(p.clone())
            } else {
                let text = std::fs::read_to_string(p).unwrap();
                Entry::Case(Case::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
            }
        })
        .collect();
    let labels: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let sup = supervise("corpus", &entries, env_flag("NOVAFS_FUZZ_VERBOSE"));
    let (text, groups) = report(&labels, &entries, &sup);
    eprintln!("damaged_images corpus: {}", summary(&sup, t0.elapsed()));
    assert!(
        groups.is_empty(),
        "{} of {} corpus images were not handled cleanly:\n{text}",
        sup.findings.len(),
        entries.len()
    );
}

/// The harness itself: a case survives its text form, and a damaged
/// image the library handles yields no finding.
#[test]
fn harness_round_trips_cases() {
    let bases = Bases::shared();
    for index in 0..20 {
        let c = generate(bases, 99, index);
        let back = Case::parse(&c.to_text()).unwrap();
        assert_eq!(back.to_text(), c.to_text());
    }
    // Both superblocks unreadable: a clear error everywhere, nothing else.
    let base = bases.get(Variant::Clean);
    let out = run_case(
        "both superblocks poisoned",
        base.bytes.clone(),
        &[],
        &[(0, 64), (base.map.replica, 64)],
        Expectations {
            model: Some(&bases.model),
            strict: true,
        },
    );
    assert!(out.findings.is_empty(), "{:?}", out.findings);
    assert!(
        out.notes.contains("strict=true") && out.notes.contains("open-rw=err:Pm"),
        "{}",
        out.notes
    );
}
