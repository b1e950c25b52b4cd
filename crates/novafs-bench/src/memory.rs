//! DRAM the library's indexes use per file and per data page, from the
//! growth of this process's anonymous resident memory (the mapped region
//! is file-backed and not counted). The library target only: a mounted
//! file system's indexes live in the kernel or in the FUSE daemon.

use anyhow::{Context, Result};

use crate::backend::Backend;
use crate::target::LibraryTarget;

/// Bytes of DRAM per empty file and per 4 KiB data page.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dram {
    pub per_file: f64,
    pub per_page: f64,
}

/// Anonymous resident memory of this process in bytes.
fn rss_anon() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Creates `files` empty files in a directory "mem", then writes 16,384
/// pages to one of them, measuring the growth of each; removes them again.
pub fn measure(lib: &LibraryTarget, files: u64) -> Result<Dram> {
    let dir = lib.mkdir("mem")?;
    let before = rss_anon();
    let inos = (0..files)
        .map(|i| lib.create(&dir, &format!("m{i}")))
        .collect::<Result<Vec<_>>>()?;
    let per_file = rss_anon().saturating_sub(before) as f64 / files as f64;
    let pages = 16_384u64;
    let page = vec![1u8; 4096];
    let first = inos.first().context("no files to measure")?;
    let before = rss_anon();
    for k in 0..pages {
        lib.write_at(first, k * 4096, &page)?;
    }
    let per_page = rss_anon().saturating_sub(before) as f64 / pages as f64;
    for i in 0..files {
        lib.unlink(&dir, &format!("m{i}"))?;
    }
    lib.rmdir("mem")?;
    Ok(Dram { per_file, per_page })
}
