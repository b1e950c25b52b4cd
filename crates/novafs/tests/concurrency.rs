//! Many threads on one mounted novafs (DESIGN.md §2: per-inode locks, no
//! global lock on the data path). Each thread predicts the exact result of
//! every call it makes on the names it owns; after the threads finish, the
//! image is unmounted, checked by fsck, remounted and compared again. Every
//! test runs its threads under a watchdog, so a deadlock fails the test
//! instead of hanging it.
#![allow(clippy::unwrap_used)]

mod common;

use novafs_rng::SplitMix;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::{assert_fsck_clean, fresh, mount, names, read_all};
use novafs::{Error, FileType, Fs, Ino, SetAttr, ROOT_INO};

/// How long any one test's threads may run before it counts as a deadlock.
const WATCHDOG: Duration = Duration::from_secs(120);

type Worker<T> = Box<dyn FnOnce() -> T + Send>;

/// Runs each worker on its own thread and waits at most [`WATCHDOG`] for all
/// of them. A worker's panic is re-raised here.
fn run_all<T: Send + 'static>(workers: Vec<Worker<T>>) -> Vec<T> {
    struct Done(mpsc::Sender<usize>, usize);
    impl Drop for Done {
        fn drop(&mut self) {
            let _ = self.0.send(self.1);
        }
    }
    let (tx, rx) = mpsc::channel();
    let handles: Vec<_> = workers
        .into_iter()
        .enumerate()
        .map(|(i, w)| {
            let tx = tx.clone();
            thread::spawn(move || {
                let _done = Done(tx, i);
                w()
            })
        })
        .collect();
    drop(tx);
    let deadline = Instant::now() + WATCHDOG;
    let mut running = vec![true; handles.len()];
    for _ in 0..handles.len() {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(i) => running[i] = false,
            Err(_) => {
                let stuck: Vec<usize> = (0..running.len()).filter(|&i| running[i]).collect();
                panic!("threads {stuck:?} still running after {WATCHDOG:?}: deadlock?");
            }
        }
    }
    handles
        .into_iter()
        .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
        .collect()
}

/// Files one thread owns: (directory index, name) → contents.
#[derive(Clone, Debug, Default)]
struct Owned {
    dirs: Vec<Ino>,
    prefix: String,
    files: BTreeMap<(usize, String), Vec<u8>>,
}

impl Owned {
    fn name(&self, rng: &mut SplitMix) -> (usize, String) {
        let d = rng.below(self.dirs.len() as u64) as usize;
        (d, format!("{}{}", self.prefix, rng.below(8)))
    }

    /// This thread's names in directory `d`, sorted.
    fn names_in(&self, d: usize) -> Vec<String> {
        self.files
            .keys()
            .filter(|(i, _)| *i == d)
            .map(|(_, n)| n.clone())
            .collect()
    }

    /// Listing and contents of every owned file.
    fn verify(&self, fs: &Fs, what: &str) {
        for (d, &dir) in self.dirs.iter().enumerate() {
            let mine: Vec<String> = names(fs, dir)
                .into_iter()
                .filter(|n| n.starts_with(&self.prefix))
                .collect();
            assert_eq!(mine, self.names_in(d), "{what}: names of {}", self.prefix);
        }
        for ((d, name), data) in &self.files {
            let a = fs.lookup(self.dirs[*d], name.as_bytes()).unwrap();
            assert_eq!(a.nlink, 1, "{what}: {name}");
            assert!(read_all(fs, a.ino) == *data, "{what}: contents of {name}");
        }
    }
}

fn expect_err<T: std::fmt::Debug>(r: Result<T, Error>, errno: i32, what: &str) {
    match r {
        Err(e) if e.errno() == errno => {}
        other => panic!("{what}: got {other:?}, want errno {errno}"),
    }
}

/// `ops` random calls on the files `o` owns, each result predicted exactly.
fn churn_owned(fs: &Fs, o: &mut Owned, seed: u64, ops: usize) {
    let mut rng = SplitMix::new(seed);
    for step in 0..ops {
        let (d, name) = o.name(&mut rng);
        let dir = o.dirs[d];
        let key = (d, name.clone());
        let what = format!("{} step {step}", o.prefix);
        let exists = o.files.contains_key(&key);
        match rng.below(10) {
            0 | 1 => {
                let r = fs.create(dir, name.as_bytes(), 0o644, 0, 0);
                if exists {
                    expect_err(r, libc::EEXIST, &what);
                } else {
                    r.unwrap();
                    o.files.insert(key, Vec::new());
                }
            }
            2..=4 => {
                let off = rng.below(24 * 1024) as usize;
                let len = 1 + rng.below(9000) as usize;
                let byte = (rng.below(255) + 1) as u8;
                let r = fs.lookup(dir, name.as_bytes());
                let Some(data) = o.files.get_mut(&key) else {
                    expect_err(r, libc::ENOENT, &what);
                    continue;
                };
                let ino = r.unwrap().ino;
                assert_eq!(fs.write(ino, off as u64, &vec![byte; len]).unwrap(), len);
                if data.len() < off + len {
                    data.resize(off + len, 0);
                }
                data[off..off + len].fill(byte);
            }
            5 => {
                let r = fs.lookup(dir, name.as_bytes());
                match o.files.get(&key) {
                    Some(data) => assert!(read_all(fs, r.unwrap().ino) == *data, "{what}"),
                    None => expect_err(r, libc::ENOENT, &what),
                }
            }
            6 | 7 => {
                let (d2, name2) = o.name(&mut rng);
                let r = fs.rename(dir, name.as_bytes(), o.dirs[d2], name2.as_bytes(), 0);
                match o.files.remove(&key) {
                    Some(data) => {
                        r.unwrap();
                        o.files.insert((d2, name2), data);
                    }
                    None => expect_err(r, libc::ENOENT, &what),
                }
            }
            8 => {
                let r = fs.unlink(dir, name.as_bytes());
                if o.files.remove(&key).is_some() {
                    r.unwrap();
                } else {
                    expect_err(r, libc::ENOENT, &what);
                }
            }
            _ => {
                let size = rng.below(30 * 1024) as usize;
                let r = fs.lookup(dir, name.as_bytes());
                let Some(data) = o.files.get_mut(&key) else {
                    expect_err(r, libc::ENOENT, &what);
                    continue;
                };
                let set = SetAttr::default().size(size as u64);
                assert_eq!(fs.setattr(r.unwrap().ino, &set).unwrap().size, size as u64);
                data.resize(size, 0);
            }
        }
    }
}

/// Unmounts, checks the image, remounts (clean), and returns the new mount.
fn cycle(region: &Arc<dyn pm::Region>, fs: Arc<Fs>) -> Fs {
    let fs = Arc::into_inner(fs).expect("every thread has let go of the file system");
    fs.unmount().unwrap();
    assert_fsck_clean(region);
    let fs = mount(region);
    assert!(fs.mount_report().clean);
    fs
}

/// Threads that each work in a directory of their own see exactly their own
/// files, also after a remount; no thread's work leaks into another's.
#[test]
fn threads_in_separate_directories_see_only_their_own_files() {
    const THREADS: u64 = 4;
    let region = fresh(64, 2);
    let fs = Arc::new(mount(&region));
    let workers: Vec<Worker<Owned>> = (0..THREADS)
        .map(|t| {
            let fs = fs.clone();
            Box::new(move || {
                let top = fs.mkdir(ROOT_INO, format!("w{t}").as_bytes(), 0o755, 0, 0).unwrap();
                let sub = fs.mkdir(top.ino, b"sub", 0o755, 0, 0).unwrap();
                let mut o = Owned {
                    dirs: vec![top.ino, sub.ino],
                    prefix: "f".into(),
                    files: BTreeMap::new(),
                };
                churn_owned(&fs, &mut o, t + 1, 40_000);
                o.verify(&fs, "before unmount");
                o
            }) as Worker<Owned>
        })
        .collect();
    let owned = run_all(workers);
    let mut top: Vec<String> = (0..THREADS).map(|t| format!("w{t}")).collect();
    top.sort();
    assert_eq!(names(&fs, ROOT_INO), top);
    for o in &owned {
        // "sub" is the only other name in each thread's top directory.
        let mut want = o.names_in(0);
        want.push("sub".into());
        want.sort();
        assert_eq!(names(&fs, o.dirs[0]), want);
        assert_eq!(names(&fs, o.dirs[1]), o.names_in(1));
    }
    let fs = cycle(&region, fs);
    for o in &owned {
        o.verify(&fs, "after remount");
    }
    drop(fs); // and once more after a crash
    assert_fsck_clean(&region);
    let fs = mount(&region);
    for o in &owned {
        o.verify(&fs, "after crash");
    }
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// The shared file's contents at version `v`: `v` over and over, so a read
/// that mixes two versions shows.
fn record(v: u32) -> Vec<u8> {
    const RECORD: usize = 3 * 4096 + 123;
    v.to_le_bytes().iter().copied().cycle().take(RECORD).collect()
}

/// One shared directory: threads own disjoint name sets there (moving files
/// in and out of private directories), one writer rewrites a shared file
/// while readers check every read sees exactly one whole write (strict
/// mode: writes are atomic).
#[test]
fn threads_sharing_one_directory_keep_disjoint_names_and_atomic_writes() {
    const THREADS: u64 = 4;
    const RECORD: usize = 3 * 4096 + 123;
    const VERSIONS: u32 = 20_000;
    let region = fresh(64, 2);
    let fs = Arc::new(mount(&region));
    let shared = fs.mkdir(ROOT_INO, b"shared", 0o755, 0, 0).unwrap().ino;
    let common = fs.create(shared, b"common", 0o644, 0, 0).unwrap().ino;
    fs.write(common, 100, &record(1)).unwrap();
    let done = Arc::new(AtomicBool::new(false));

    let mut workers: Vec<Worker<Option<Owned>>> = Vec::new();
    for t in 0..THREADS {
        let fs = fs.clone();
        workers.push(Box::new(move || {
            let private = fs.mkdir(ROOT_INO, format!("p{t}").as_bytes(), 0o755, 0, 0).unwrap();
            let mut o = Owned {
                dirs: vec![shared, private.ino],
                prefix: format!("t{t}_"),
                files: BTreeMap::new(),
            };
            churn_owned(&fs, &mut o, 100 + t, 30_000);
            o.verify(&fs, "before unmount");
            Some(o)
        }));
    }
    {
        let (fs, done) = (fs.clone(), done.clone());
        workers.push(Box::new(move || {
            for v in 2..=VERSIONS {
                fs.write(common, 100, &record(v)).unwrap();
            }
            done.store(true, Ordering::Release);
            None
        }));
    }
    for r in 0..2 {
        let (fs, done) = (fs.clone(), done.clone());
        workers.push(Box::new(move || {
            let mut buf = vec![0u8; RECORD];
            let mut reads = 0u64;
            let mut last = 0u32;
            loop {
                let finished = done.load(Ordering::Acquire);
                let h = fs.open_handle(common).unwrap();
                assert_eq!(h.size, (100 + RECORD) as u64);
                assert_eq!(fs.read(common, 100, &mut buf).unwrap(), RECORD);
                fs.release_handle(common).unwrap();
                let v = u32::from_le_bytes(buf[..4].try_into().unwrap());
                assert!(buf == record(v), "reader {r}: a read mixed version {v} with another");
                assert!(v >= last, "reader {r}: went back from version {last} to {v}");
                last = v;
                reads += 1;
                if finished {
                    break;
                }
            }
            assert!(reads > 0);
            None
        }));
    }
    let owned: Vec<Owned> = run_all(workers).into_iter().flatten().collect();

    let mut want_shared: Vec<String> = owned.iter().flat_map(|o| o.names_in(0)).collect();
    want_shared.push("common".into());
    want_shared.sort();
    assert_eq!(names(&fs, shared), want_shared);
    let fs = cycle(&region, fs);
    for o in &owned {
        o.verify(&fs, "after remount");
    }
    let mut want = vec![0u8; 100];
    want.extend(record(VERSIONS));
    assert!(read_all(&fs, common) == want);
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// Threads racing on one name: of concurrent creates exactly one wins (the
/// rest see EEXIST), of concurrent unlinks exactly one wins (ENOENT), of
/// concurrent renames of one source exactly one wins.
#[test]
fn racing_calls_on_one_name_succeed_exactly_once() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 3000;
    let region = fresh(64, 2);
    let fs = Arc::new(mount(&region));
    let dir = fs.mkdir(ROOT_INO, b"race", 0o755, 0, 0).unwrap().ino;
    let barrier = Arc::new(Barrier::new(THREADS));
    let wins: Arc<Vec<[AtomicU32; 3]>> = Arc::new(
        (0..ROUNDS)
            .map(|_| std::array::from_fn(|_| AtomicU32::new(0)))
            .collect(),
    );
    let workers: Vec<Worker<()>> = (0..THREADS)
        .map(|t| {
            let (fs, barrier, wins) = (fs.clone(), barrier.clone(), wins.clone());
            Box::new(move || {
                for k in 0..ROUNDS {
                    let name = format!("n{k}");
                    barrier.wait();
                    match fs.create(dir, name.as_bytes(), 0o644, 0, 0) {
                        Ok(_) => _ = wins[k][0].fetch_add(1, Ordering::Relaxed),
                        Err(e) => assert_eq!(e.errno(), libc::EEXIST, "create {name}"),
                    }
                    barrier.wait();
                    let to = format!("m{k}_{t}");
                    match fs.rename(dir, name.as_bytes(), dir, to.as_bytes(), 0) {
                        Ok(()) => _ = wins[k][1].fetch_add(1, Ordering::Relaxed),
                        Err(e) => assert_eq!(e.errno(), libc::ENOENT, "rename {name}"),
                    }
                    barrier.wait();
                    // Whoever won the rename holds the name "m{k}_{winner}".
                    for w in 0..THREADS {
                        let n = format!("m{k}_{w}");
                        match fs.unlink(dir, n.as_bytes()) {
                            Ok(()) => _ = wins[k][2].fetch_add(1, Ordering::Relaxed),
                            Err(e) => assert_eq!(e.errno(), libc::ENOENT, "unlink {n}"),
                        }
                    }
                }
            }) as Worker<()>
        })
        .collect();
    run_all(workers);
    for (k, w) in wins.iter().enumerate() {
        let w: Vec<u32> = w.iter().map(|a| a.load(Ordering::Relaxed)).collect();
        assert_eq!(w, vec![1, 1, 1], "round {k}: winners of create, rename, unlink");
    }
    assert_eq!(names(&fs, dir), Vec::<String>::new());
    let fs = cycle(&region, fs);
    assert_eq!(names(&fs, dir), Vec::<String>::new());
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// Directories moved concurrently across parents, including moves that
/// would put one inside its own subtree, while other threads create and
/// remove files and directories inside them: no deadlock (watchdog), no loop, and the tree
/// stays a tree with correct ".." and link counts.
#[test]
fn concurrent_cross_directory_renames_neither_deadlock_nor_make_loops() {
    const DIRS: usize = 8;
    const MOVERS: u64 = 3;
    const MOVES: usize = 50_000;
    let region = fresh(64, 2);
    let fs = Arc::new(mount(&region));
    let dirs: Arc<Vec<Ino>> = Arc::new(
        (0..DIRS)
            .map(|i| fs.mkdir(ROOT_INO, format!("n{i}").as_bytes(), 0o755, 0, 0).unwrap().ino)
            .collect(),
    );
    let mut workers: Vec<Worker<u64>> = Vec::new();
    for t in 0..MOVERS {
        let (fs, dirs) = (fs.clone(), dirs.clone());
        workers.push(Box::new(move || {
            let mut rng = SplitMix::new(1000 + t);
            let mut moved = 0;
            for _ in 0..MOVES {
                let i = rng.below(DIRS as u64) as usize;
                let name = format!("n{i}");
                // Where it is now (may change before the rename runs).
                let Ok(parent) = fs.lookup(dirs[i], b"..").map(|a| a.ino) else {
                    continue;
                };
                let to = match rng.below(DIRS as u64 + 1) as usize {
                    j if j == DIRS => ROOT_INO,
                    j => dirs[j],
                };
                match fs.rename(parent, name.as_bytes(), to, name.as_bytes(), 0) {
                    Ok(()) => moved += 1,
                    // Moved by someone else meanwhile, or into itself.
                    Err(e) if e.errno() == libc::ENOENT || e.errno() == libc::EINVAL => {}
                    Err(e) => panic!("rename n{i} into {to}: {e:?}"),
                }
            }
            moved
        }));
    }
    for t in 0..2u64 {
        let (fs, dirs) = (fs.clone(), dirs.clone());
        workers.push(Box::new(move || {
            let mut rng = SplitMix::new(2000 + t);
            for k in 0..MOVES {
                let d = dirs[rng.below(DIRS as u64) as usize];
                let name = format!("f{t}_{k}");
                if k % 2 == 0 {
                    fs.create(d, name.as_bytes(), 0o644, 0, 0).unwrap();
                    fs.write(fs.lookup(d, name.as_bytes()).unwrap().ino, 0, b"x").unwrap();
                    fs.unlink(d, name.as_bytes()).unwrap();
                } else {
                    fs.mkdir(d, name.as_bytes(), 0o755, 0, 0).unwrap();
                    fs.rmdir(d, name.as_bytes()).unwrap();
                }
            }
            0
        }));
    }
    let moved: u64 = run_all(workers).iter().sum();
    assert!(moved > 100, "only {moved} moves succeeded");

    let shape = tree_shape(&fs, &dirs);
    let fs = cycle(&region, fs);
    assert_eq!(tree_shape(&fs, &dirs), shape, "tree changed across a remount");
    fs.unmount().unwrap();
    assert_fsck_clean(&region);
}

/// Walks the tree from the root, checking every directory's "..", link
/// count and that each of `dirs` appears exactly once; returns each
/// directory's parent.
fn tree_shape(fs: &Fs, dirs: &[Ino]) -> Vec<Ino> {
    let mut parent_of = BTreeMap::new();
    let mut todo = vec![ROOT_INO];
    while let Some(d) = todo.pop() {
        let mut subdirs = 0;
        fs.readdir(d, 0, |e| {
            if e.name != b"." && e.name != b".." {
                assert_eq!(e.kind, FileType::Directory, "only directories are left");
                assert!(parent_of.insert(e.ino, d).is_none(), "{} listed twice", e.ino);
                todo.push(e.ino);
                subdirs += 1;
            }
            false
        })
        .unwrap();
        assert_eq!(fs.getattr(d).unwrap().nlink, 2 + subdirs, "nlink of {d}");
        let up = fs.lookup(d, b"..").unwrap().ino;
        assert_eq!(up, *parent_of.get(&d).unwrap_or(&ROOT_INO), "'..' of {d}");
    }
    assert_eq!(parent_of.len(), dirs.len(), "every directory reachable once");
    dirs.iter().map(|d| parent_of[d]).collect()
}
