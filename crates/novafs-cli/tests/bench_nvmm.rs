//! `novafs bench --nvmm`: the emulated NVMM's speed is named in the
//! output, with what each side's run paid for it.
#![allow(clippy::unwrap_used)]

mod cli_common;
use cli_common::{assert_nothing_left, novafs, path, scratch, small_bench, stderr};

#[test]
fn bench_under_pcm_says_what_is_slowed_and_what_each_side_paid() {
    let dir = scratch();
    let img = path(&dir, "pcm.img");
    let out = small_bench(&["--compare-modes", "--nvmm", "pcm"], "2", &img);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[1].contains("; NVMM: PCM (NOVA Table 1): 500 ns persist barrier, write bandwidth 1/8 of DRAM's")
            && lines[1].ends_with("; reads at DRAM speed"),
        "{out}"
    );
    for (line, side) in [(lines[4], "strict"), (lines[5], "relaxed")] {
        assert!(
            line.starts_with(&format!("emulated NVMM, {side}: ")) && line.contains(" persist barriers of "),
            "{out}"
        );
    }
    assert!(lines[7].starts_with("| operation | strict µs/op |"), "{out}");
    assert_nothing_left(&dir);

    let img = path(&dir, "stt.img");
    let out = small_bench(&["--nvmm", "stt"], "1", &img);
    assert!(
        out.lines().nth(1).unwrap().contains(
            "; NVMM: STT-RAM (NOVA Table 1): 200 ns persist barrier, DRAM's write bandwidth; reads at DRAM speed"
        ),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("emulated NVMM, the microbenchmark: ")),
        "{out}"
    );
    let out = small_bench(&[], "1", &img);
    assert!(!out.contains("NVMM"), "DRAM speed, the default, says nothing: {out}");
    assert_nothing_left(&dir);
}

#[test]
fn bench_refuses_unknown_models_and_the_runs_that_ignore_them() {
    let o = novafs(&["bench", "--nvmm", "fast"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("use dram, stt, pcm or NS:DIVISOR"),
        "{}",
        stderr(&o)
    );
    for other in ["--mmap", "--snapshots"] {
        let o = novafs(&["bench", "--nvmm", "pcm", other]);
        assert_eq!(o.status.code(), Some(2), "{other}: {}", stderr(&o));
    }
}
