//! fsck's space breakdown (NOVA-Fortis Fig. 12, `Report::space`): every
//! byte of the image counted once, the data area's pages split into
//! metadata, replicas, data and free, each metadata page with its replica
//! at its mirror.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use novafs::fsck::{MetaKind, Space};
use novafs::{FormatOptions, Fs, MountOptions, PAGE_SIZE, ROOT_INO};
use pm::{MemRegion, Region};

/// A 32 MiB two-shard image formatted with `opts`, holding a directory of
/// files of 1 to 20 pages, half of them removed again; then fsck's space.
fn space_of(opts: &FormatOptions) -> Space {
    let region: Arc<dyn Region> = Arc::new(MemRegion::new(32 << 20));
    Fs::format(region.clone(), opts).unwrap();
    let fs = Fs::open(region.clone(), MountOptions::default()).unwrap();
    let dir = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let page = vec![0x5Au8; PAGE_SIZE as usize];
    for i in 0..200u64 {
        let f = fs.create(dir, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap().ino;
        for k in 0..(i % 20 + 1) {
            fs.write(f, k * PAGE_SIZE, &page).unwrap();
        }
    }
    for i in (0..200u64).step_by(2) {
        fs.unlink(dir, format!("f{i}").as_bytes()).unwrap();
    }
    fs.unmount().unwrap();
    let rep = novafs::fsck::check(region, &|_, _| {}).unwrap();
    assert!(rep.is_clean(), "{:#?}", rep.problems);
    rep.space
}

#[test]
fn the_breakdown_s_parts_add_up_to_the_image_size() {
    for opts in [
        FormatOptions::default().shards(2),
        FormatOptions::default().shards(2).meta_replicas(false),
        FormatOptions::default()
            .shards(2)
            .meta_replicas(false)
            .data_csum(false)
            .data_parity(false),
    ] {
        let s = space_of(&opts);
        assert_eq!(s.total(), 32 << 20, "{opts:?}: {s:#?}");
        assert_eq!(s.unaccounted_pages, 0);
        // 100 files of 2, 4, ..., 20 pages are left.
        assert!(s.data_pages >= 1100, "{}", s.data_pages);
        assert!(s.meta_bytes_of(MetaKind::InodeTable) > 0 && s.meta_bytes_of(MetaKind::Log) > 0);
        assert_eq!(s.data_csums > 0, opts.data_csum);
        assert_eq!(s.data_parity > 0, opts.data_parity);
        let replicas = s.meta_replica_bytes();
        assert_eq!(replicas, if opts.meta_replicas { s.meta_bytes() } else { 0 });
    }
}

#[test]
fn each_replica_lies_at_least_the_dead_zone_above_its_primary() {
    let dead_zone = 256 * 1024;
    let s = space_of(&FormatOptions::default().shards(2).dead_zone(dead_zone));
    assert!(s.meta.windows(2).all(|w| w[0].off < w[1].off), "sorted, no page twice");
    for m in &s.meta {
        let r = m.replica.unwrap();
        assert!(r >= m.off + dead_zone, "{m:?}");
    }
}
