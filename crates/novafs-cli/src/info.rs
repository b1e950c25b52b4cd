//! `novafs info`: format, geometry, usage and state, read without mounting
//! (safe while the image is mounted).

use std::path::Path;

use anyhow::Result;
use novafs::layout::{PAGE_SIZE, STATE_CLEAN};

use crate::image::{explain_fs, open};

/// A UTC date and time for nanoseconds since the Unix epoch.
fn when(ns: i64) -> String {
    let c = novafs::time::civil(ns.div_euclid(1_000_000_000));
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    )
}

pub fn run(path: &Path) -> Result<()> {
    let region = open(path, false, false)?;
    let kind = region.kind();
    let info = novafs::inspect(region).map_err(|e| explain_fs(path, e))?;
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
        Ok((free, free_inodes)) => {
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
        Err(why) => println!("usage:        unknown until the image is mounted ({why})"),
    }
    Ok(())
}
