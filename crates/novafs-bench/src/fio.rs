//! fio on a mounted target: 4 KiB random writes with fsync after each
//! (fsync=1), then 4 KiB random reads of the same file, psync engine, one
//! job each for a fixed time, in one fio command (the read job waits for the
//! write job: `--stonewall`); `--output-format=json` parsed for the IOPS.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::tools::{find_tool, sh};
use crate::workload::Params;

/// Which side of fio's per-job report to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Read,
    Write,
}

impl Dir {
    fn key(self) -> &'static str {
        match self {
            Dir::Read => "read",
            Dir::Write => "write",
        }
    }
}

/// The IOPS of job `name` in fio's JSON output. fio may print notes before
/// the JSON; they are skipped. A job that reports an error, or did no I/O
/// in direction `dir`, is an error.
pub fn parse_iops(out: &str, name: &str, dir: Dir) -> Result<f64> {
    let start = out.find('{').context("no JSON in fio's output")?;
    let v: serde_json::Value = serde_json::from_str(&out[start..]).context("parse fio's JSON output")?;
    let job = v
        .get("jobs")
        .and_then(serde_json::Value::as_array)
        .and_then(|jobs| {
            jobs.iter()
                .find(|j| j.get("jobname").and_then(serde_json::Value::as_str) == Some(name))
        })
        .with_context(|| format!("fio's JSON output has no job {name:?}"))?;
    let err = job.get("error").and_then(serde_json::Value::as_i64).unwrap_or(0);
    if err != 0 {
        bail!("fio job {name} failed with error {err}");
    }
    let side = job
        .get(dir.key())
        .with_context(|| format!("fio job {name} has no {} section", dir.key()))?;
    let ios = side.get("total_ios").and_then(serde_json::Value::as_u64).unwrap_or(0);
    if ios == 0 {
        bail!("fio job {name} did no {} I/O", dir.key());
    }
    side.get("iops")
        .and_then(serde_json::Value::as_f64)
        .with_context(|| format!("fio job {name} has no {} iops", dir.key()))
}

/// One fio command in `dir` (which must exist): job `randwrite` with
/// fsync=1, then (stonewall: after it) job `randread` on the same file.
fn command(fio: &Path, dir: &Path, p: &Params) -> Command {
    let mut c = Command::new(fio);
    c.arg("--output-format=json")
        .arg(format!("--directory={}", dir.display()))
        .arg("--filename=fio.dat")
        .arg(format!("--size={}M", p.fio_file_mib))
        .arg("--bs=4k")
        .arg("--ioengine=psync")
        .arg(format!("--runtime={}ms", p.fio_ms))
        .arg("--time_based")
        .arg("--randrepeat=1")
        .args(["--name=randwrite", "--rw=randwrite", "--fsync=1"])
        .args(["--name=randread", "--stonewall", "--rw=randread"]);
    c
}

/// Both jobs in a fresh directory `dir`, removed afterwards; kIOPS of the
/// writes and of the reads.
pub fn run(dir: &Path, p: &Params) -> Result<Vec<f64>> {
    let fio = find_tool("fio").context("fio is not installed")?;
    std::fs::create_dir(dir).with_context(|| format!("mkdir {}", dir.display()))?;
    let mut cmd = command(&fio, dir, p);
    let json = sh(&mut cmd)?;
    let write = parse_iops(&json, "randwrite", Dir::Write).with_context(|| format!("{cmd:?}"))?;
    let read = parse_iops(&json, "randread", Dir::Read).with_context(|| format!("{cmd:?}"))?;
    std::fs::remove_dir_all(dir).with_context(|| format!("remove {}", dir.display()))?;
    Ok(vec![write / 1e3, read / 1e3])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of fio 3.33's JSON for the two jobs, cut down to what is read.
    const OUT: &str = r#"note: a line fio printed before the JSON
{
  "fio version" : "fio-3.33",
  "jobs" : [
    {
      "jobname" : "randwrite",
      "error" : 0,
      "read" : { "io_bytes" : 0, "total_ios" : 0, "iops" : 0.000000 },
      "write" : { "io_bytes" : 2048000, "total_ios" : 500, "iops" : 166666.666667 }
    },
    {
      "jobname" : "randread",
      "error" : 0,
      "read" : { "io_bytes" : 1687553638, "total_ios" : 412345, "iops" : 412345.500000 },
      "write" : { "io_bytes" : 0, "total_ios" : 0, "iops" : 0.000000 }
    }
  ]
}"#;

    #[test]
    fn reads_the_iops_of_the_named_job_and_side() {
        let iops = parse_iops(OUT, "randwrite", Dir::Write).expect("write iops");
        assert!((iops - 166_666.666_667).abs() < 1e-3);
        let iops = parse_iops(OUT, "randread", Dir::Read).expect("read iops");
        assert!((iops - 412_345.5).abs() < 1e-3);
        assert!(parse_iops(OUT, "randwrite", Dir::Read).is_err(), "no reads were done");
        assert!(parse_iops(OUT, "seqwrite", Dir::Write).is_err(), "no such job");
    }

    #[test]
    fn a_failed_job_or_garbage_is_an_error() {
        let failed = OUT.replacen(r#""error" : 0"#, r#""error" : 5"#, 1);
        assert!(parse_iops(&failed, "randwrite", Dir::Write).is_err());
        assert!(parse_iops("fio: no such option", "randwrite", Dir::Write).is_err());
        assert!(parse_iops(r#"{"jobs": []}"#, "randwrite", Dir::Write).is_err());
    }
}
