//! Random operation sequences, chosen from the tree as it stands in a
//! trial run (so most are valid), on one shard or spread over two.

use novafs::{FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, RENAME_EXCHANGE, RENAME_NOREPLACE};
use novafs_ops::Op;

use super::{apply, fresh_runner, tree_of, Expect, Workload, REGION_SIZE};
use novafs_rng::SplitMix as Rng;

/// [`random`] on two shards, each operation on a new thread so they use
/// both shards' journals and inode tables.
pub fn random_sharded(seed: u64, len: usize) -> Workload {
    let mut w = random_with(seed, len, 2);
    w.name = format!("random2-{seed}-{len}");
    w
}

/// A random multi-operation sequence of `len` operations (seeded). Each op
/// is chosen from the tree as it stands in a trial run, so most are valid;
/// those that fail must change nothing.
pub fn random(seed: u64, len: usize) -> Workload {
    random_with(seed, len, 1)
}

fn random_with(seed: u64, len: usize, shards: u32) -> Workload {
    let mut rng = Rng::derive(seed, 0x5e0);
    let mut ops = Vec::new();
    let size = if shards > 1 { 13 << 20 } else { REGION_SIZE };
    let spread = shards > 1;
    let mut r = fresh_runner(size, shards).ok();
    if let Some(r) = r.as_mut() {
        let _ = apply(r, &Op::Mount, spread);
    }
    let names = ["a", "b", "c", "d"];
    for i in 0..len {
        let tree = r.as_ref().and_then(|r| tree_of(r).ok()).unwrap_or_default();
        let dirs: Vec<String> = tree
            .nodes
            .iter()
            .filter(|(_, n)| n.kind == "Directory")
            .map(|(p, _)| p.clone())
            .collect();
        let files: Vec<String> = tree
            .nodes
            .iter()
            .filter(|(_, n)| n.kind == "RegularFile")
            .map(|(p, _)| p.clone())
            .collect();
        let any: Vec<String> = tree.nodes.keys().filter(|p| *p != "/").cloned().collect();
        let dir = rng.pick(&dirs).cloned().unwrap_or_else(|| "/".into());
        let join = |d: &str, n: &str| if d == "/" { format!("/{n}") } else { format!("{d}/{n}") };
        let fresh = join(&dir, names[rng.below(names.len() as u64) as usize]);
        let seed_i = seed.wrapping_mul(1000) + i as u64;
        let op = match rng.below(24) {
            0..=2 => Op::create(fresh),
            3 => Op::mkdir(fresh),
            4 => Op::symlink(fresh, format!("t{}", rng.below(100))),
            5 => Op::mknod(fresh, libc::S_IFIFO | 0o644, 0),
            6..=9 => match rng.pick(&files) {
                Some(f) => {
                    let off = [0, 100, 4096, 5000, 8191][rng.below(5) as usize];
                    let len = [1, 64, 700, 4096, 9000][rng.below(5) as usize];
                    Op::write(f.clone(), off, len, seed_i)
                }
                None => Op::create(fresh),
            },
            10 => match rng.pick(&files) {
                Some(f) => Op::truncate(f.clone(), [0, 10, 4096, 6000, 20_000][rng.below(5) as usize]),
                None => Op::mkdir(fresh),
            },
            11 => match rng.pick(&files) {
                Some(f) => Op::fallocate(
                    f.clone(),
                    [0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE][rng.below(3) as usize],
                    rng.below(3) * 3000,
                    1 + rng.below(9000),
                ),
                None => Op::create(fresh),
            },
            12 | 13 => match rng.pick(&any) {
                Some(p) => {
                    let flags = [0, 0, 0, RENAME_NOREPLACE, RENAME_EXCHANGE][rng.below(5) as usize];
                    let to = if rng.chance(1, 2) {
                        fresh
                    } else {
                        rng.pick(&any).cloned().unwrap_or(fresh)
                    };
                    Op::rename(p.clone(), to, flags)
                }
                None => Op::create(fresh),
            },
            14 => match rng.pick(&files) {
                Some(f) => Op::link(f.clone(), fresh),
                None => Op::create(fresh),
            },
            15 | 16 => match rng.pick(&any) {
                Some(p) if tree.nodes[p].kind == "Directory" => Op::Rmdir(p.clone()),
                Some(p) => Op::Unlink(p.clone()),
                None => Op::create(fresh),
            },
            17 => match rng.pick(&any) {
                Some(p) => Op::chmod(p.clone(), 0o600 + rng.below(0o177) as u32),
                None => Op::mkdir(fresh),
            },
            18 => match rng.pick(&any) {
                Some(p) => Op::chown(p.clone(), rng.below(5) as u32, rng.below(5) as u32),
                None => Op::mkdir(fresh),
            },
            20 | 21 => match rng.pick(&any) {
                // Values inline, and large enough for data pages.
                Some(p) => {
                    let name = ["user.a", "user.b", "trusted.c"][rng.below(3) as usize];
                    if rng.chance(1, 3) {
                        Op::removexattr(p.clone(), name)
                    } else {
                        Op::setxattr(p.clone(), name, [0, 10, 900, 5000][rng.below(4) as usize], seed_i)
                    }
                }
                None => Op::create(fresh),
            },
            // Snapshots (Fortis §3): what they keep and their list.
            22 => Op::Snapshot(format!("s{}", rng.below(3))),
            23 => Op::DeleteSnapshot(format!("s{}", rng.below(3))),
            _ => {
                if rng.chance(1, 4) {
                    Op::Remount
                } else {
                    match rng.pick(&files) {
                        Some(f) => Op::write(f.clone(), tree.nodes[f].size, 1 + rng.below(5000), seed_i),
                        None => Op::create(fresh),
                    }
                }
            }
        };
        if let Some(r) = r.as_mut() {
            let _ = apply(r, &op, spread);
        }
        ops.push(op);
    }
    Workload {
        name: format!("random-{seed}-{len}"),
        setup: Vec::new(),
        ops,
        expect: Expect::MaySucceed,
        gc: None,
        region_size: size,
        shards,
        spread,
    }
}
