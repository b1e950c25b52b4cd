//! `novafs crashcheck`: the crash-state checker (crates/novafs-crashcheck)
//! from the command line. Without `--all`, the bounded sweep `cargo test`
//! runs; with it, every scenario thoroughly, then random operation
//! sequences (one shard, two shards, relaxed mode, relaxed mode with
//! batching in turn) until `--images` crash images have been checked.
//! `--relaxed` keeps only the relaxed-mode scenarios and sequences
//! (Fortis §4.6), batching ones among them; `--batch` only the batching
//! ones (FGM §III-C1). `--seeds`
//! runs the whole sweep once per seed (a sweep that passes with one seed
//! proves little). Prints the counts and, for each failure, a reproducer.
//! Exit 0: no failures.
//! Mounting crash images makes the core log a warning for every repair;
//! by default only errors reach stderr (`-v` or `RUST_LOG` shows more,
//! `RUST_LOG=off` nothing).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use novafs_crashcheck::damage::Kind;
use novafs_crashcheck::{group, sweep, workload, Config, Stats, Workload};

#[derive(clap::Args)]
pub struct Args {
    /// Long sweep: every scenario with exhaustive enumeration up to 1024 images per crash point, then random sequences.
    #[arg(long)]
    all: bool,
    /// Seed of every random choice (sampled images, random sequences).
    #[arg(long, default_value_t = 0, conflicts_with = "seeds")]
    seed: u64,
    /// Run the sweep once for each of these seeds (e.g. --seeds 7,11,23), each to --images.
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    seeds: Vec<u64>,
    /// Stop once this many crash images have been checked, per seed (default with --all: 100000; --all checks every scenario first whatever the count).
    #[arg(long)]
    images: Option<u64>,
    /// Check only this workload (see --list; also random-SEED-LEN, random2-SEED-LEN, random-relaxed-SEED-LEN and random-batch-SEED-LEN).
    #[arg(long)]
    workload: Option<String>,
    /// Only the relaxed-mode workloads (images formatted relaxed): the scenarios, and with --all relaxed random sequences.
    #[arg(long, conflicts_with = "workload")]
    relaxed: bool,
    /// Only the batching workloads (relaxed images mounted with batching): the scenarios, and with --all random batching sequences.
    #[arg(long, conflicts_with_all = ["workload", "relaxed"])]
    batch: bool,
    /// Check only this crash point of the workload (from a reproducer).
    #[arg(long, requires = "workload")]
    point: Option<usize>,
    /// Check only this image of the crash point (from a reproducer).
    #[arg(long, requires = "point")]
    image: Option<usize>,
    /// Also check each crash image with a media error (reads fail) in one copy (primary or replica, by the seed) of a metadata line the interrupted operation wrote.
    #[arg(long)]
    media_errors: bool,
    /// The same with the copy's line overwritten with garbage that reads back (a scribble: only checksums find it).
    #[arg(long)]
    scribbles: bool,
    /// Worker threads.
    #[arg(long, default_value_t = 1)]
    jobs: usize,
    /// Start no new workload after this many seconds.
    #[arg(long)]
    time_limit: Option<u64>,
    /// Operations per random sequence.
    #[arg(long, default_value_t = 24)]
    sequence_len: usize,
    /// List the workloads and exit.
    #[arg(long)]
    list: bool,
    /// Print every failure, not only the first of each kind.
    #[arg(long)]
    every_failure: bool,
    /// Count failures whose message contains this text apart, as a known and reported bug (repeatable).
    #[arg(long)]
    known_bug: Vec<String>,
}

pub fn run(args: &Args) -> ExitCode {
    if args.list {
        let all = match workload::all() {
            Ok(all) => all,
            Err(e) => {
                eprintln!("novafs: {e}");
                return ExitCode::from(2);
            }
        };
        for w in all {
            println!(
                "{:<32} {} setup ops, {} recorded ops{}",
                w.name,
                w.setup.len(),
                w.ops.len() + 1,
                match (w.relaxed(), w.batch) {
                    (_, Some(b)) => format!(", relaxed mode, batching {} words", b.words),
                    (true, None) => ", relaxed mode".into(),
                    (false, None) => String::new(),
                }
            );
        }
        println!("random-SEED-LEN                  a random sequence of LEN operations");
        println!("random2-SEED-LEN                 the same on two shards, operations spread over both");
        println!("random-relaxed-SEED-LEN          the same in relaxed mode, mostly overwrites inside files");
        println!("random-batch-SEED-LEN            the same in relaxed mode with batching, mostly setattrs");
        return ExitCode::SUCCESS;
    }
    let seeds = if args.seeds.is_empty() {
        vec![args.seed]
    } else {
        args.seeds.clone()
    };
    let mut failed = false;
    let t0 = Instant::now();
    for &seed in &seeds {
        let Some(stats) = run_seed(args, seed) else {
            return ExitCode::from(2);
        };
        failed |= !stats.failures.is_empty();
    }
    if seeds.len() > 1 {
        println!(
            "\ncrashcheck: {} seeds, {} in {:.0}s",
            seeds.len(),
            if failed { "failures found" } else { "0 failures" },
            t0.elapsed().as_secs_f64()
        );
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Every named workload (only the relaxed ones, batching among them,
/// with `--relaxed`; only the batching ones with `--batch`); `None` (said
/// on stderr) when a generated one could not be built.
fn all_or_say(args: &Args) -> Option<Vec<Workload>> {
    if args.batch {
        return Some(workload::batched());
    }
    if args.relaxed {
        return Some(workload::relaxed().into_iter().chain(workload::batched()).collect());
    }
    workload::all().map_err(|e| eprintln!("novafs: {e}")).ok()
}

/// One sweep with `seed`; `None` when the arguments name no workload or
/// one cannot be built.
fn run_seed(args: &Args, seed: u64) -> Option<Stats> {
    let mut cfg = if args.all {
        Config::thorough(seed)
    } else {
        Config::quick(seed)
    };
    cfg.only_point = args.point;
    cfg.known = args.known_bug.clone();
    cfg.only_image = args.image;
    if args.media_errors {
        cfg.damage.push(Kind::MediaError);
    }
    if args.scribbles {
        cfg.damage.push(Kind::Scribble);
    }
    let target = args.images.or(args.all.then_some(100_000));
    // The long sweep checks every scenario whatever the image count, then
    // random sequences until the target is reached.
    let mut scenarios = 0;
    let workloads: Box<dyn Iterator<Item = Workload> + Send> = match &args.workload {
        Some(name) => match workload::by_name(name) {
            Ok(w) => Box::new(std::iter::once(w)),
            Err(e) => {
                eprintln!("novafs: {e}");
                return None;
            }
        },
        None if args.all => {
            let len = args.sequence_len;
            let catalog = all_or_say(args)?;
            scenarios = catalog.len() as u64;
            let (relaxed, batch) = (args.relaxed, args.batch);
            Box::new(catalog.into_iter().chain((0..).map(move |i: u64| {
                // One-shard, two-shard, relaxed and batching sequences in
                // turn (relaxed and batching with --relaxed).
                let s = seed.wrapping_add(i / 4);
                let r = seed.wrapping_add(i / 2);
                match i % 4 {
                    _ if batch => workload::random_batch(seed.wrapping_add(i), len),
                    0 | 2 if relaxed => workload::random_relaxed(r, len),
                    _ if relaxed => workload::random_batch(r, len),
                    0 => workload::random(s, len),
                    1 => workload::random_sharded(s, len),
                    2 => workload::random_relaxed(s, len),
                    _ => workload::random_batch(s, len),
                }
            })))
        }
        None => Box::new(all_or_say(args)?.into_iter()),
    };
    let verbose = args.point.is_some();
    let t0 = Instant::now();
    let limit = args.time_limit.map(Duration::from_secs);
    let stop = |s: &Stats| {
        let enough = s.workloads >= scenarios && target.is_some_and(|t| s.images >= t);
        enough || limit.is_some_and(|l| t0.elapsed() >= l)
    };
    let progress = |name: &str, s: &Stats| {
        println!(
            "{name}: {} crash points, {} images, {} failures ({:.1}s)",
            s.crash_points,
            s.images,
            s.failures.len(),
            s.elapsed.as_secs_f64()
        );
        if verbose {
            for f in &s.failures {
                println!("{f}");
            }
        }
    };
    let stats = sweep(workloads, &cfg, args.jobs, &stop, &progress);
    if !verbose {
        for (sig, n, first) in group(&stats.failures) {
            println!("\n{n} failure(s) of this kind: {sig}\n{first}");
        }
        if args.every_failure {
            for f in &stats.failures {
                println!("{f}");
            }
        }
    }
    println!(
        "\ncrashcheck: seed {seed}: {stats} in {:.0}s",
        t0.elapsed().as_secs_f64()
    );
    Some(stats)
}
