//! `novafs bench --apps`: NOVA-Fortis Fig. 11's applications, as far as
//! this machine has them. Unmodified programs run on three targets, in
//! rounds that alternate between them: novafs through its FUSE mount,
//! novafs in-process through the preload shim (`novafs exec`), and ext4
//! (data=ordered) on a loop device over /dev/shm; novafs images are on
//! /dev/shm too.
//!
//! The workloads, each timed from outside as whole commands (process
//! start, and for the shim mapping the image, included):
//! - SQLite (the paper's "insert operation"): `sqlite3` runs [`TXNS`]
//!   inserts, each its own transaction, with synchronous=FULL, once in WAL
//!   mode and once with a rollback journal; transactions per second.
//! - Redis (a key-value store in place of the paper's RocksDB and MongoDB):
//!   `redis-server` with appendonly yes and appendfsync always, so every
//!   write reaches its log and is fsync'd before it is answered; one
//!   `redis-benchmark` client issues [`SETS`] SETs; its own ops per second.
//!   Redis is optional: without it the row is reported skipped.
//!
//! Each round writes new files (no deletes), so the targets see the same
//! history. Needs root (loop devices, mounts), /dev/fuse, mkfs.ext4,
//! sqlite3, and the shim built beside this executable.
//!
//! `--apps --protection-settings` runs the same workloads on Fig. 11's
//! other axis instead: the shim on images formatted as the protection
//! ladder's rungs (`bench_ladder`: baseline, MP, MP+DP, relaxed), each
//! against the baseline, as the paper normalises to NOVA. The ladder's
//! write-window rung has no counterpart: the shim maps images without
//! write protection.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use novafs_bench::target::WorkDir;
use novafs_bench::tools::{ensure_tool, find_tool, sh};

use crate::bench::summary;

/// SQLite transactions per run.
const TXNS: usize = 10_000;
/// Bytes in each inserted row's value.
const ROW_BYTES: usize = 100;
/// Redis SETs per run (one client).
const SETS: usize = 20_000;
/// Bytes in each SET's value.
const VALUE_BYTES: usize = 100;
/// Size of each image and of the ext4 file system.
const SIZE_MIB: u64 = 1024;

/// How an image is formatted: a rung of the protection ladder
/// (`bench_ladder`), as far as `novafs mkfs` sets it.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Setting {
    /// No metadata replicas, data checksums or parity (NOVA).
    Baseline,
    /// Metadata replicas.
    Mp,
    /// Replicas, checksums and parity: mkfs's default.
    MpDp,
    /// The default format in relaxed mode (NOVA-Fortis §4.6).
    Relaxed,
}

impl Setting {
    fn name(self) -> &'static str {
        match self {
            Setting::Baseline => "baseline",
            Setting::Mp => "MP",
            Setting::MpDp => "MP+DP",
            Setting::Relaxed => "relaxed",
        }
    }

    fn mkfs_args(self) -> &'static [&'static str] {
        match self {
            Setting::Baseline => &["--no-meta-replicas", "--no-data-checksums", "--no-parity"],
            Setting::Mp => &["--no-data-checksums", "--no-parity"],
            Setting::MpDp => &[],
            Setting::Relaxed => &["--mode", "relaxed"],
        }
    }
}

/// Where a program's files go, and how it is started there.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Target {
    Mount,
    Shim(Setting),
    Ext4,
}

/// The columns of each kind of run, and the ratios it reports: (column,
/// against column, label).
struct Plan {
    targets: &'static [Target],
    ratios: &'static [(usize, usize, &'static str)],
}

const TARGETS: Plan = Plan {
    targets: &[Target::Mount, Target::Shim(Setting::MpDp), Target::Ext4],
    ratios: &[(1, 2, "shim / ext4"), (0, 2, "mount / ext4"), (1, 0, "shim / mount")],
};

const SETTINGS: Plan = Plan {
    targets: &[
        Target::Shim(Setting::Baseline),
        Target::Shim(Setting::Mp),
        Target::Shim(Setting::MpDp),
        Target::Shim(Setting::Relaxed),
    ],
    ratios: &[
        (1, 0, "MP / baseline"),
        (2, 0, "MP+DP / baseline"),
        (3, 0, "relaxed / baseline"),
    ],
};

impl Target {
    fn name(self) -> String {
        match self {
            Target::Mount => "novafs mount (FUSE)".to_string(),
            Target::Shim(s) => format!("novafs exec (shim), {}", s.name()),
            Target::Ext4 => "ext4 data=ordered".to_string(),
        }
    }
}

/// SQLite's two journal modes.
#[derive(Clone, Copy)]
enum Journal {
    Wal,
    Rollback,
}

impl Journal {
    /// The `journal_mode` pragma's value, which sqlite3 prints back.
    fn pragma(self) -> &'static str {
        match self {
            Journal::Wal => "wal",
            Journal::Rollback => "delete",
        }
    }
}

/// The rows of the report, in order.
#[derive(Clone, Copy)]
enum Workload {
    Sqlite(Journal),
    Redis,
}

impl Workload {
    fn label(self) -> String {
        match self {
            Workload::Sqlite(Journal::Wal) => format!("SQLite, {TXNS} inserts, WAL (txn/s)"),
            Workload::Sqlite(Journal::Rollback) => format!("SQLite, {TXNS} inserts, rollback journal (txn/s)"),
            Workload::Redis => format!("Redis SET, AOF fsync always, 1 client, {SETS} ops (ops/s)"),
        }
    }
}

/// The SQL script of one SQLite run: the journal mode and synchronous=FULL,
/// a table, `txns` single-row inserts (each its own transaction, as
/// sqlite3 runs statements outside BEGIN), then the row count.
fn sqlite_script(journal: Journal, txns: usize) -> String {
    let mut s = format!(
        "PRAGMA journal_mode={};\nPRAGMA synchronous=FULL;\nCREATE TABLE kv(k INTEGER PRIMARY KEY, v BLOB);\n",
        journal.pragma()
    );
    for k in 1..=txns {
        s.push_str(&format!("INSERT INTO kv VALUES({k}, randomblob({ROW_BYTES}));\n"));
    }
    s.push_str("SELECT count(*) FROM kv;\n");
    s
}

/// Check sqlite3's output for [`sqlite_script`]: the mode it took, then
/// the row count.
fn check_sqlite_output(out: &str, journal: Journal, txns: usize) -> Result<()> {
    let lines: Vec<&str> = out.lines().map(str::trim).collect();
    let want = [journal.pragma().to_string(), txns.to_string()];
    if lines != want {
        bail!("sqlite3 printed {out:?}, expected {:?}", want.join("\n"));
    }
    Ok(())
}

/// The requests per second in `redis-benchmark --csv` output: the "rps"
/// column of the SET row.
fn parse_redis_csv(out: &str) -> Result<f64> {
    let row = out
        .lines()
        .find(|l| l.starts_with("\"SET\""))
        .with_context(|| format!("no SET row in redis-benchmark output {out:?}"))?;
    let rps = row.split(',').nth(1).context("SET row without a rps column")?;
    rps.trim_matches('"')
        .parse()
        .with_context(|| format!("bad rps {rps:?} in {row:?}"))
}

/// redis-server's arguments: its log under `dir/subdir` with every write
/// fsync'd, no snapshots and no log rewrites (which fork).
fn redis_server_args(port: u16, dir: &Path, subdir: &str) -> Vec<String> {
    let mut args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--dir",
        &dir.to_string_lossy(),
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--appenddirname",
        subdir,
        "--auto-aof-rewrite-percentage",
        "0",
        "--daemonize",
        "no",
    ]
    .map(String::from)
    .to_vec();
    args.extend(["--save".to_string(), String::new()]);
    args
}

/// redis-benchmark's arguments: one client, SETs of random keys.
fn redis_benchmark_args(port: u16, sets: usize) -> Vec<String> {
    [
        "-p",
        &port.to_string(),
        "-t",
        "set",
        "-n",
        &sets.to_string(),
        "-c",
        "1",
        "-r",
        "1000000",
        "-d",
        &VALUE_BYTES.to_string(),
        "--csv",
    ]
    .map(String::from)
    .to_vec()
}

/// ext4 (data=ordered) on a loop device over a file in /dev/shm; unmounted,
/// detached and removed on drop.
struct Ext4 {
    mnt: PathBuf,
    dev: Option<String>,
    image: PathBuf,
}

impl Ext4 {
    fn new(work: &Path) -> Result<Ext4> {
        let mkfs = ensure_tool("mkfs.ext4", "e2fsprogs")?;
        let mut ext4 = Ext4 {
            mnt: work.join("ext4"),
            dev: None,
            image: work.join("ext4.img"),
        };
        std::fs::File::create(&ext4.image)?.set_len(SIZE_MIB << 20)?;
        let dev = sh(Command::new("losetup").arg("-f").arg("--show").arg(&ext4.image))?;
        ext4.dev = Some(dev.clone());
        sh(Command::new(mkfs).args(["-q", "-F", &dev]))?;
        std::fs::create_dir_all(&ext4.mnt)?;
        sh(Command::new("mount")
            .args(["-t", "ext4", "-o", "data=ordered", &dev])
            .arg(&ext4.mnt))?;
        Ok(ext4)
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).output();
        if let Some(dev) = &self.dev {
            let _ = Command::new("losetup").args(["-d", dev]).output();
        }
        let _ = std::fs::remove_file(&self.image);
    }
}

/// The novafs images: one mounted through FUSE if a target needs it, one
/// for the shim per setting; the mount is undone on drop (the files go
/// with the work directory).
struct Novafs {
    exe: PathBuf,
    run_dir: PathBuf,
    mnt: PathBuf,
    mounted: bool,
    /// Per setting: its image and where the shim shows it.
    shims: Vec<(Setting, PathBuf, PathBuf)>,
}

impl Novafs {
    fn new(work: &Path, targets: &[Target]) -> Result<Novafs> {
        let exe = std::env::current_exe().context("cannot find the novafs executable")?;
        let shim = exe.with_file_name("libnovafs_preload.so");
        if !shim.is_file() {
            bail!(
                "{} not found: build it with `cargo build --release -p novafs-preload`",
                shim.display()
            );
        }
        let settings = targets.iter().filter_map(|t| match t {
            Target::Shim(s) => Some(*s),
            _ => None,
        });
        let mut n = Novafs {
            run_dir: work.join("run"),
            mnt: work.join("fuse"),
            mounted: false,
            shims: settings
                .map(|s| {
                    let name = s.name().replace('+', "-");
                    (
                        s,
                        work.join(format!("shim-{name}.img")),
                        work.join(format!("shim-{name}")),
                    )
                })
                .collect(),
            exe,
        };
        let size = format!("{SIZE_MIB}M");
        for (s, img, _) in &n.shims {
            sh(n.cmd().args(["mkfs", "--size", &size]).args(s.mkfs_args()).arg(img))?;
            // The shim refuses an image others can write.
            std::fs::set_permissions(img, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        }
        if !targets.contains(&Target::Mount) {
            return Ok(n);
        }
        let fuse_image = work.join("fuse.img");
        sh(n.cmd().args(["mkfs", "--size", &size]).arg(&fuse_image))?;
        std::fs::create_dir_all(&n.mnt)?;
        // Page tables built before serving: the daemon outlives the rounds,
        // so its first-touch faults are no program's cost.
        sh(n.cmd()
            .args(["mount", "-o", "prefault=now"])
            .arg(&fuse_image)
            .arg(&n.mnt))?;
        n.mounted = true;
        Ok(n)
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new(&self.exe);
        c.env("NOVAFS_RUN_DIR", &self.run_dir);
        c
    }

    /// The image of `setting` and where the shim shows it.
    fn shim(&self, setting: Setting) -> Result<(&Path, &Path)> {
        let (_, img, at) = self
            .shims
            .iter()
            .find(|(s, _, _)| *s == setting)
            .with_context(|| format!("no image formatted {}", setting.name()))?;
        Ok((img, at))
    }
}

impl Drop for Novafs {
    fn drop(&mut self) {
        if self.mounted {
            let _ = self.cmd().arg("umount").arg(&self.mnt).output();
        }
    }
}

/// The set-up targets: where each one's files appear, and how to run a
/// program on it.
struct Targets {
    novafs: Novafs,
    ext4: Option<Ext4>,
}

impl Targets {
    fn root(&self, t: Target) -> Result<&Path> {
        match (t, &self.ext4) {
            (Target::Mount, _) => Ok(&self.novafs.mnt),
            (Target::Shim(s), _) => Ok(self.novafs.shim(s)?.1),
            (Target::Ext4, Some(e)) => Ok(&e.mnt),
            (Target::Ext4, None) => bail!("ext4 was not set up"),
        }
    }

    /// `program args` on target `t`: under `novafs exec` for the shim.
    fn command(&self, t: Target, program: &Path, args: &[String]) -> Result<Command> {
        let mut c = if let Target::Shim(s) = t {
            let (image, at) = self.novafs.shim(s)?;
            let mut c = self.novafs.cmd();
            c.arg("exec")
                .arg("--image")
                .arg(image)
                .arg("--at")
                .arg(at)
                .arg("--")
                .arg(program);
            c
        } else {
            Command::new(program)
        };
        c.args(args);
        Ok(c)
    }
}

/// One SQLite run; transactions per second.
fn run_sqlite(targets: &Targets, t: Target, sqlite: &Path, journal: Journal, script: &str, tag: &str) -> Result<f64> {
    let db = targets.root(t)?.join(format!("{tag}-{}.db", journal.pragma()));
    let start = Instant::now();
    let mut child = targets
        .command(t, sqlite, &[db.to_string_lossy().into_owned()])?
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("start sqlite3")?;
    child
        .stdin
        .take()
        .context("sqlite3's stdin")?
        .write_all(script.as_bytes())?;
    let out = child.wait_with_output()?;
    let secs = start.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "sqlite3 on {}: {}: {}",
            t.name(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    check_sqlite_output(&String::from_utf8_lossy(&out.stdout), journal, TXNS)
        .with_context(|| format!("sqlite3 on {}", t.name()))?;
    Ok(TXNS as f64 / secs)
}

/// The programs Redis's row needs, if installed.
struct Redis {
    server: PathBuf,
    benchmark: PathBuf,
}

/// A running redis-server, killed on drop if it did not shut down.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Send one inline command to Redis and read its first reply line.
fn redis_say(port: u16, command: &str) -> Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(format!("{command}\r\n").as_bytes())?;
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).trim().to_string())
}

/// One Redis run: start the server on target `t`, wait until it answers,
/// run the benchmark, shut the server down; the benchmark's ops per second.
fn run_redis(targets: &Targets, t: Target, redis: &Redis, tag: &str) -> Result<f64> {
    let port = TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port();
    let args = redis_server_args(port, targets.root(t)?, &format!("{tag}-redis"));
    let mut server = Server(
        targets
            .command(t, &redis.server, &args)?
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("start redis-server")?,
    );
    let start = Instant::now();
    while redis_say(port, "PING").map_or(true, |r| r != "+PONG") {
        if let Some(status) = server.0.try_wait()? {
            bail!("redis-server on {} exited ({status}) before answering", t.name());
        }
        if start.elapsed() > Duration::from_secs(30) {
            bail!("redis-server on {} did not answer within 30 s", t.name());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = sh(Command::new(&redis.benchmark).args(redis_benchmark_args(port, SETS)))?;
    let rps = parse_redis_csv(&out)?;
    // The connection closes as the server exits, so the reply may not come.
    let _ = redis_say(port, "SHUTDOWN NOSAVE");
    let status = server.0.wait()?;
    if !status.success() {
        bail!("redis-server on {} exited with {status}", t.name());
    }
    Ok(rps)
}

/// Run the applications for `rounds` interleaved rounds and print the table.
pub fn run(rounds: usize, settings: bool) -> Result<()> {
    let plan = if settings { &SETTINGS } else { &TARGETS };
    let sqlite = find_tool("sqlite3").context("sqlite3 is not installed")?;
    let redis = match (find_tool("redis-server"), find_tool("redis-benchmark")) {
        (Some(server), Some(benchmark)) => Some(Redis { server, benchmark }),
        _ => {
            println!("redis-server or redis-benchmark not installed: Redis skipped");
            None
        }
    };
    let mut workloads = vec![Workload::Sqlite(Journal::Wal), Workload::Sqlite(Journal::Rollback)];
    if redis.is_some() {
        workloads.push(Workload::Redis);
    }
    let work_path = PathBuf::from(format!("/dev/shm/novafs-bench-apps.{}", std::process::id()));
    let _work = WorkDir::new(work_path.clone())?;
    // Declared after `_work`, so dropped (unmounted) before it is removed.
    let targets = Targets {
        novafs: Novafs::new(&work_path, plan.targets)?,
        ext4: match plan.targets.contains(&Target::Ext4) {
            true => Some(Ext4::new(&work_path)?),
            false => None,
        },
    };
    let scripts = [Journal::Wal, Journal::Rollback].map(|j| sqlite_script(j, TXNS));
    // results[workload][target]: one value per round.
    let mut results = vec![vec![Vec::with_capacity(rounds); plan.targets.len()]; workloads.len()];
    let bar = ProgressBar::new((rounds * plan.targets.len() * workloads.len()) as u64);
    bar.set_style(
        ProgressStyle::with_template("{msg} {bar:30} {pos}/{len}").unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    for r in 0..rounds {
        for (ti, &t) in plan.targets.iter().enumerate() {
            for (wi, &w) in workloads.iter().enumerate() {
                bar.set_message(format!("round {} {}", r + 1, t.name()));
                let tag = format!("r{r}");
                let v = match (w, &redis) {
                    (Workload::Sqlite(j), _) => {
                        let script = &scripts[matches!(j, Journal::Rollback) as usize];
                        run_sqlite(&targets, t, &sqlite, j, script, &tag)?
                    }
                    (Workload::Redis, Some(redis)) => run_redis(&targets, t, redis, &tag)?,
                    (Workload::Redis, None) => unreachable!("Redis runs only when installed"),
                };
                results[wi][ti].push(v);
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    println!(
        "Applications (NOVA-Fortis Fig. 11): medians of {rounds} interleaved rounds; {}; images and loop device on /dev/shm\n",
        std::fs::read_to_string("/proc/sys/kernel/osrelease").map_or_else(|_| "kernel ?".into(), |k| format!("kernel {}", k.trim()))
    );
    println!("{}", table(plan, &workloads, &results)?);
    Ok(())
}

/// The report: one row per workload, a column per target (median, and the
/// range over the rounds), then the plan's ratios of medians.
fn table(plan: &Plan, workloads: &[Workload], results: &[Vec<Vec<f64>>]) -> Result<String> {
    let mut s = String::from("| workload |");
    for t in plan.targets {
        s.push_str(&format!(" {} |", t.name()));
    }
    for (_, _, label) in plan.ratios {
        s.push_str(&format!(" {label} |"));
    }
    s.push_str("\n|---|");
    s.push_str(&"---|".repeat(plan.targets.len() + plan.ratios.len()));
    s.push('\n');
    for (w, per_target) in workloads.iter().zip(results) {
        let mut medians = Vec::new();
        s.push_str(&format!("| {} |", w.label()));
        for v in per_target {
            let m = summary(v)?;
            s.push_str(&format!(" {:.0} ({:.0}–{:.0}) |", m.median, m.min, m.max));
            medians.push(m.median);
        }
        for &(a, b, _) in plan.ratios {
            s.push_str(&format!(" {:.2}× |", medians[a] / medians[b]));
        }
        s.push('\n');
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_script_has_one_transaction_per_insert() {
        let s = sqlite_script(Journal::Wal, 3);
        assert!(s.starts_with("PRAGMA journal_mode=wal;\nPRAGMA synchronous=FULL;\n"));
        assert_eq!(s.matches("INSERT INTO kv").count(), 3);
        assert!(!s.contains("BEGIN"));
        assert!(s.ends_with("SELECT count(*) FROM kv;\n"));
        assert!(sqlite_script(Journal::Rollback, 1).starts_with("PRAGMA journal_mode=delete;"));
    }

    #[test]
    fn sqlite_output_must_show_mode_and_count() {
        assert!(check_sqlite_output("wal\n2000\n", Journal::Wal, 2000).is_ok());
        assert!(check_sqlite_output("delete\n5\n", Journal::Rollback, 5).is_ok());
        // A file system that cannot do WAL makes sqlite3 fall back quietly.
        assert!(check_sqlite_output("delete\n5\n", Journal::Wal, 5).is_err());
        assert!(check_sqlite_output("wal\n4\n", Journal::Wal, 5).is_err());
        assert!(check_sqlite_output("", Journal::Wal, 5).is_err());
    }

    #[test]
    fn redis_csv_gives_the_set_rows_rps() {
        let out = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\"\n\"SET\",\"12345.68\",\"0.071\",\"0.040\"\n";
        assert_eq!(parse_redis_csv(out).unwrap(), 12345.68);
        assert!(parse_redis_csv("\"GET\",\"1.0\"\n").is_err());
        assert!(parse_redis_csv("\"SET\",\"fast\"\n").is_err());
    }

    #[test]
    fn redis_commands_fsync_every_write_and_never_fork() {
        let a = redis_server_args(7000, Path::new("/m"), "r0-redis");
        let pair = |k: &str| a.iter().position(|x| x == k).map(|i| a[i + 1].as_str());
        assert_eq!(pair("--appendfsync"), Some("always"));
        assert_eq!(pair("--appendonly"), Some("yes"));
        assert_eq!(pair("--save"), Some(""));
        assert_eq!(pair("--auto-aof-rewrite-percentage"), Some("0"));
        assert_eq!(pair("--dir"), Some("/m"));
        let b = redis_benchmark_args(7000, 10);
        assert_eq!(b.join(" "), "-p 7000 -t set -n 10 -c 1 -r 1000000 -d 100 --csv");
    }

    #[test]
    fn table_has_ratios_against_ext4() {
        let results = vec![vec![vec![100.0], vec![400.0], vec![200.0]]];
        let t = table(&TARGETS, &[Workload::Redis], &results).unwrap();
        assert!(
            t.contains("| shim / ext4 | mount / ext4 | shim / mount |\n|---|---|---|---|---|---|---|\n"),
            "{t}"
        );
        assert!(
            t.contains("| 100 (100–100) | 400 (400–400) | 200 (200–200) | 2.00× | 0.50× | 4.00× |"),
            "{t}"
        );
    }

    #[test]
    fn the_settings_table_is_against_the_baseline() {
        let results = vec![vec![vec![100.0], vec![80.0], vec![50.0], vec![120.0]]];
        let t = table(&SETTINGS, &[Workload::Redis], &results).unwrap();
        assert!(
            t.contains("| novafs exec (shim), baseline | novafs exec (shim), MP |"),
            "{t}"
        );
        assert!(t.contains("| 0.80× | 0.50× | 1.20× |"), "{t}");
    }

    #[test]
    fn each_setting_formats_its_rung_of_the_ladder() {
        use crate::bench_ladder::ladder;
        let rungs = ladder(pm::WriteProtect::Mprotect);
        for s in [Setting::Baseline, Setting::Mp, Setting::MpDp, Setting::Relaxed] {
            let rung = rungs.iter().find(|c| c.name == s.name()).unwrap();
            let args = s.mkfs_args();
            assert_eq!(
                !args.contains(&"--no-meta-replicas"),
                rung.format.meta_replicas,
                "{s:?}"
            );
            assert_eq!(!args.contains(&"--no-data-checksums"), rung.format.data_csum, "{s:?}");
            assert_eq!(!args.contains(&"--no-parity"), rung.format.data_parity, "{s:?}");
            let relaxed = rung.format.consistency == novafs::Consistency::Relaxed;
            assert_eq!(args.contains(&"relaxed"), relaxed, "{s:?}");
        }
    }
}
