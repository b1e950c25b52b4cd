//! `novafs bench --aged`: NOVA-Fortis on an aged image. Ages a file system
//! as §4.4 did (novafs-bench's `aged`: the four filebench personalities at
//! once, half of each one's files removed after each run, until 99% full)
//! once per metadata placement, unmounts it, and reads what fsck's walk
//! found (`fsck::Report::space`):
//! - Fig. 12 (§5.5): the image's bytes by what they hold, and the share
//!   reliability takes (the default format, dead-zone replication);
//! - Fig. 7 (§4.4): the metadata bytes an N-byte scribble destroys, the
//!   maximum and the average over every position (novafs-bench's
//!   `scribble`), without replicas, with replicas a page apart at least
//!   (two-way), with the 1 MiB dead zone, and with "simple" replicas, a
//!   model (novafs cannot place them so): each allocation's replica right
//!   after it, on the unreplicated image's metadata pages.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use novafs::fsck::{MetaKind, MetaPage, Space};
use novafs::{FormatOptions, PAGE_SIZE};
use novafs_bench::aged::{age, Aged, Ageing};
use novafs_bench::scribble::{at_risk, AtRisk, Copies};
use novafs_bench::svg;
use novafs_bench::target::LibraryTarget;
use pm::{MapOptions, MmapRegion, Prefault, Region};

use crate::image::explain;
use crate::info::bytes;

/// What `--aged` runs.
pub struct Plan<'a> {
    pub image: &'a Path,
    pub size: u64,
    pub eadr: bool,
    pub quick: bool,
    /// Where to write the two figures as SVG, if anywhere.
    pub plots: Option<&'a Path>,
}

/// Scribble sizes of Fig. 7: 1 B to 8 MiB, the paper's 8 KiB among them,
/// then on to where replicas a reflection apart are at risk too (those the
/// image holds).
const SCRIBBLES: [u64; 15] = [
    1,
    8,
    64,
    512,
    4 << 10,
    8 << 10,
    32 << 10,
    256 << 10,
    1 << 20,
    2 << 20,
    8 << 20,
    32 << 20,
    128 << 20,
    512 << 20,
    2 << 30,
];

/// One metadata placement, aged on an image of its own.
struct Placement {
    name: &'static str,
    format: FormatOptions,
}

fn placements() -> [Placement; 3] {
    let default = FormatOptions::default();
    [
        Placement {
            name: "no replication",
            format: default.clone().meta_replicas(false),
        },
        Placement {
            name: "two-way",
            // The same reflection, pairs allowed a page apart.
            format: default.clone().dead_zone(PAGE_SIZE),
        },
        Placement {
            name: "dead-zone",
            format: default,
        },
    ]
}

pub fn run(plan: &Plan) -> Result<()> {
    let ageing = Ageing {
        // The file sets' cap scales with the image: 2 MiB of it per entry.
        files: (plan.size >> 21).clamp(16, 8_000),
        threads: 2,
        target: 0.99,
        seed: 28,
        max_rounds: if plan.quick { 20 } else { 200 },
    };
    let mut aged = Vec::new();
    for p in placements() {
        let (done, space) = age_one(plan, &p, &ageing)?;
        println!(
            "{}: aged in {} rounds ({} flowops, {} ENOSPC) to {:.1}% used",
            p.name,
            done.rounds,
            done.ops,
            done.nospc,
            100.0 * done.used
        );
        aged.push((p.name, space));
    }
    println!(
        "\nimages of {} (4 personalities x {} threads, file sets of at most {} entries, seed {})",
        bytes(plan.size),
        ageing.threads,
        ageing.files,
        ageing.seed
    );
    let default = &aged[2].1;
    print_breakdown(default);
    let parts = parts(default);
    let none = &aged[0].1;
    let (modelled, grown) = simple(&none.meta);
    let mut schemes: Vec<Scheme> = vec![
        ("no replication", copies(none), plan.size),
        ("simple (model)", modelled, plan.size + grown),
    ];
    schemes.extend(aged[1..].iter().map(|(name, s)| (*name, copies(s), plan.size)));
    let (sizes, risks) = print_scribbles(&schemes);
    if let Some(dir) = plan.plots {
        plot(dir, &parts, &schemes, &sizes, &risks)?;
    }
    Ok(())
}

/// Fig. 12 as one stacked bar, Fig. 7 as the maxima (solid) and averages
/// (dashed) of each placement on log scales, zeros left out.
fn plot(dir: &Path, parts: &[Part], schemes: &[Scheme], sizes: &[u64], risks: &[Vec<AtRisk>]) -> Result<()> {
    let bars: Vec<(&str, f64)> = parts.iter().filter(|p| p.1 > 0).map(|p| (p.0, p.1 as f64)).collect();
    let fig12 = svg::stacked_bar("NVMM storage on the aged image (cf. NOVA-Fortis Fig. 12)", &bars);
    let mut lines = Vec::new();
    for ((name, ..), r) in schemes.iter().zip(risks) {
        let points = |f: fn(&AtRisk) -> f64| sizes.iter().zip(r).map(|(&n, a)| (n as f64, f(a))).collect();
        lines.push(svg::Line {
            name,
            points: points(|a| a.max_bytes as f64),
            dashed: false,
        });
        lines.push(svg::Line {
            name: "  (average)",
            points: points(|a| a.avg_bytes),
            dashed: true,
        });
    }
    let fig7 = svg::loglog(
        "Metadata bytes at risk (cf. NOVA-Fortis Fig. 7)",
        "scribble size (bytes)",
        "bytes at risk: max (solid), average (dashed)",
        &lines,
    );
    for (name, text) in [("aged-fig12.svg", fig12), ("aged-fig7.svg", fig7)] {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Formats a fresh image as `p` says, ages it, unmounts it and returns
/// fsck's space; the image is removed.
fn age_one(plan: &Plan, p: &Placement, ageing: &Ageing) -> Result<(Aged, Space)> {
    let _ = std::fs::remove_file(plan.image);
    let opts = MapOptions {
        eadr: plan.eadr,
        prefault: Prefault::Now,
        ..MapOptions::default()
    };
    let result = (|| {
        let region = MmapRegion::create(plan.image, plan.size, &opts).map_err(|e| explain(plan.image, e))?;
        let region: Arc<dyn Region> = Arc::new(region);
        let lib = LibraryTarget::on_region_with(region.clone(), p.format.clone())?;
        let bar = ProgressBar::new(1000);
        bar.set_style(
            ProgressStyle::with_template("{msg} {bar:30} {percent}% used ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(format!("ageing ({})", p.name));
        let done = age(&lib, ageing, &|used| {
            bar.set_position((used / ageing.target * 1000.0) as u64)
        })?;
        bar.finish_and_clear();
        drop(lib); // A clean unmount.
        let report = novafs::fsck::check(region, &|_, _| {})?;
        if !report.is_clean() {
            bail!("fsck of the aged image ({}): {:?}", p.name, report.problems);
        }
        Ok((done, report.space))
    })();
    let _ = std::fs::remove_file(plan.image);
    result
}

/// The metadata pages of `s` and their replicas, as the image has them.
fn copies(s: &Space) -> Vec<Copies> {
    s.meta
        .iter()
        .map(|m| Copies {
            off: m.off,
            replica: m.replica,
        })
        .collect()
}

/// Fortis §4.4's simple replication, modelled on an unreplicated image's
/// metadata pages `meta` (by offset): a naive lowest-first allocator puts
/// each allocation's replica right after it, so a log page's replica is
/// the next page and a run of inode-table pages' the run of the same
/// length after it, and everything above moves up to make room. Returns
/// the pages and the bytes the image grew by.
fn simple(meta: &[MetaPage]) -> (Vec<Copies>, u64) {
    let mut out = Vec::with_capacity(meta.len());
    let (mut i, mut shift) = (0, 0);
    while i < meta.len() {
        let kind = meta[i].kind;
        let mut end = i + 1;
        while kind == MetaKind::InodeTable
            && end < meta.len()
            && meta[end].kind == kind
            && meta[end].off == meta[end - 1].off + PAGE_SIZE
        {
            end += 1;
        }
        let run = (end - i) as u64 * PAGE_SIZE;
        out.extend(meta[i..end].iter().map(|m| Copies {
            off: m.off + shift,
            replica: Some(m.off + shift + run),
        }));
        shift += run;
        i = end;
    }
    (out, shift)
}

/// One row of Fig. 12: what, bytes, whether it is there for reliability.
type Part = (&'static str, u64, bool);

/// Fig. 12's parts of `s`, adding up to the image.
fn parts(s: &Space) -> Vec<Part> {
    let mut v = vec![
        ("file data", s.data_pages * PAGE_SIZE, false),
        ("inode tables (primary)", s.meta_bytes_of(MetaKind::InodeTable), false),
        ("logs (primary)", s.meta_bytes_of(MetaKind::Log), false),
        ("journal (headers and rings)", s.journal, false),
        ("superblock, reserved inodes", s.fixed_meta, false),
        ("free (the reserve included)", s.free_pages * PAGE_SIZE, false),
        ("layout slack", s.slack, false),
        ("metadata replicas", s.meta_replica_bytes() + s.fixed_replicas, true),
        ("data checksums (two copies)", s.data_csums, true),
        ("data parity", s.data_parity, true),
    ];
    if s.unaccounted_pages > 0 {
        v.push(("neither in use nor free", s.unaccounted_pages * PAGE_SIZE, false));
    }
    v
}

fn pct(x: u64, of: u64) -> f64 {
    100.0 * x as f64 / of.max(1) as f64
}

fn print_breakdown(s: &Space) {
    println!("\nFig. 12, storage on the aged image (dead-zone replication, mkfs's default):\n");
    println!("| part | bytes | % of the image |");
    println!("|---|---|---|");
    let parts = parts(s);
    for &(name, b, reliability) in &parts {
        let mark = if reliability { " (reliability)" } else { "" };
        println!("| {name}{mark} | {b} | {:.2} |", pct(b, s.size));
    }
    println!("| total | {} | {:.2} |", s.total(), pct(s.total(), s.size));
    let meta = parts
        .iter()
        .filter(|p| p.0 == "metadata replicas")
        .map(|p| p.1)
        .sum::<u64>();
    let data = s.data_csums + s.data_parity;
    println!(
        "\nreliability: {:.2}% of the image (the paper: 14.8%): data checksums and parity {:.2}% (12.7%), \
         metadata replicas {:.2}% (2.1%)",
        pct(meta + data, s.size),
        pct(data, s.size),
        pct(meta, s.size)
    );
}

/// A placement's name, its metadata pages and the size of its image.
type Scheme = (&'static str, Vec<Copies>, u64);

/// Prints Fig. 7's two tables; returns the sizes and what each scheme
/// risks at each.
fn print_scribbles(schemes: &[Scheme]) -> (Vec<u64>, Vec<Vec<AtRisk>>) {
    println!("\nFig. 7, metadata bytes at risk per scribble (maximum / average over every position):\n");
    for (name, pages, _) in schemes {
        let close = pages
            .iter()
            .filter_map(|c| c.replica.map(|r| r.abs_diff(c.off)))
            .min()
            .map_or_else(|| "none".to_string(), bytes);
        println!("{name}: {} metadata pages, closest pair {close}", pages.len());
    }
    let head: Vec<&str> = schemes.iter().map(|s| s.0).collect();
    println!("\n| scribble | {} |", head.join(" max | ") + " max");
    print!("|---|");
    println!("{}", "---|".repeat(head.len()));
    let sizes: Vec<u64> = SCRIBBLES.into_iter().filter(|&n| n <= schemes[0].2).collect();
    let risks: Vec<Vec<AtRisk>> = schemes
        .iter()
        .map(|(_, pages, size)| sizes.iter().map(|&n| at_risk(pages, PAGE_SIZE, n, *size)).collect())
        .collect();
    for (i, &n) in sizes.iter().enumerate() {
        let cells: Vec<String> = risks.iter().map(|r| cell(r[i].max_bytes as f64)).collect();
        println!("| {} | {} |", bytes(n), cells.join(" | "));
    }
    println!("\n| scribble | {} |", head.join(" avg | ") + " avg");
    print!("|---|");
    println!("{}", "---|".repeat(head.len()));
    for (i, &n) in sizes.iter().enumerate() {
        let cells: Vec<String> = risks
            .iter()
            .map(|r| {
                let b = r[i].avg_bytes;
                if b == 0.0 {
                    cell(b)
                } else {
                    format!("{} ({:.2e} pages)", cell(b), r[i].avg_pages(PAGE_SIZE))
                }
            })
            .collect();
        println!("| {} | {} |", bytes(n), cells.join(" | "));
    }
    (sizes, risks)
}

/// Bytes at risk in a cell: 0, or three significant digits.
fn cell(b: f64) -> String {
    if b == 0.0 {
        "0".to_string()
    } else if b >= 1000.0 {
        format!("{b:.0}")
    } else {
        format!("{b:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_replicas_follow_each_log_page_and_each_table_run_moving_the_rest_up() {
        let p = PAGE_SIZE;
        let meta = [
            (10, MetaKind::InodeTable),
            (11, MetaKind::InodeTable),
            (12, MetaKind::Log),
            (20, MetaKind::Log),
        ];
        let meta: Vec<MetaPage> = meta
            .iter()
            .map(|&(i, kind)| MetaPage {
                off: i * p,
                replica: None,
                kind,
            })
            .collect();
        let (pages, grown) = simple(&meta);
        let got: Vec<(u64, Option<u64>)> = pages.iter().map(|c| (c.off / p, c.replica.map(|r| r / p))).collect();
        // Table pages 10, 11 and their run 12, 13; log page 12 moved up
        // to 14, its replica 15; log page 20 moved to 23, its replica 24.
        assert_eq!(got, [(10, Some(12)), (11, Some(13)), (14, Some(15)), (23, Some(24))]);
        assert_eq!(grown, 4 * p);
    }
}
