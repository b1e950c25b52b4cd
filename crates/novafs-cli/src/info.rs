//! `novafs info`: format, geometry, usage and state, read without mounting
//! (safe while the image is mounted).

use std::path::Path;

use anyhow::Result;
use novafs::layout::{PAGE_SIZE, STATE_CLEAN};

use crate::image::{explain_fs, open};

/// A UTC date and time for nanoseconds since the Unix epoch.
fn when(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from a day count (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

pub fn run(path: &Path) -> Result<()> {
    let region = open(path, false, false)?;
    let kind = region.kind();
    let info = novafs::recovery::inspect(region).map_err(|e| explain_fs(path, e))?;
    let sb = info.superblock;
    let data_pages = (sb.data_end - sb.data_start) / PAGE_SIZE;
    println!("image:        {}", path.display());
    println!("media:        {kind}");
    println!(
        "format:       novafs version {}, feature flags {:#x}/{:#x}/{:#x}",
        sb.version, sb.features_compat, sb.features_incompat, sb.features_ro_compat
    );
    println!(
        "size:         {} bytes ({} MiB), {} data pages of 4 KiB",
        sb.size,
        sb.size >> 20,
        data_pages
    );
    println!("shards:       {}", sb.shards);
    println!("created:      {}", when(sb.created_ns));
    println!("mounts:       {} (last: {})", sb.mount_count, when(sb.mounted_ns));
    let state = if sb.state == STATE_CLEAN {
        "clean"
    } else {
        "in use, or not cleanly unmounted (the next mount recovers)"
    };
    println!("state:        {state}");
    if info.primary_bad {
        println!("superblock:   primary damaged, replica intact (the next mount repairs it)");
    }
    if info.pending_journal {
        println!("journal:      committed transactions await replay");
    }
    match info.free {
        Some((free, free_inodes)) => {
            let used = data_pages - free;
            println!(
                "usage:        {} of {} pages used ({:.1}%), {} MiB free; {} free inode slots",
                used,
                data_pages,
                100.0 * used as f64 / data_pages as f64,
                (free * PAGE_SIZE) >> 20,
                free_inodes
            );
        }
        None => {
            println!("usage:        unknown until the image is mounted (not cleanly unmounted)")
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::when;

    #[test]
    fn dates_are_civil_utc() {
        assert_eq!(when(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(when(1_795_327_688_000_000_000), "2026-11-22 06:08:08 UTC");
        assert_eq!(when(951_782_400_000_000_000), "2000-02-29 00:00:00 UTC");
    }
}
