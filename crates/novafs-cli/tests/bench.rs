//! `novafs bench` on small sizes: every table has its rows and columns,
//! the journal counts the operations they should, and the scratch images
//! are removed.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;

mod cli_common;
use cli_common::{assert_nothing_left, novafs, path, scratch, small_bench, stderr};

#[test]
fn bench_prints_its_table_dram_and_mount_times_and_removes_its_image() {
    let dir = scratch();
    let img = path(&dir, "bench.img");
    let out = small_bench(&[], "3", &img);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "novafs library benchmark: 20 files x 2 appends of 4 KiB, 3 rounds"
    );
    assert!(lines[1].starts_with("region: "), "{out}");
    assert_eq!(
        lines[3],
        "| operation | median µs/op | min–max µs/op | journal B/op | journal fences/op | target |"
    );
    let rows: Vec<(&str, &str, &str)> = lines[5..11]
        .iter()
        .map(|l| {
            let cells: Vec<&str> = l.split(" | ").collect();
            (
                cells[0].trim_start_matches("| "),
                cells[4],
                cells[5].trim_end_matches(" |"),
            )
        })
        .collect();
    // A create and an unlink are one journal transaction each (three
    // fences: commit, in place, checkpoint); one file's appends, reads and
    // overwrites commit by its log's tail alone (NOVA §3.2).
    assert_eq!(
        rows,
        [
            ("create", "3.00", "≤ 2.0"),
            ("append 4 KiB + fsync", "0.00", "≤ 1.2"),
            ("read 4 KiB (sequential in each file)", "0.00", "≤ 0.6"),
            ("overwrite 4 KiB + fsync", "0.00", "—"),
            ("overwrite 512 B + fsync", "0.00", "—"),
            ("unlink (16 pages)", "3.00", "≤ 2.0"),
        ],
        "{out}"
    );
    let bytes = |row: usize| lines[row].split(" | ").nth(3).unwrap().parse::<f64>().unwrap();
    assert!(bytes(5) > 0.0 && bytes(10) > 0.0, "{out}");
    assert_eq!((bytes(6), bytes(7), bytes(8), bytes(9)), (0.0, 0.0, 0.0, 0.0), "{out}");
    assert!(
        lines[12].starts_with("DRAM: ") && lines[12].ends_with(" bytes per data page"),
        "{out}"
    );
    assert!(
        lines[13].starts_with("mount with 20 files of 64 KiB (NOVA §4.7): ") && lines[13].contains("scan of 22 inodes"),
        "{out}"
    );
    assert!(!Path::new(&img).exists(), "the scratch image is removed");
}

#[test]
fn bench_compares_replicas_side_by_side_with_targets_and_storage() {
    let dir = scratch();
    let img = path(&dir, "cmp.img");
    let out = small_bench(&["--compare-replicas"], "2", &img);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "with replicas against without replicas: 20 files x 2 appends of 4 KiB, 2 rounds interleaved"
    );
    assert_eq!(
        lines[2],
        "without replicas: write protection off, no metadata replicas, data checksums, parity"
    );
    assert_eq!(
        lines[3],
        "with replicas: write protection off, metadata replicas (dead zone 1 MiB), data checksums, parity"
    );
    assert_eq!(
        lines[5],
        "| operation | without replicas median µs/op | with replicas median µs/op | ratio | target |"
    );
    let targets: Vec<&str> = lines[7..13]
        .iter()
        .map(|l| l.rsplit(" | ").next().unwrap().split(':').next().unwrap())
        .collect();
    assert_eq!(targets, ["≤ 1.40", "≤ 1.25", "— |", "— |", "— |", "— |"], "{out}");
    assert!(
        lines[14].starts_with("storage after creating 20 files x 2 appends of 4 KiB: ")
            && lines[14].ends_with("(the paper: 2.1%)"),
        "{out}"
    );
    assert!(lines[15].starts_with("right after mkfs: "), "{out}");
    assert_nothing_left(&dir);
}

#[test]
fn bench_compares_fine_grained_with_block_granular_journaling_and_removes_its_images() {
    let dir = scratch();
    let img = path(&dir, "journal.img");
    let out = small_bench(&["--compare-journal"], "2", &img);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "block-granular against fine-grained: 20 files x 2 appends of 4 KiB, 2 rounds interleaved"
    );
    assert_eq!(
        lines[5],
        "| operation | fine-grained µs/op | fine-grained min–max | block-granular µs/op | block-granular min–max | \
         block-granular ÷ fine-grained | fine-grained journal B/op | block-granular journal B/op | bytes saved | \
         fine-grained fences/op | block-granular fences/op |"
    );
    let rows = table(&out, "| operation |");
    assert_eq!(names(&rows, "operation"), MICRO_ROWS, "{out}");
    for row in [&rows[0], &rows[5]] {
        // Fine-grained: records and a TxnInfo, well under a block; block-
        // granular: a descriptor, at least one block, a commit block.
        let (fine, block) = (
            num(row["fine-grained journal B/op"]),
            num(row["block-granular journal B/op"]),
        );
        assert!(fine > 0.0 && fine < 1024.0, "{out}");
        assert!(block >= 3.0 * 4096.0, "{out}");
        assert!(num(row["bytes saved"].trim_end_matches('%')) >= 90.0, "{out}");
        let fences = (row["fine-grained fences/op"], row["block-granular fences/op"]);
        assert_eq!(fences, ("3.00", "4.00"), "{out}");
    }
    for row in &rows[1..5] {
        let journal = [
            "fine-grained journal B/op",
            "block-granular journal B/op",
            "bytes saved",
            "fine-grained fences/op",
            "block-granular fences/op",
        ]
        .map(|c| row[c]);
        assert_eq!(journal, ["0.0", "0.0", "—", "0.00", "0.00"], "{out}");
    }
    assert!(
        lines[14].starts_with("journal bytes over every round and operation: ")
            && lines[14].ends_with(" fewer (the paper: 90–99%)"),
        "{out}"
    );
    assert_nothing_left(&dir);
}

#[test]
fn bench_mmap_prints_every_measure_of_both_kinds_and_removes_its_images() {
    let dir = scratch();
    let img = path(&dir, "mmap.img");
    let o = novafs(&["bench", "--mmap", "--rounds", "1", "--size", "256M", "--image", &img]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("| measure | kind | median | min–max | unit |"), "{out}");
    for row in [
        "| msync, 1 dirty page | atomic mmap: msync | ",
        "| msync, 256 dirty pages | DAX mmap: msync | ",
        "| load 16 MiB | atomic mmap, first touch | ",
        "| fault | atomic: first store after msync | ",
        "| fault | DAX: copy-on-write (after a snapshot), out of order | ",
    ] {
        assert!(median(&out, row) > 0.0, "{row}");
    }
    // Write-ahead: in page order a fault brings in a run; out of order,
    // each store faults.
    assert!(
        median(&out, "| fault | DAX: first store, in page order | ") < 0.1,
        "{out}"
    );
    assert_eq!(
        median(&out, "| fault | DAX: copy-on-write, out of order | "),
        1.0,
        "{out}"
    );
    assert_nothing_left(&dir);
}

/// The median of the bench table's row that starts with `row`.
fn median(out: &str, row: &str) -> f64 {
    let line = out
        .lines()
        .find(|l| l.starts_with(row))
        .unwrap_or_else(|| panic!("no {row}: {out}"));
    line[row.len()..].split(" | ").next().unwrap().parse().unwrap()
}

#[test]
fn bench_fgm_runs_every_workload_on_both_journals_and_removes_its_images() {
    let dir = scratch();
    let img = path(&dir, "fgm.img");
    let out = small_bench(&["--fgm", "--fgm-secs", "0.1", "--fgm-files", "20"], "1", &img);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "block-granular against fine-grained: FGM §IV-A workloads, 0.1 s each per round and side, \
         1 rounds interleaved, one thread",
        "{out}"
    );
    assert_eq!(
        lines[4],
        "20 files in varmail's and fileserver's sets and PostMark's pool; FileMicro_writefsync appends \
         4 KiB to a 16 MiB file, fsync every 32",
        "{out}"
    );
    assert_eq!(
        lines[6],
        "| workload | operation | fine-grained ops/s | block-granular ops/s | block-granular ÷ fine-grained | \
         fine-grained journal B/op | block-granular journal B/op | bytes saved | fine-grained fences/op | \
         block-granular fences/op |"
    );
    let rows = table(&out, "| workload |");
    assert_eq!(names(&rows, "workload"), FGM_ROWS, "{out}");
    let ops = ["flowop", "flowop", "4 KiB append", "transaction"];
    assert_eq!(names(&rows, "operation"), ops, "{out}");
    for row in &rows {
        assert!(
            num(row["fine-grained ops/s"]) > 0.0 && num(row["block-granular ops/s"]) > 0.0,
            "{out}"
        );
        let (fine, block) = (
            num(row["fine-grained journal B/op"]),
            num(row["block-granular journal B/op"]),
        );
        if row["workload"] == "FileMicro_writefsync" {
            // Appends commit through the inode log's tail, not the journal.
            assert_eq!((fine, block, row["bytes saved"]), (0.0, 0.0, "—"), "{out}");
        } else {
            // Creates and deletes journal: a block each way, records and a
            // TxnInfo the fine-grained way.
            assert!(fine > 0.0 && block > fine, "{out}");
            assert!(num(row["bytes saved"].trim_end_matches('%')) >= 90.0, "{out}");
            assert!(
                num(row["block-granular fences/op"]) > num(row["fine-grained fences/op"]),
                "{out}"
            );
        }
    }
    assert_nothing_left(&dir);
}

#[test]
fn bench_compares_strict_with_relaxed_mode_and_only_relaxed_overwrites_journal() {
    let dir = scratch();
    let img = path(&dir, "modes.img");
    let out = small_bench(&["--compare-modes"], "2", &img);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "relaxed against strict: 20 files x 2 appends of 4 KiB, 2 rounds interleaved"
    );
    assert!(
        lines[2].starts_with("strict: ") && lines[2].contains("; consistency strict: "),
        "{out}"
    );
    assert!(
        lines[3].starts_with("relaxed: ") && lines[3].contains("; consistency relaxed: "),
        "{out}"
    );
    assert_eq!(
        lines[5],
        "| operation | strict µs/op | strict min–max | relaxed µs/op | relaxed min–max | relaxed ÷ strict | \
         strict journal B/op | relaxed journal B/op | strict fences/op | relaxed fences/op | target |"
    );
    let rows = table(&out, "| operation |");
    assert_eq!(names(&rows, "operation"), MICRO_ROWS, "{out}");
    for row in &rows {
        for side in ["strict", "relaxed"] {
            assert!(num(row[format!("{side} µs/op").as_str()]) > 0.0, "{out}");
            let (min, max) = row[format!("{side} min–max").as_str()].split_once('–').unwrap();
            assert!(num(min) <= num(max), "{out}");
        }
        let journal = |side: &str| num(row[format!("{side} journal B/op").as_str()]);
        let fences = |side: &str| num(row[format!("{side} fences/op").as_str()]);
        if row["operation"].starts_with("overwrite") {
            // NOVA commits an overwrite with its log's tail (§3.2); relaxed
            // mode journals the newest entry's mtime (and its checksum),
            // well under a block.
            assert_eq!((journal("strict"), fences("strict")), (0.0, 0.0), "{out}");
            assert!(journal("relaxed") > 0.0 && journal("relaxed") < 1024.0, "{out}");
            assert!(fences("relaxed") > 0.0, "{out}");
        } else {
            // Everything else takes the same path in both modes.
            assert_eq!(journal("strict"), journal("relaxed"), "{out}");
            assert_eq!(fences("strict"), fences("relaxed"), "{out}");
        }
        let target = row["target"];
        if row["operation"] == "overwrite 512 B + fsync" {
            assert!(target == "≤ 0.33: met" || target == "≤ 0.33: missed", "{out}");
        } else {
            assert_eq!(target, "—", "{out}");
        }
    }
    assert!(
        lines[14].starts_with("strict ÷ relaxed of the medians (> 1: relaxed is faster): overwrite 4 KiB + fsync ")
            && lines[14].ends_with("relaxed mode without data protection against NOVA without it)"),
        "{out}"
    );
    assert_nothing_left(&dir);
}

/// `--batch`: the relaxed side batches (FGM §III-C1); the benchmark's
/// fsync after every overwrite commits its running transaction.
#[test]
fn bench_compare_modes_batches_the_relaxed_side_when_asked() {
    let dir = scratch();
    let img = path(&dir, "batch.img");
    let out = small_bench(&["--compare-modes", "--batch"], "2", &img);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[3].starts_with("relaxed+batch: ") && lines[3].contains("; consistency relaxed, batching: "),
        "{out}"
    );
    let rows = table(&out, "| operation |");
    for row in rows.iter().filter(|r| r["operation"].starts_with("overwrite")) {
        assert!(num(row["relaxed+batch journal B/op"]) > 0.0, "{out}");
    }
    assert_eq!(
        novafs(&["bench", "--batch"]).status.code(),
        Some(2),
        "--batch without --compare-modes"
    );
    assert_nothing_left(&dir);
}

#[test]
fn bench_fgm_compares_the_modes_under_eadr_and_says_no_workload_overwrites() {
    let dir = scratch();
    let img = path(&dir, "fgm-modes.img");
    let form = [
        "--fgm",
        "--compare-modes",
        "--eadr",
        "--fgm-secs",
        "0.1",
        "--fgm-files",
        "20",
    ];
    let out = small_bench(&form, "1", &img);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("relaxed against strict: FGM §IV-A workloads, "),
        "{out}"
    );
    assert!(lines[1].ends_with("(eADR: fences only)"), "{out}");
    assert_eq!(
        lines[6],
        "| workload | operation | strict ops/s | relaxed ops/s | relaxed ÷ strict | strict journal B/op | \
         relaxed journal B/op | strict fences/op | relaxed fences/op |"
    );
    let rows = table(&out, "| workload |");
    assert_eq!(names(&rows, "workload"), FGM_ROWS, "{out}");
    for row in &rows {
        assert!(
            num(row["strict ops/s"]) > 0.0 && num(row["relaxed ops/s"]) > 0.0,
            "{out}"
        );
        let (strict, relaxed) = (num(row["strict journal B/op"]), num(row["relaxed journal B/op"]));
        if row["workload"] == "FileMicro_writefsync" {
            assert_eq!((strict, relaxed), (0.0, 0.0), "{out}");
        } else {
            // The same creates and deletes per operation in both modes (to
            // within the loop the deadline cuts short).
            assert!(strict > 0.0 && (relaxed - strict).abs() <= 0.1 * strict, "{out}");
        }
    }
    assert!(
        out.contains("\nNone of these workloads overwrites bytes a file already has "),
        "{out}"
    );
    assert_nothing_left(&dir);
}

/// `--batch-words`: FGM's workloads on a relaxed mount batching at most
/// 16 words; none of them changes anything in place, so none of their
/// journal transactions is a batch commit.
#[test]
fn bench_fgm_counts_the_batch_commits_of_a_batching_side() {
    let dir = scratch();
    let img = path(&dir, "fgm-batch.img");
    let form = [
        "--fgm",
        "--compare-modes",
        "--batch",
        "--batch-words",
        "16",
        "--fgm-secs",
        "0.1",
        "--fgm-files",
        "20",
    ];
    let out = small_bench(&form, "1", &img);
    assert!(
        out.lines().nth(3).unwrap().ends_with(" (at most 16 words, every 5 s)"),
        "{out}"
    );
    assert!(
        out.contains("\nrelaxed+batch (at most 16 words a transaction), its batch commits over every round:\n"),
        "{out}"
    );
    for w in FGM_ROWS {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("- {w}: ")))
            .unwrap_or_else(|| panic!("{w}: {out}"));
        assert!(line.starts_with(&format!("- {w}: 0 of ")), "{out}");
        assert!(
            line.ends_with(" operations (full 0, timer 0, fsync 0, other 0)"),
            "{out}"
        );
    }
    assert!(!out.contains("\nstrict (at most"), "strict does not batch: {out}");
    assert_eq!(
        novafs(&["bench", "--compare-modes", "--batch-words", "16"])
            .status
            .code(),
        Some(2),
        "--batch-words without --batch"
    );
    assert_nothing_left(&dir);
}

/// `--txninfo-sweep` (FGM §IV-C) at a tiny size, the timer out of reach:
/// a table per fsync setting, a row per mount, and the commit counts that
/// do not depend on timing. Eight files hold at most 40 words of a running
/// transaction.
#[test]
fn bench_txninfo_sweep_prints_a_table_per_fsync_setting_and_removes_its_image() {
    let dir = scratch();
    let img = path(&dir, "txninfo.img");
    let form = [
        "--txninfo-sweep",
        "--storm-files",
        "8",
        "--storm-secs",
        "0.2",
        "--words",
        "1,64",
        "--commit-ms",
        "3600000",
    ];
    let out = small_bench(&form, "1", &img);
    assert!(out.starts_with("TxnInfo size sweep (FGM §IV-C): 8 files, "), "{out}");
    let (synced, unsynced) = out.split_once("\nno fsync:\n").unwrap_or_else(|| panic!("{out}"));
    assert!(synced.contains("\nfsync every 32 operations:\n"), "{out}");
    for part in [synced, unsynced] {
        let rows = table(part, "| mount |");
        assert_eq!(
            names(&rows, "mount"),
            ["strict", "relaxed", "relaxed+batch", "relaxed+batch"],
            "{out}"
        );
        assert_eq!(names(&rows, "TxnInfo words"), ["—", "—", "1", "64"], "{out}");
        assert_eq!(names(&rows, "bytes when full"), ["—", "—", "56 B", "1.5 KiB"], "{out}");
        // Strict appends to the log; relaxed commits each change; a
        // one-word transaction is full at every change.
        assert_eq!(
            names(&rows, "commits / 1,000 ops")[..3],
            ["0.00", "1000", "1000"],
            "{out}"
        );
        assert_eq!(
            (rows[2]["full"], rows[2]["timer"], rows[2]["fsync"]),
            ("100%", "0%", "0%"),
            "{out}"
        );
        assert!(
            rows.iter().all(|r| num(r["ops/s"]) > 0.0 && num(r["ops/CPU-s"]) > 0.0),
            "{out}"
        );
    }
    // 64 words are never full: each fsync commits them, or nothing does.
    let synced = table(synced, "| mount |");
    assert_eq!((synced[3]["full"], synced[3]["fsync"]), ("0%", "100%"), "{out}");
    let unsynced = table(unsynced, "| mount |");
    assert_eq!(
        (unsynced[3]["commits / 1,000 ops"], unsynced[3]["full"]),
        ("0.00", "—"),
        "{out}"
    );
    assert_nothing_left(&dir);
}

#[test]
fn bench_compare_modes_refuses_the_other_comparisons() {
    for other in ["--compare-journal", "--compare-replicas", "--mmap", "--snapshots"] {
        let o = novafs(&["bench", "--compare-modes", other]);
        assert_eq!(o.status.code(), Some(2), "{other}: {}", stderr(&o));
        assert!(stderr(&o).contains("cannot be used with"), "{other}: {}", stderr(&o));
    }
}

#[test]
fn bench_snapshots_takes_known_personalities_only() {
    let o = novafs(&["bench", "--snapshots", "--personalities", "varmail,mailserver"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("unknown personality \"mailserver\""),
        "{}",
        stderr(&o)
    );
    let o = novafs(&["bench", "--personalities", "varmail"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--snapshots"), "{}", stderr(&o));
}

#[test]
fn bench_recovery_scale_times_every_set_on_every_shard_count_and_removes_its_image() {
    let dir = scratch();
    let img = path(&dir, "scale.img");
    let o = novafs(&[
        "bench",
        "--recovery-scale",
        "--scale-size",
        "256M",
        "--scale-shards",
        "1,2",
        "--rounds",
        "2",
        "--image",
        &img,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let rows = table(&out, "| set |");
    let sets = ["empty", "videoserver", "fileserver", "mailserver"];
    let each_twice: Vec<&str> = sets.iter().flat_map(|s| [*s, *s]).collect();
    assert_eq!(names(&rows, "set"), each_twice, "{out}");
    assert_eq!(names(&rows, "shards"), ["1", "2"].repeat(4), "{out}");
    // 3/4 of 256 MiB: one file of 128 MiB, 192 of 1 MiB, 1,536 of 128 KiB;
    // the scan visits them, the root and the set's directory.
    assert_eq!(
        names(&rows, "files"),
        ["0", "0", "1", "1", "192", "192", "1536", "1536"],
        "{out}"
    );
    for r in &rows {
        assert_eq!(num(r["inodes scanned"]), num(r["files"]) + 2.0, "{out}");
        let data = if r["set"] == "empty" {
            "0 B"
        } else if r["set"] == "videoserver" {
            "128.0 MiB"
        } else {
            "192.0 MiB"
        };
        assert_eq!(r["file data"], data, "{out}");
        assert_eq!(r["MB/s per thread"] == "—", r["set"] == "empty", "{out}");
    }
    assert!(
        out.contains("\ntargets: crash scan ≥ 400 MB/s of file data per thread: "),
        "{out}"
    );
    assert_nothing_left(&dir);
}

#[test]
fn bench_recovery_scale_refuses_an_image_without_room() {
    let dir = scratch();
    let img = path(&dir, "huge.img");
    let o = novafs(&["bench", "--recovery-scale", "--scale-size", "100T", "--image", &img]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("cannot make a 100.0 TiB image") && err.contains("use --scale-size "),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!novafs(&["bench", "--recovery-scale", "--mmap"]).status.success());
    assert_nothing_left(&dir);
}

/// The microbenchmark's rows, in table order.
const MICRO_ROWS: [&str; 6] = [
    "create",
    "append 4 KiB + fsync",
    "read 4 KiB (sequential in each file)",
    "overwrite 4 KiB + fsync",
    "overwrite 512 B + fsync",
    "unlink (16 pages)",
];

/// FGM's workloads, in table order.
const FGM_ROWS: [&str; 4] = ["varmail", "fileserver", "FileMicro_writefsync", "postmark"];

/// The markdown table in `out` whose head line starts with `head`: each
/// row a map from its column's name to its cell.
fn table<'a>(out: &'a str, head: &str) -> Vec<BTreeMap<&'a str, &'a str>> {
    let cells = |l: &'a str| -> Vec<&'a str> { l.trim_matches(|c| c == '|' || c == ' ').split(" | ").collect() };
    let mut lines = out.lines().skip_while(|l| !l.starts_with(head));
    let columns = cells(lines.next().unwrap_or_else(|| panic!("no table {head}: {out}")));
    lines
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let row = cells(l);
            assert_eq!(row.len(), columns.len(), "{l}");
            columns.iter().copied().zip(row).collect()
        })
        .collect()
}

/// Column `column` of every row.
fn names<'a>(rows: &[BTreeMap<&str, &'a str>], column: &str) -> Vec<&'a str> {
    rows.iter().map(|r| r[column]).collect()
}

fn num(cell: &str) -> f64 {
    cell.parse().unwrap_or_else(|_| panic!("not a number: {cell}"))
}
