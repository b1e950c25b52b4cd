//! `novafs inject` from the command line: each target damages what it says
//! (one line per copy naming the structure and the region offsets), fsck's
//! exit code tells whether the damage is detected (or, with metadata
//! replicas, read around), `--poison` writes the sidecar bad-block list that
//! mapped images honour, and bad requests get one line and exit 2.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, MutexGuard};

use novafs::{FormatOptions, Fs, MountOptions, ROOT_INO};
use pm::{BadBlocks, MapOptions, MmapRegion, Region};

fn novafs(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_novafs")).args(args).output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).trim().to_string()
}

/// A scratch directory, held by one test at a time. The tests both hold
/// images open in this process (locked with `flock`) and start `novafs`
/// processes: a child started while another test's image is open keeps its
/// lock until the child's exec, long enough on a loaded machine for that
/// test's next `novafs` or mount to find the image "in use".
struct Scratch {
    dir: tempfile::TempDir,
    _serial: MutexGuard<'static, ()>,
}

impl std::ops::Deref for Scratch {
    type Target = tempfile::TempDir;

    fn deref(&self) -> &tempfile::TempDir {
        &self.dir
    }
}

fn scratch() -> Scratch {
    static SERIAL: Mutex<()> = Mutex::new(());
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::Builder::new()
        .prefix("novafs-inject-")
        .tempdir_in("/dev/shm")
        .unwrap();
    Scratch { dir, _serial: serial }
}

fn mount(img: &str) -> Fs {
    let region = MmapRegion::open(Path::new(img), &MapOptions::default()).unwrap();
    Fs::open(Arc::new(region), MountOptions::default()).unwrap()
}

/// A 32 MiB image made by `novafs mkfs` (with metadata replicas, its
/// default) with a file "f" of two pages ('F' then 'G'). Returns the image
/// path and the file's inode number.
fn populated(dir: &tempfile::TempDir) -> (String, u64) {
    let img = dir.path().join("base.img").to_str().unwrap().to_string();
    let o = novafs(&["mkfs", "--size", "32M", "--shards", "2", &img]);
    assert!(o.status.success(), "{}", stderr(&o));
    (img.clone(), fill(&img))
}

/// [`populated`] without metadata replicas (only the library makes such
/// images).
fn populated_without_replicas(dir: &tempfile::TempDir) -> (String, u64) {
    let img = dir.path().join("plain.img").to_str().unwrap().to_string();
    let region = MmapRegion::create(Path::new(&img), 32 << 20, &MapOptions::default()).unwrap();
    let opts = FormatOptions::default().shards(2).meta_replicas(false);
    Fs::format(Arc::new(region), &opts).unwrap();
    (img.clone(), fill(&img))
}

fn fill(img: &str) -> u64 {
    let fs = mount(img);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    let mut data = vec![b'F'; 4096];
    data.resize(8192, b'G');
    fs.write(f, 0, &data).unwrap();
    fs.unmount().unwrap();
    f
}

/// The `(offset, length)` of each range a line of `novafs inject` names
/// ("region offsets 0xA..0xB").
fn ranges(out: &str) -> Vec<(usize, usize)> {
    out.lines()
        .map(|l| {
            let (_, rest) = l.split_once("region offsets 0x").unwrap();
            let (a, rest) = rest.split_once("..0x").unwrap();
            let b = rest.split(|c: char| !c.is_ascii_hexdigit()).next().unwrap();
            let a = usize::from_str_radix(a, 16).unwrap();
            (a, usize::from_str_radix(b, 16).unwrap() - a)
        })
        .collect()
}

fn read_f(fs: &Fs, f: u64) -> Vec<u8> {
    let mut buf = vec![0u8; 8192];
    let n = fs.read(f, 0, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

fn copy_of(dir: &tempfile::TempDir, base: &str, name: &str) -> String {
    let img = dir.path().join(name).to_str().unwrap().to_string();
    std::fs::copy(base, &img).unwrap();
    img
}

fn fsck_code(img: &str) -> Option<i32> {
    novafs(&["fsck", img]).status.code()
}

/// What fsck makes of an injection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// Exit 0.
    Clean,
    /// Exit 1, the problems being metadata pages that differ from their
    /// replicas and, if the damaged copy was read, that it was read from
    /// the replica: one copy is damaged, the other was read.
    CopiesDiffer,
    /// Exit 1 with some other problem: the damage is what fsck reports.
    Problem,
    /// Exit 0 or 1.
    Either,
}

/// fsck's exit code and its report of `img`.
fn fsck(img: &str) -> (Option<i32>, String) {
    let o = novafs(&["fsck", img]);
    (o.status.code(), format!("{}\n{}", stdout(&o), stderr(&o)))
}

fn assert_verdict(img: &str, want: Verdict, why: &dyn std::fmt::Display) {
    let (code, out) = fsck(img);
    let problems: Vec<&str> = out.lines().filter(|l| l.contains(": PROBLEM: ")).collect();
    let ok = match want {
        Verdict::Clean => code == Some(0),
        Verdict::CopiesDiffer => {
            code == Some(1)
                && problems
                    .iter()
                    .filter(|p| p.contains("differ from their replicas"))
                    .count()
                    == 1
                && problems
                    .iter()
                    .all(|p| p.contains("differ from their replicas") || p.contains("read from their replicas"))
        }
        Verdict::Problem => {
            code == Some(1)
                && problems
                    .iter()
                    .any(|p| !p.contains("differ from their replicas") && !p.contains("read from their replicas"))
        }
        Verdict::Either => matches!(code, Some(0 | 1)),
    };
    assert!(ok, "{why}: want {want:?}, fsck exit {code:?}:\n{out}");
}

#[test]
fn each_target_prints_what_it_changed_and_fsck_judges_it() {
    let dir = scratch();
    let (base, f) = populated(&dir);
    assert_verdict(&base, Verdict::Clean, &"the undamaged image");
    let ino = f.to_string();
    use Verdict::*;
    // (arguments, what the first line names, what fsck says afterwards).
    // The image keeps metadata replicas: fsck reads a damaged primary
    // record or log from its replica, and on a cleanly unmounted image
    // reports one copy that differs from the other as a problem (exit 1)
    // for `fsck --repair` (or the next mount, for a damaged primary).
    // Only damage to both copies loses the inode.
    let cases: &[(&[&str], &str, Verdict)] = &[
        // One copy is gone: a problem until fsck --repair rewrites it.
        (&["--target", "superblock"], "superblock (primary) at 0x0", Problem),
        (
            &["--target", "inode", "--ino", &ino],
            &format!("inode {f} record (primary) at"),
            CopiesDiffer,
        ),
        (
            &["--target", "inode", "--ino", &ino, "--which", "replica"],
            &format!("inode {f} record (replica) at"),
            CopiesDiffer,
        ),
        (
            &["--target", "inode", "--ino", &ino, "--which", "both"],
            &format!("inode {f} record (primary) at"),
            Problem,
        ),
        (
            &["--target", "log-entry", "--ino", &ino, "--bytes", "64"],
            &format!("inode {f} log entry ("),
            CopiesDiffer,
        ),
        (
            &[
                "--target",
                "log-entry",
                "--ino",
                &ino,
                "--bytes",
                "64",
                "--which",
                "both",
            ],
            &format!("inode {f} log entry ("),
            Problem,
        ),
        (
            &["--target", "log-page", "--ino", &ino, "--bytes", "4096"],
            &format!("inode {f} log page (primary) at"),
            CopiesDiffer,
        ),
        // Aimed at what is read, a few bytes of the page are enough.
        (
            &["--target", "log-page", "--ino", &ino, "--live"],
            &format!("inode {f} log page (primary) at"),
            CopiesDiffer,
        ),
        (
            &[
                "--target", "log-page", "--ino", &ino, "--bytes", "4096", "--which", "both",
            ],
            &format!("inode {f} log page (primary) at"),
            Problem,
        ),
        // Seed 1 picks the inode-table heads of the fixed area: a damaged
        // primary chain is read from the replica's.
        (
            &["--target", "fixed-area", "--bytes", "16"],
            "fixed area: inode-table heads (primary)",
            CopiesDiffer,
        ),
        (
            &["--target", "fixed-area", "--bytes", "16", "--which", "replica"],
            "fixed area: inode-table heads (replica)",
            CopiesDiffer,
        ),
        // Mostly stale ring bytes: detected or harmless, never a crash.
        (&["--target", "journal", "--seed", "3"], "journal ", Either),
        // fsck checks every strip against its checksums: parity rebuilds it.
        (
            &["--target", "data-page", "--ino", &ino],
            &format!("inode {f} data page (file page "),
            Problem,
        ),
    ];
    for (i, (args, names, verdict)) in cases.iter().enumerate() {
        let img = copy_of(&dir, &base, &format!("case{i}.img"));
        let mut all = vec!["inject", img.as_str()];
        all.extend_from_slice(args);
        let o = novafs(&all);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        let out = stdout(&o);
        let copies = if args.contains(&"both") { 2 } else { 1 };
        assert_eq!(out.lines().count(), copies, "{out}");
        assert!(out.lines().all(|l| l.starts_with(&format!("{img}: changed "))), "{out}");
        assert!(
            out.contains(names) && out.contains("region offsets 0x"),
            "{args:?}: {out}"
        );
        if copies == 2 {
            assert!(out.lines().nth(1).unwrap().contains("(replica) at "), "{out}");
        }
        assert_ne!(std::fs::read(&img).unwrap(), std::fs::read(&base).unwrap(), "{args:?}");
        assert_verdict(&img, *verdict, &format_args!("{args:?}: {out}"));
    }
}

#[test]
fn both_superblock_copies_damaged_make_fsck_fail() {
    let dir = scratch();
    let (base, _) = populated(&dir);
    let img = copy_of(&dir, &base, "both.img");
    let o = novafs(&["inject", &img, "--target", "superblock", "--which", "both"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.lines().next().unwrap().contains("superblock (primary)"), "{out}");
    assert!(out.lines().nth(1).unwrap().contains("superblock (replica)"), "{out}");
    assert_ne!(fsck_code(&img), Some(0));
    let o = novafs(&["info", &img]);
    assert!(!o.status.success());
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
}

#[test]
fn the_same_seed_damages_the_same_bytes() {
    let dir = scratch();
    let (base, f) = populated(&dir);
    let ino = f.to_string();
    let mut images = Vec::new();
    for (i, seed) in ["7", "7", "8"].iter().enumerate() {
        let img = copy_of(&dir, &base, &format!("s{i}.img"));
        let o = novafs(&["inject", &img, "--target", "log-page", "--ino", &ino, "--seed", seed]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        images.push(std::fs::read(&img).unwrap());
    }
    assert_eq!(images[0], images[1]);
    assert_ne!(images[0], images[2]);
}

#[test]
fn poison_of_a_data_page_writes_the_sidecar_and_reads_fail_until_it_is_removed() {
    let dir = scratch();
    let (img, f) = populated(&dir);
    let before = std::fs::read(&img).unwrap();
    let ino = f.to_string();
    let o = novafs(&["inject", &img, "--target", "data-page", "--ino", &ino, "--poison"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let sidecar = BadBlocks::sidecar(Path::new(&img));
    assert!(out.contains("poisoned") && out.contains(".badblocks"), "{out}");
    assert_eq!(std::fs::read(&img).unwrap(), before, "poison changes no byte");
    let list = std::fs::read_to_string(&sidecar).unwrap();
    assert_eq!(list.lines().count(), 1, "{list}");
    // Every mapping of the image honours it. A few poisoned bytes lie in
    // one strip: rebuilt from the page's parity (mkfs's default).
    let fs = mount(&img);
    let mut buf = vec![0u8; 8192];
    assert_eq!(fs.read(f, 0, &mut buf).unwrap(), 8192);
    assert_eq!((&buf[..4096], &buf[4096..]), (&[b'F'; 4096][..], &[b'G'; 4096][..]));
    assert!(fs.health().data_repairs > 0);
    fs.unmount().unwrap();
    // A whole poisoned page is more than parity rebuilds: EIO.
    let o = novafs(&[
        "inject",
        &img,
        "--target",
        "data-page",
        "--ino",
        &ino,
        "--poison",
        "--bytes",
        "4096",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let fs = mount(&img);
    assert_eq!(fs.read(f, 0, &mut buf).unwrap_err().errno(), libc::EIO);
    fs.unmount().unwrap();
    // fsck checks file data: it names the file and the bytes lost.
    let (code, report) = fsck(&img);
    assert_eq!(code, Some(1), "{report}");
    let named = ["0..4096", "4096..8192"].map(|r| format!("inode {f} (/f): bytes {r} cannot be rebuilt"));
    assert!(named.iter().any(|n| report.contains(n)), "{report}");
    assert!(report.contains("restore them from a snapshot or a backup"), "{report}");
    std::fs::remove_file(&sidecar).unwrap();
    let fs = mount(&img);
    assert_eq!(fs.read(f, 0, &mut buf).unwrap(), 8192);
    assert_eq!(&buf[..4096], &[b'F'; 4096]);
    fs.unmount().unwrap();
}

#[test]
fn poisoned_metadata_makes_fsck_say_how_to_clear_it() {
    let dir = scratch();
    let (img, _) = populated(&dir);
    let o = novafs(&["inject", &img, "--target", "superblock", "--which", "both", "--poison"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().count(), 2);
    let o = novafs(&["fsck", &img]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("rm ") && stderr(&o).contains(".badblocks"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_file(BadBlocks::sidecar(Path::new(&img))).unwrap();
    assert_eq!(fsck_code(&img), Some(0));
}

#[test]
fn a_poisoned_primary_log_entry_is_read_from_its_replica() {
    let dir = scratch();
    let (img, f) = populated(&dir);
    let ino = f.to_string();
    let o = novafs(&["inject", &img, "--target", "log-entry", "--ino", &ino, "--poison"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("(primary)"), "{}", stdout(&o));
    let fs = mount(&img);
    assert_eq!(&read_f(&fs, f)[4096..], &[b'G'; 4096]);
    fs.unmount().unwrap();
    // fsck reads around the media error too, and reports the unreadable
    // copy as copies that differ; clearing the emulated poison ends it.
    assert_verdict(&img, Verdict::CopiesDiffer, &"a poisoned primary log entry");
    std::fs::remove_file(BadBlocks::sidecar(Path::new(&img))).unwrap();
    assert_eq!(fsck_code(&img), Some(0));
}

#[test]
fn a_damaged_primary_is_read_from_its_replica_and_a_mount_repairs_it() {
    let dir = scratch();
    let (base, f) = populated(&dir);
    let ino = f.to_string();
    let base_bytes = std::fs::read(&base).unwrap();
    for target in ["inode", "log-entry"] {
        let img = copy_of(&dir, &base, &format!("{target}.img"));
        let o = novafs(&["inject", &img, "--target", target, "--ino", &ino, "--bytes", "32"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let out = stdout(&o);
        let [(off, len)] = ranges(&out)[..] else {
            panic!("{out}")
        };
        assert_ne!(std::fs::read(&img).unwrap()[off..off + len], base_bytes[off..off + len]);
        assert_verdict(&img, Verdict::CopiesDiffer, &out);
        assert!(fsck(&img).1.contains("read from their replicas"), "{out}");
        let fs = mount(&img);
        assert_eq!(&read_f(&fs, f)[4096..], &[b'G'; 4096]);
        fs.unmount().unwrap();
        assert_eq!(
            std::fs::read(&img).unwrap()[off..off + len],
            base_bytes[off..off + len],
            "{out}: the mount copied the replica back"
        );
        assert_eq!(fsck_code(&img), Some(0), "{out}");
    }
}

#[test]
fn a_damaged_replica_is_rewritten_by_fsck_repair() {
    let dir = scratch();
    let (base, f) = populated(&dir);
    let ino = f.to_string();
    let base_bytes = std::fs::read(&base).unwrap();
    let img = copy_of(&dir, &base, "replica.img");
    let o = novafs(&[
        "inject",
        &img,
        "--target",
        "log-entry",
        "--ino",
        &ino,
        "--bytes",
        "32",
        "--which",
        "replica",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let [(off, len)] = ranges(&out)[..] else {
        panic!("{out}")
    };
    let fs = mount(&img);
    assert_eq!(&read_f(&fs, f)[..4096], &[b'F'; 4096]);
    fs.unmount().unwrap();
    // A mount reads the sound primary and leaves the replica as it is.
    assert_ne!(std::fs::read(&img).unwrap()[off..off + len], base_bytes[off..off + len]);
    assert_verdict(&img, Verdict::CopiesDiffer, &out);
    let o = novafs(&["fsck", "--repair", &img]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert_eq!(std::fs::read(&img).unwrap()[off..off + len], base_bytes[off..off + len]);
    assert_eq!(fsck_code(&img), Some(0));
}

#[test]
fn without_replicas_primary_damage_fails_and_replicas_are_refused() {
    let dir = scratch();
    let (base, f) = populated_without_replicas(&dir);
    assert_eq!(fsck_code(&base), Some(0));
    let ino = f.to_string();
    for (target, names) in [("inode", "record at"), ("log-entry", "log entry (")] {
        let img = copy_of(&dir, &base, &format!("{target}.img"));
        let o = novafs(&["inject", &img, "--target", target, "--ino", &ino, "--bytes", "64"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(stdout(&o).contains(&format!("inode {f} {names}")), "{}", stdout(&o));
        assert!(!stdout(&o).contains("(primary)"), "one copy: not named");
        assert_eq!(fsck_code(&img), Some(1), "{}", stdout(&o));
    }
    let before = std::fs::read(&base).unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["--target", "inode", "--which", "replica"],
            "no replica of inode records (it was made without metadata replicas)",
        ),
        (
            &["--target", "log-page", "--which", "both", "--ino", &ino],
            "no replica of log pages",
        ),
        (
            &["--target", "fixed-area", "--which", "replica"],
            "no replica of the fixed area",
        ),
    ];
    for (args, says) in cases {
        let mut all = vec!["inject", base.as_str()];
        all.extend_from_slice(args);
        let o = novafs(&all);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
    assert_eq!(std::fs::read(&base).unwrap(), before, "image untouched");
}

/// `--target log-page`'s help says where its damage lands by default, and
/// what `--live` changes.
#[test]
fn log_page_help_says_the_default_may_miss_what_is_read() {
    let help = stdout(&novafs(&["inject", "--help"]));
    assert!(help.contains("past the log's tail, where nothing reads it"), "{help}");
    assert!(help.contains("--live"), "{help}");
}

#[test]
fn bad_requests_get_one_line_and_exit_2() {
    let dir = scratch();
    let (img, f) = populated(&dir);
    let before = std::fs::read(&img).unwrap();
    let ino = f.to_string();
    let missing = dir.path().join("missing.img").to_str().unwrap().to_string();
    let cases: &[(&[&str], &str)] = &[
        (
            &["inject", &img, "--target", "journal", "--which", "replica"],
            "the journal has no replica",
        ),
        (
            &[
                "inject",
                &img,
                "--target",
                "data-page",
                "--which",
                "both",
                "--ino",
                &ino,
            ],
            "data pages have no replica",
        ),
        (
            &["inject", &img, "--target", "log-entry", "--ino", "12345"],
            "inode 12345 is not in use",
        ),
        (
            &["inject", &img, "--target", "data-page"],
            "inode 1: the inode maps no data pages",
        ),
        (
            &["inject", &img, "--target", "journal", "--ino", "2"],
            "--ino applies to",
        ),
        (
            &["inject", &img, "--target", "inode", "--ino", "0"],
            "inode numbers start at 1",
        ),
        (
            &["inject", &img, "--target", "inode", "--live"],
            "--live applies to the log-page target only",
        ),
        (&["inject", &missing, "--target", "inode"], "does not exist"),
    ];
    for (args, says) in cases {
        let o = novafs(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
        assert!(stdout(&o).is_empty());
    }
    assert_eq!(std::fs::read(&img).unwrap(), before, "image untouched");
    // clap refuses what it can see is wrong.
    assert_eq!(novafs(&["inject", &img, "--target", "bitmap"]).status.code(), Some(2));
    assert_eq!(
        novafs(&["inject", &img, "--target", "inode", "--bytes", "0"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn a_mounted_image_is_refused() {
    let dir = scratch();
    let (img, _) = populated(&dir);
    let before = std::fs::read(&img).unwrap();
    let held = MmapRegion::open(Path::new(&img), &MapOptions::default()).unwrap();
    let o = novafs(&["inject", &img, "--target", "superblock"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("in use"), "{}", stderr(&o));
    assert_eq!(stderr(&o).lines().count(), 1);
    assert!(held.len() > 0);
    drop(held);
    assert_eq!(std::fs::read(&img).unwrap(), before, "image untouched");
}

/// Both copies of a file's first write entry damaged (not in its type and
/// length bytes): `fsck --repair` keeps the file and prints the path and
/// the bytes lost (those no later entry rewrote) with what to do, exit 0;
/// a later `fsck` is clean and still names them.
#[test]
fn fsck_repair_keeps_a_file_with_a_lost_write_entry_and_prints_the_lost_bytes() {
    use novafs::inject::{plan, CopyKind, Spec, Target, Which};
    let dir = scratch();
    let img = dir.path().join("lost.img").to_str().unwrap().to_string();
    let o = novafs(&["mkfs", "--size", "32M", "--shards", "1", &img]);
    assert!(o.status.success(), "{}", stderr(&o));
    let fs = mount(&img);
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, &[b'F'; 8192]).unwrap();
    fs.write(f, 4096, &[b'G'; 4096]).unwrap();
    fs.unmount().unwrap();
    // The seed whose damage hits the first write entry past its head.
    let region = MmapRegion::open(Path::new(&img), &MapOptions::default()).unwrap();
    let first = novafs::inject::locate(&region, Target::LogEntry, f)
        .unwrap()
        .into_iter()
        .find(|l| l.what == "log entry (write)")
        .unwrap()
        .copy(CopyKind::Primary)
        .unwrap();
    let seed = (1u64..)
        .find(|&s| {
            let spec = Spec::new(Target::LogEntry).which(Which::Both).ino(f).seed(s);
            let p = plan(&region, &spec).unwrap();
            p[0].base == first && p[0].off - p[0].base >= 2
        })
        .unwrap();
    drop(region);
    let (ino, seed) = (f.to_string(), seed.to_string());
    let o = novafs(&[
        "inject",
        &img,
        "--target",
        "log-entry",
        "--which",
        "both",
        "--ino",
        &ino,
        "--seed",
        &seed,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = novafs(&["fsck", "--repair", &img]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains(&format!("repaired: salvaged inode {f}")), "{out}");
    let lost = format!("inode {f} (/f): bytes 0..4096 were lost");
    assert!(
        out.lines()
            .any(|l| l.contains(&lost) && l.contains("restore them from a snapshot or a backup")),
        "{out}"
    );
    let o = novafs(&["fsck", &img]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stdout(&o).contains(&lost), "{}", stdout(&o));
    let fs = mount(&img);
    let mut buf = vec![0u8; 4096];
    assert_eq!(fs.read(f, 0, &mut buf).unwrap_err().errno(), libc::EIO);
    assert_eq!(fs.read(f, 4096, &mut buf).unwrap(), 4096);
    assert_eq!(buf, vec![b'G'; 4096]);
    fs.unmount().unwrap();
}
