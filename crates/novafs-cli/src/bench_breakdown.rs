//! `novafs bench --breakdown`: where each operation's time goes, per rung
//! of NOVA-Fortis's protection ladder (`bench_ladder`): NOVA's Fig. 6c
//! (create, append and unlink cut into their parts; with `--nvmm stt` or
//! `pcm` on the paper's slower memories) and NOVA-Fortis's Fig. 10 (the
//! same with each reliability mechanism's share).
//!
//! The parts are `pm::latency`'s: the core marks them with spans, and
//! each thread adds up the time spent inside its innermost one. What no
//! span covers — locks, name lookups, the inode cache, the call — is
//! "other": the operation's wall time less its parts. There is no VFS in
//! the library's path; the paper's VFS share is what the mount's kernel
//! round trip costs instead (README, "Where the time goes").
//!
//! Every round runs the microbenchmark on every rung twice, once with the
//! accounting on and once off (the order swapped each round), so the
//! report also says what the accounting itself costs.

use std::path::Path;

use anyhow::{Context, Result};
use indicatif::ProgressBar;
use novafs::ROOT_INO;
use novafs_bench::stats::Summary;
use novafs_bench::svg;
use novafs_bench::workload::{micro, Micro};
use pm::latency::{self, Part};

use crate::bench::{summary, with_sides, Args, Side, ROWS};
use crate::bench_ladder::{head, ladder, order, write_protection, FULL};
use crate::bench_nvmm::Slowed;

/// The rung with metadata replicas only, and the one adding data
/// protection (`bench_ladder::RUNGS`).
const MP: usize = 1;
const MP_DP: usize = 2;

/// The rows of [`ROWS`] the paper's sentences are about.
const CREATE: usize = 0;
const APPEND: usize = 1;
const OVERWRITE: usize = 3;
const OVERWRITE_512: usize = 4;
const UNLINK: usize = 5;

/// Turns the accounting off when dropped, whatever happened.
struct Accounting;

impl Accounting {
    fn set(on: bool) -> Accounting {
        latency::set_enabled(on);
        Accounting
    }
}

impl Drop for Accounting {
    fn drop(&mut self) {
        latency::set_enabled(false);
    }
}

/// One operation on one rung over the rounds: its parts and the rest, in
/// µs per operation.
struct Cut {
    total: Vec<f64>,
    parts: Vec<Vec<f64>>,
    other: Vec<f64>,
}

impl Cut {
    fn of(runs: &[Micro], row: usize) -> Cut {
        let f = ROWS[row].1;
        let total: Vec<f64> = runs.iter().map(f).collect();
        let parts: Vec<Vec<f64>> = Part::ALL
            .iter()
            .map(|&p| runs.iter().map(|m| m.parts[row].ns_per_op(p) / 1e3).collect())
            .collect();
        let other = (0..runs.len())
            .map(|r| total[r] - parts.iter().map(|p| p[r]).sum::<f64>())
            .collect();
        Cut { total, parts, other }
    }

    fn median(v: &[f64]) -> Result<f64> {
        Ok(summary(v)?.median)
    }

    /// The median of `part`.
    fn part(&self, part: Part) -> Result<f64> {
        Cut::median(&self.parts[part as usize])
    }

    /// The medians of every part, then of the rest.
    fn medians(&self) -> Result<Vec<f64>> {
        let mut m = self.parts.iter().map(|p| Cut::median(p)).collect::<Result<Vec<_>>>()?;
        m.push(Cut::median(&self.other)?);
        Ok(m)
    }
}

pub fn run(args: &Args, files: u64, rounds: usize, plots: Option<&Path>) -> Result<()> {
    let (wp, wp_line) = write_protection(args);
    let configs = ladder(wp);
    with_sides(args, &configs, |sides| {
        println!("{}", sides[0].media);
        println!("{wp_line}");
        let (on, off) = measure(args, files, rounds, sides)?;
        let names: Vec<&str> = sides.iter().map(|s| s.config.name).collect();
        println!(
            "\nLatency breakdown (NOVA Fig. 6c, NOVA-Fortis Fig. 10): {files} files x {} appends of 4 KiB, \
             {rounds} rounds interleaved; µs/op, medians, and each part's share of the operation's median",
            args.appends
        );
        let cuts: Vec<Vec<Cut>> = (0..ROWS.len())
            .map(|row| on.iter().map(|runs| Cut::of(runs, row)).collect())
            .collect();
        for (row, cuts) in cuts.iter().enumerate() {
            println!("\n{}", head(ROWS[row].0, &names, None));
            print_cut(cuts)?;
        }
        print_cost(&names, &on, &off)?;
        print_papers(&cuts)?;
        if let Some(dir) = plots {
            plot(dir, &names, &cuts)?;
        }
        Ok(())
    })
}

/// Per rung, the rounds' runs of the microbenchmark.
type Runs = Vec<Vec<Micro>>;

/// The microbenchmark on every rung, accounting on and off, rounds
/// interleaved: the runs with it on, then with it off.
fn measure(args: &Args, files: u64, rounds: usize, sides: &[Side]) -> Result<(Runs, Runs)> {
    let n = sides.len();
    let bar = ProgressBar::new(rounds as u64);
    let mut on: Runs = vec![Vec::new(); n];
    let mut off: Runs = vec![Vec::new(); n];
    let mut slowed: Vec<Slowed> = sides.iter().map(|_| Slowed::default()).collect();
    for round in 0..rounds {
        for which in order(round, n) {
            for counting in [round % 2 == 0, round % 2 == 1] {
                let _accounting = Accounting::set(counting);
                let run = slowed[which].time(|| micro(&sides[which].lib, &ROOT_INO, files, args.appends))?;
                if counting {
                    on[which].push(run);
                } else {
                    off[which].push(run);
                }
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    for (side, slowed) in sides.iter().zip(&slowed) {
        slowed.print(side.config.name, 2 * rounds);
    }
    Ok((on, off))
}

/// One operation's table body: a row per part (left out where no rung
/// spent anything in it), the rest, and the whole.
fn print_cut(cuts: &[Cut]) -> Result<()> {
    let medians = cuts.iter().map(Cut::medians).collect::<Result<Vec<_>>>()?;
    let totals = cuts.iter().map(|c| Cut::median(&c.total)).collect::<Result<Vec<_>>>()?;
    let other = "other (locks, entries and their checksums, timestamps, the call)";
    let labels = Part::ALL.iter().map(|p| p.name()).chain([other]);
    for (i, label) in labels.enumerate() {
        if medians.iter().all(|m| m[i] <= 0.0005) && i < Part::ALL.len() {
            continue;
        }
        let mut line = format!("| {label} |");
        for (m, total) in medians.iter().zip(&totals) {
            line += &format!(" {:.3} ({:.0}%) |", m[i], 100.0 * m[i] / total);
        }
        println!("{line}");
    }
    let mut line = "| **total** |".to_string();
    for t in &totals {
        line += &format!(" **{t:.3}** |");
    }
    println!("{line}");
    Ok(())
}

/// What the accounting costs: each operation's median with it off and on.
fn print_cost(names: &[&str], on: &[Vec<Micro>], off: &[Vec<Micro>]) -> Result<()> {
    println!(
        "\nWhat the accounting costs: µs/op with it off → on (medians of the same rounds), \
         the difference as a share of off"
    );
    println!("\n{}", head("operation", names, None));
    for (op, f, _) in ROWS {
        let mut line = format!("| {op} |");
        for (a, b) in off.iter().zip(on) {
            let [a, b]: [Summary; 2] = [
                summary(&a.iter().map(f).collect::<Vec<_>>())?,
                summary(&b.iter().map(f).collect::<Vec<_>>())?,
            ];
            line += &format!(
                " {:.3} → {:.3} ({:+.0}%) |",
                a.median,
                b.median,
                100.0 * (b.median / a.median - 1.0)
            );
        }
        println!("{line}");
    }
    Ok(())
}

/// Data protection's cost in operation `cuts`: what the data parts take
/// with checksums and parity beyond the data copy without them.
fn data_protection(cuts: &[Cut]) -> Result<f64> {
    let with = cuts[MP_DP].part(Part::DataCopy)? + cuts[MP_DP].part(Part::DataProtect)?;
    Ok(with - cuts[MP].part(Part::DataCopy)?)
}

/// The papers' sentences about their breakdowns, with our numbers.
fn print_papers(cuts: &[Vec<Cut>]) -> Result<()> {
    let share = |row: usize, rung: usize, parts: &[Part]| -> Result<f64> {
        let c = &cuts[row][rung];
        let sum = parts.iter().map(|&p| c.part(p)).sum::<Result<f64>>()?;
        Ok(100.0 * sum / Cut::median(&c.total)?)
    };
    println!("\nAgainst the papers:");
    let [full, mp_dp] =
        [FULL, MP_DP].map(|rung| share(CREATE, rung, &[Part::Alloc, Part::Log, Part::Journal, Part::Replica]));
    println!(
        "- Fortis: \"for create, inode allocation and appending to the log combine to consume 48% of \
         latency, due to inode/log replication and checksum calculation\". Here, allocation + log append + \
         journal + their replicas: {:.0}% with full protection, {:.0}% on MP+DP (without the write windows, \
         which are protection keys in the paper).",
        full?, mp_dp?
    );
    for (row, what) in [(APPEND, "4 KiB append"), (OVERWRITE, "4 KiB overwrite")] {
        let c = &cuts[row];
        println!(
            "- Fortis: \"for 4 KB append and overwrite, data protection has almost the same latency as \
             memory copy\". Here, {what}: data protection {:.3} µs (MP+DP's data parts less MP's copy) \
             against the copy's {:.3} µs.",
            data_protection(c)?,
            c[MP].part(Part::DataCopy)?
        );
    }
    let c = &cuts[OVERWRITE_512];
    println!(
        "- Fortis: data protection \"accounts for 31% of the total latency in 512 B overwrite\". Here: {:.0}% \
         of MP+DP's.",
        100.0 * data_protection(c)? / Cut::median(&c[MP_DP].total)?
    );
    println!(
        "- NOVA: \"the memory copy from the user buffer to NVMM consumes 51% of the append execution time \
         on STT-RAM\". Here, the baseline on this run's memory: {:.0}%.",
        share(APPEND, 0, &[Part::DataCopy])?
    );
    println!(
        "- NOVA: delete \"reads the inode log to free data and log blocks\". Here, the baseline's unlink: \
         freeing {:.0}%, log append and journal {:.0}%.",
        share(UNLINK, 0, &[Part::Free])?,
        share(UNLINK, 0, &[Part::Log, Part::Journal])?
    );
    Ok(())
}

/// A stacked-bar chart per operation, the rungs as bars.
fn plot(dir: &Path, names: &[&str], cuts: &[Vec<Cut>]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut legend: Vec<&str> = Part::ALL.iter().map(|p| p.name()).collect();
    legend.push("other");
    for (row, cuts) in cuts.iter().enumerate() {
        let bars = names
            .iter()
            .zip(cuts)
            .map(|(&name, c)| Ok((name, c.medians()?)))
            .collect::<Result<Vec<_>>>()?;
        let svg = svg::stacked_bars(ROWS[row].0, "µs", &legend, &bars);
        let path = dir.join(format!("breakdown-{row}.svg"));
        std::fs::write(&path, svg).with_context(|| format!("cannot write {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use novafs_bench::workload::PhaseParts;

    /// A run whose every operation took `total` µs, none of it in a part.
    fn run(total: f64) -> Micro {
        Micro {
            create: total,
            append: total,
            read: total,
            overwrite: total,
            overwrite_512: total,
            unlink: total,
            journal: None,
            parts: [PhaseParts::default(); 6],
        }
    }

    #[test]
    fn the_rest_is_the_total_less_the_parts_and_medians_are_per_part() {
        let runs = [run(3.0), run(1.0), run(2.0)];
        let cut = Cut::of(&runs, APPEND);
        assert_eq!(cut.total, [3.0, 1.0, 2.0]);
        assert_eq!(cut.other, [3.0, 1.0, 2.0], "no part spent anything");
        let m = cut.medians().unwrap();
        assert_eq!(m.len(), Part::ALL.len() + 1);
        assert_eq!(m[Part::ALL.len()], 2.0);
        assert!(m[..Part::ALL.len()].iter().all(|&x| x == 0.0));
    }

    #[test]
    fn the_rungs_the_sentences_read_are_the_ones_they_name() {
        let configs = ladder(pm::WriteProtect::Mprotect);
        assert_eq!(configs[MP].name, "MP");
        assert_eq!(configs[MP_DP].name, "MP+DP");
        assert_eq!(configs[FULL].name, "MP+DP+WP");
    }

    #[test]
    fn the_rows_the_sentences_read_are_the_operations_they_name() {
        assert_eq!(ROWS[CREATE].0, "create");
        assert!(ROWS[APPEND].0.starts_with("append 4 KiB"));
        assert!(ROWS[OVERWRITE].0.starts_with("overwrite 4 KiB"));
        assert!(ROWS[OVERWRITE_512].0.starts_with("overwrite 512 B"));
        assert!(ROWS[UNLINK].0.starts_with("unlink"));
    }

    #[test]
    fn the_accounting_is_off_again_after_a_failure() {
        let r: Result<()> = (|| {
            let _on = Accounting::set(true);
            assert!(latency::enabled());
            anyhow::bail!("a failed round")
        })();
        assert!(r.is_err());
        assert!(!latency::enabled());
    }
}
