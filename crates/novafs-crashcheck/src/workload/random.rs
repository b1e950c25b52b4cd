//! Random operation sequences, chosen from the tree as it stands in a
//! trial run (so most are valid), on one shard or spread over two, or in
//! relaxed mode.

use novafs::{Consistency, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, RENAME_EXCHANGE, RENAME_NOREPLACE};
use novafs_ops::Op;

use super::relaxed::{look, target, way_of, Way};
use super::{apply, fresh_runner_as, tree_of, Expect, Workload, REGION_SIZE};
use novafs_rng::SplitMix as Rng;

/// [`random`] on two shards, each operation on a new thread so they use
/// both shards' journals and inode tables.
pub fn random_sharded(seed: u64, len: usize) -> Workload {
    let mut w = random_with(seed, len, 2, Consistency::Strict);
    w.name = format!("random2-{seed}-{len}");
    w
}

/// A random multi-operation sequence of `len` operations (seeded). Each op
/// is chosen from the tree as it stands in a trial run, so most are valid;
/// those that fail must change nothing.
pub fn random(seed: u64, len: usize) -> Workload {
    random_with(seed, len, 1, Consistency::Strict)
}

/// [`random`] on a relaxed image (Fortis §4.6), its writes mostly
/// overwrites inside the file. At least one op must change its node in
/// place: a sequence whose trial run had none ends with a file written
/// and then overwritten, which does.
pub fn random_relaxed(seed: u64, len: usize) -> Workload {
    let mut w = random_with(seed, len, 1, Consistency::Relaxed);
    w.name = format!("random-relaxed-{seed}-{len}");
    w
}

fn random_with(seed: u64, len: usize, shards: u32, mode: Consistency) -> Workload {
    let relaxed = mode == Consistency::Relaxed;
    let mut rng = Rng::derive(seed, 0x5e0);
    let mut ops = Vec::new();
    let size = if shards > 1 { 13 << 20 } else { REGION_SIZE };
    let spread = shards > 1;
    let mut r = fresh_runner_as(size, shards, mode).ok();
    if let Some(r) = r.as_mut() {
        let _ = apply(r, &Op::Mount, spread);
    }
    let mut in_place = 0;
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
                // Relaxed: an overwrite inside the file where it can be.
                Some(f) if relaxed && tree.nodes[f].size > 0 && rng.chance(3, 4) => {
                    let size = tree.nodes[f].size;
                    let off = rng.below(size);
                    let len = 1 + rng.below((size - off).min(9000));
                    Op::write(f.clone(), off, len, seed_i)
                }
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
        // Relaxed: one op in three an overwrite inside a file, which goes
        // in place when the file's newest entry can take its mtime.
        let nonempty: Vec<&String> = files.iter().filter(|f| tree.nodes[*f].size > 0).collect();
        // (Strict sequences draw nothing more: they stay as they were.)
        let pick = if relaxed { rng.pick(&nonempty).copied() } else { None };
        let op = match pick {
            Some(f) if rng.chance(1, 3) => {
                let size = tree.nodes[f].size;
                let off = rng.below(size);
                Op::write(f.clone(), off, 1 + rng.below((size - off).min(9000)), seed_i)
            }
            _ => op,
        };
        if let Some(r) = r.as_mut() {
            let target = target(&op).filter(|_| relaxed);
            let before = target.and_then(|p| look(r, p).ok());
            let ok = apply(r, &op, spread).is_ok();
            let after = target.filter(|_| ok).and_then(|p| look(r, p).ok());
            if let (Some(b), Some(a)) = (before, after) {
                in_place += usize::from(way_of(&b, &a) == Some(Way::InPlace));
            }
        }
        ops.push(op);
    }
    if relaxed && in_place == 0 {
        ops.extend([
            Op::create("/in-place"),
            Op::write("/in-place", 0, 3 * 4096, seed),
            Op::write("/in-place", 1000, 5000, seed + 1),
        ]);
    }
    Workload {
        name: format!("random-{seed}-{len}"),
        expect: Expect::MaySucceed,
        region_size: size,
        shards,
        spread,
        consistency: mode,
        min_in_place: usize::from(relaxed),
        ..Workload::new("", Vec::new(), ops)
    }
}
