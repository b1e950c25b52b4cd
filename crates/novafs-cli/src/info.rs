//! `novafs info`: format, geometry, usage and state, read without mounting
//! (safe while the image is mounted).

use std::path::Path;

use anyhow::Result;
use novafs::time::utc;
use novafs::{FormatOptions, PAGE_SIZE};

use crate::image::{explain_fs, open};

/// A size in the largest binary unit that divides it: "1 MiB", "68 KiB".
pub fn bytes(n: u64) -> String {
    match n {
        0 => "0 bytes".to_string(),
        n if n % (1 << 30) == 0 => format!("{} GiB", n >> 30),
        n if n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// Bytes with a binary unit and one decimal.
pub fn approx(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let (mut value, mut unit) = (n as f64 / 1024.0, 0);
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// The protection `opts` formats with, in words (mkfs, bench).
pub fn protection(opts: &FormatOptions) -> String {
    let replicas = if opts.meta_replicas {
        format!("metadata replicas (dead zone {})", bytes(opts.dead_zone))
    } else {
        "no metadata replicas".to_string()
    };
    let csum = if opts.data_csum {
        "data checksums"
    } else {
        "no data checksums"
    };
    let parity = if opts.data_parity { "parity" } else { "no parity" };
    format!("{replicas}, {csum}, {parity}")
}

pub fn run(path: &Path) -> Result<()> {
    let region = open(path, false)?;
    let kind = region.kind();
    let info = novafs::inspect(region).map_err(|e| explain_fs(path, e))?;
    let g = info.geometry;
    let data_pages = g.data_pages;
    println!("image:        {}", path.display());
    println!("media:        {kind}");
    println!(
        "format:       novafs version {}, feature flags {:#x}/{:#x}/{:#x}",
        g.version, g.features[0], g.features[1], g.features[2]
    );
    println!(
        "size:         {} bytes ({} MiB), {} data pages of 4 KiB",
        g.size,
        g.size >> 20,
        data_pages
    );
    println!("shards:       {}", g.shards);
    if g.replicas_stale {
        let dead_zone = bytes(g.dead_zone);
        println!(
            "metadata:     replicas stale (dead zone {dead_zone}; mounted with meta_protection=off, the next protected mount rewrites them)"
        );
    } else if g.meta_replicas {
        let dead_zone = bytes(g.dead_zone);
        println!("metadata:     replicas on (dead zone {dead_zone})");
    } else {
        println!("metadata:     no replicas (formatted without replicas)");
    }
    let csum = if g.data_csum {
        "strip checksums on (two copies)"
    } else {
        "no strip checksums"
    };
    let parity = if g.data_parity { "parity on" } else { "no parity" };
    println!("data:         {csum}, {parity}");
    let mode = match g.consistency {
        Ok(mode) => format!("{mode} (default for mounts)"),
        Err(code) => format!("unknown ({code}; mounts refuse the image: `novafs fsck --repair` resets it to strict)"),
    };
    if g.relaxed_mount {
        println!(
            "mode:         {mode}; a relaxed mount is in use or crashed (the next mount reseals its data-write intents)"
        );
    } else {
        println!("mode:         {mode}");
    }
    println!("health:       {}", g.health);
    println!("created:      {}", utc(g.created_ns));
    println!("mounts:       {} (last: {})", g.mount_count, utc(g.mounted_ns));
    let state = if g.clean {
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
    let (reserve, critical) = info.reserve;
    println!(
        "reserve:      {reserve} pages ({} MiB) held back from writes, creates and new snapshots, so that deleting \
         always works on a full image; {critical} of them only for snapshot deletion, GC, unmount and fsck --repair",
        (reserve * PAGE_SIZE) >> 20
    );
    match info.snapshots {
        Ok(list) if list.is_empty() => println!("snapshots:    none"),
        Ok(list) => {
            let names: Vec<String> = list
                .iter()
                .map(|s| String::from_utf8_lossy(&s.name).into_owned())
                .collect();
            println!(
                "snapshots:    {} ({}); `novafs snapshot list {}` shows the space each holds",
                list.len(),
                names.join(", "),
                path.display()
            );
        }
        Err(why) => println!("snapshots:    unreadable ({why})"),
    }
    Ok(())
}
