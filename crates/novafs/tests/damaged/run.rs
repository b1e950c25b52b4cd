//! Running one case (worker side): every step a user could take on the
//! damaged image, each of which may fail but only with a clear error.

use std::collections::{HashSet, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use novafs::{Attr, Error, FileType, Fs, MountOptions, ROOT_INO, SEEK_DATA, SEEK_HOLE};
use pm::{MemRegion, Region};

use super::bases::*;
use super::watch::*;

// ---------------------------------------------------------------------------
// Running one case (worker side).

#[derive(Clone, Debug)]
pub struct Finding {
    pub kind: String,
    pub site: String,
    pub message: String,
}

impl Finding {
    pub fn signature(&self) -> String {
        // The function, not the line: lines move as the code changes.
        let site = self.site.split(" (crates/").next().unwrap_or(&self.site);
        format!("{} @ {site}", self.kind)
    }
}

/// What the steps check besides "no panic, no hang".
pub struct Expectations<'a> {
    /// The base image's files, when the case is built on one.
    pub model: Option<&'a Model>,
    /// Files must read back exactly as written, or fail (`Case::strict`).
    pub strict: bool,
}

pub struct Probe<'a> {
    pub expect: Expectations<'a>,
    pub findings: Vec<Finding>,
    pub notes: Vec<String>,
}

/// An error from inspect, fsck or a mount must say what is wrong with the
/// image: not a stray errno like ENOENT or EINVAL.
pub fn is_clear_image_error(e: &Error) -> bool {
    matches!(
        e,
        Error::Corrupt(_)
            | Error::NotNovafs(_)
            | Error::TooNew { .. }
            | Error::TooSmall { .. }
            | Error::NotSupported(_)
            | Error::Pm(_)
    )
}

pub fn variant_name(e: &Error) -> String {
    let d = format!("{e:?}");
    d.split(['(', ' ', '{']).next().unwrap_or(&d).to_string()
}

impl Probe<'_> {
    pub fn find(&mut self, kind: &str, site: String, message: String) {
        self.findings.push(Finding {
            kind: kind.into(),
            site,
            message,
        });
    }

    /// Any error of any call must say something.
    pub fn error(&mut self, step: &'static str, e: &Error) {
        if e.to_string().trim().is_empty() {
            self.find("empty-error", step.into(), format!("{e:?} displays as nothing"));
        }
    }

    pub fn image_error(&mut self, step: &'static str, e: &Error) {
        self.error(step, e);
        self.notes.push(format!("{step}=err:{}", variant_name(e)));
        if !is_clear_image_error(e) {
            self.find(
                "unclear-error",
                format!("{step}: {}", variant_name(e)),
                format!("{step} failed with \"{e}\" ({e:?}), which does not say the image is damaged"),
            );
        }
    }

    pub fn steps(&mut self, mem: &Arc<MemRegion>) {
        let region: Arc<dyn Region> = mem.clone();
        set_step("inspect");
        match novafs::inspect(region.clone()) {
            Ok(_) => self.notes.push("inspect=ok".into()),
            Err(e) => self.image_error("inspect", &e),
        }
        self.fsck(&region, "fsck");
        set_step("open-ro");
        match Fs::open(region.clone(), MountOptions::default().read_only(true)) {
            Ok(fs) => {
                self.notes.push("ro=ok".into());
                self.walk(&fs, self.expect.strict);
                set_step("unmount-ro");
                if let Err(e) = fs.unmount() {
                    self.error("unmount-ro", &e);
                }
            }
            Err(e) => self.image_error("open-ro", &e),
        }
        set_step("open-rw");
        match Fs::open(region.clone(), MountOptions::default()) {
            Ok(fs) => {
                self.notes.push("rw=ok".into());
                self.walk(&fs, self.expect.strict);
                let wrote = self.mutate(&fs);
                set_step("unmount");
                let unmounted = match fs.unmount() {
                    Ok(()) => true,
                    Err(e) => {
                        self.error("unmount", &e);
                        false
                    }
                };
                set_step("reopen");
                match Fs::open(region.clone(), MountOptions::default()) {
                    Ok(fs) => {
                        self.notes.push("reopen=ok".into());
                        if wrote && unmounted {
                            self.check_new_file(&fs);
                        }
                        self.walk(&fs, false);
                        set_step("unmount-reopened");
                        if let Err(e) = fs.unmount() {
                            self.error("unmount-reopened", &e);
                        }
                    }
                    Err(e) => self.image_error("reopen", &e),
                }
            }
            Err(e) => self.image_error("open-rw", &e),
        }
        self.fsck(&region, "fsck-after");
    }

    pub fn fsck(&mut self, region: &Arc<dyn Region>, step: &'static str) {
        set_step(step);
        match novafs::fsck::check(region.clone(), &|_, _| {}) {
            Ok(rep) => {
                let outcome = if rep.is_clean() { "clean" } else { "problems" };
                self.notes.push(format!("{step}={outcome}"));
                if rep.problems.iter().any(|p| p.trim().is_empty()) {
                    self.find("empty-error", step.into(), "fsck reported an empty problem".into());
                }
            }
            Err(e) => self.image_error(step, &e),
        }
    }

    /// Every name, attribute, file byte and link target reachable from the
    /// root, with bounds of its own so a damaged tree cannot make the walk
    /// itself endless.
    pub fn walk(&mut self, fs: &Fs, strict: bool) {
        set_step("walk");
        let _ = fs.statfs();
        if let Err(e) = fs.getattr(ROOT_INO) {
            self.error("walk", &e);
        }
        let model = self.expect.model.filter(|_| strict);
        if let Some(model) = self.expect.model {
            for path in model.keys() {
                if let Err(e) = fs.resolve(path) {
                    self.error("walk", &e);
                }
            }
        }
        let mut queue = VecDeque::from([(ROOT_INO, String::new())]);
        let mut dirs = HashSet::new();
        let mut names = 0usize;
        while let Some((dir, path)) = queue.pop_front() {
            if !dirs.insert(dir) || dirs.len() > 1000 || names > 20_000 {
                continue;
            }
            let mut list = Vec::new();
            if let Err(e) = fs.readdir(dir, 0, |e| {
                list.push(e);
                list.len() >= 10_000
            }) {
                self.error("walk", &e);
                continue;
            }
            let mut n = 0;
            if let Err(e) = fs.readdir_plus(dir, 0, u64::MAX, |_, _| {
                n += 1;
                n >= 10_000
            }) {
                self.error("walk", &e);
            }
            if let Some(mid) = list.get(list.len() / 2) {
                if let Err(e) = fs.readdir(dir, mid.next_offset, |_| false) {
                    self.error("walk", &e);
                }
            }
            for e in list {
                names += 1;
                let attr = match fs.lookup(dir, &e.name) {
                    Ok(a) => a,
                    Err(err) => {
                        self.error("walk", &err);
                        continue;
                    }
                };
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                if let Err(err) = fs.getattr(e.ino) {
                    self.error("walk", &err);
                }
                let child = format!("{path}/{}", String::from_utf8_lossy(&e.name));
                let got = match attr.kind {
                    FileType::Directory => {
                        queue.push_back((attr.ino, child.clone()));
                        Some(Expect::Dir)
                    }
                    FileType::RegularFile => self.read_file(fs, &attr).map(Expect::File),
                    FileType::Symlink => match fs.readlink(attr.ino) {
                        Ok(t) => Some(Expect::Symlink(t)),
                        Err(err) => {
                            self.error("walk", &err);
                            None
                        }
                    },
                    k => Some(Expect::Special(k)),
                };
                if let (Some(model), Some(got)) = (model, got) {
                    self.compare(model, &child, got);
                }
            }
        }
    }

    pub fn compare(&mut self, model: &Model, path: &str, got: Expect) {
        let describe = |e: &Expect| match e {
            Expect::Dir => "a directory".to_string(),
            Expect::File(d) => format!("a file of {} bytes (crc {:08x})", d.len(), crc32c::crc32c(d)),
            Expect::Symlink(t) => format!("a symlink to {:?}", String::from_utf8_lossy(t)),
            Expect::Special(k) => format!("a {k:?}"),
        };
        match model.get(path) {
            Some(want) if *want == got => {}
            Some(want) => self.find(
                "silent-change",
                path.into(),
                format!(
                    "{path} reads as {} without an error; it was written as {}",
                    describe(&got),
                    describe(want)
                ),
            ),
            None => self.find(
                "silent-change",
                "unexpected name".into(),
                format!("{path} ({}) appeared; it was never created", describe(&got)),
            ),
        }
    }

    /// The whole file (up to 4 MiB), or None if a read failed or the file
    /// claims more. Also reads at the edges and seeks.
    pub fn read_file(&mut self, fs: &Fs, attr: &Attr) -> Option<Vec<u8>> {
        const LIMIT: u64 = 4 << 20;
        let mut buf = vec![0u8; 64 << 10];
        for off in [attr.size, attr.size.saturating_sub(1), novafs::MAX_FILE_SIZE] {
            if let Err(e) = fs.read(attr.ino, off, &mut buf[..16]) {
                self.error("walk", &e);
            }
        }
        for whence in [SEEK_DATA, SEEK_HOLE] {
            if let Err(e) = fs.lseek(attr.ino, 0, whence) {
                self.error("walk", &e);
            }
        }
        let mut out = Vec::new();
        while (out.len() as u64) < attr.size.min(LIMIT) {
            let want = (attr.size.min(LIMIT) - out.len() as u64).min(buf.len() as u64) as usize;
            match fs.read(attr.ino, out.len() as u64, &mut buf[..want]) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) => {
                    self.error("walk", &e);
                    return None;
                }
            }
        }
        (attr.size <= LIMIT).then_some(out)
    }

    /// Changes on the damaged image: a new file of 8 KiB (which must read
    /// back), and changes to damaged objects, which must fail cleanly if
    /// they fail. Returns whether the new file was written.
    pub fn mutate(&mut self, fs: &Fs) -> bool {
        set_step("mutate");
        let data = pattern(8192, 77);
        let wrote = match fs.create(ROOT_INO, NEW_NAME, 0o644, 0, 0) {
            Ok(a) => match fs.write(a.ino, 0, &data) {
                Ok(8192) => {
                    self.check_file(fs, a.ino, &data, "mutate");
                    true
                }
                Ok(n) => {
                    self.find("short-write", "mutate".into(), format!("write of 8192 bytes wrote {n}"));
                    false
                }
                Err(e) => {
                    self.error("mutate", &e);
                    false
                }
            },
            Err(e) => {
                self.error("mutate", &e);
                false
            }
        };
        let mut results = Vec::new();
        results.push(fs.mkdir(ROOT_INO, b"fuzz-dir", 0o755, 0, 0).map(|_| ()));
        if let Ok(d) = fs.lookup(ROOT_INO, b"fuzz-dir") {
            results.push(fs.rename(ROOT_INO, b"small", d.ino, b"small", 0));
        }
        if let Ok(b) = fs.resolve("/a/b") {
            results.push(fs.unlink(b.ino, b"f2"));
        }
        if let Ok(f) = fs.resolve("/appendlog") {
            results.push(fs.write(f.ino, f.size, b"one more line\n").map(|_| ()));
        }
        if let Ok(f) = fs.resolve("/a/f1") {
            let set = novafs::SetAttr::default().size(100);
            results.push(fs.setattr(f.ino, &set).map(|_| ()));
        }
        if let Ok(ch) = fs.resolve("/churn") {
            results.push(fs.create(ch.ino, b"late", 0o644, 0, 0).map(|_| ()));
        }
        for r in results {
            if let Err(e) = r {
                self.error("mutate", &e);
            }
        }
        wrote
    }

    pub fn check_file(&mut self, fs: &Fs, ino: u64, want: &[u8], step: &'static str) {
        let mut buf = vec![0u8; want.len() + 16];
        match fs.read(ino, 0, &mut buf) {
            Ok(n) if buf[..n] == *want => {}
            Ok(n) => self.find(
                "lost-write",
                step.into(),
                format!("a file just written with 8192 bytes reads back {n} bytes that differ"),
            ),
            Err(e) => self.error(step, &e),
        }
    }

    /// After unmount and remount, the file written on the damaged image
    /// reads back exactly, or fails.
    pub fn check_new_file(&mut self, fs: &Fs) {
        set_step("reopen-check");
        match fs.lookup(ROOT_INO, NEW_NAME) {
            Ok(a) => self.check_file(fs, a.ino, &pattern(8192, 77), "reopen-check"),
            Err(Error::NotFound) if self.expect.strict => self.find(
                "lost-write",
                "reopen-check".into(),
                "a file created and written before a clean unmount is gone after the remount".into(),
            ),
            Err(e) => self.error("reopen-check", &e),
        }
    }
}

pub struct Outcome {
    pub findings: Vec<Finding>,
    pub notes: String,
}

/// Damages a copy of `image` and runs every step on it under the watchdog,
/// catching panics.
pub fn run_case(
    label: &str,
    image: Vec<u8>,
    writes: &[(u64, Vec<u8>)],
    poisons: &[(u64, u64)],
    expect: Expectations<'_>,
) -> Outcome {
    let mem = Arc::new(MemRegion::from_bytes(image));
    let mut probe = Probe {
        notes: vec![format!("strict={}", expect.strict)],
        expect,
        findings: Vec::new(),
    };
    for (off, bytes) in writes {
        if let Err(e) = mem.write(*off, bytes) {
            probe.find("bad-case", "harness".into(), format!("write at {off:#x}: {e}"));
        }
    }
    for &(off, len) in poisons {
        if let Err(e) = mem.poison(off, len) {
            probe.find("bad-case", "harness".into(), format!("poison at {off:#x}: {e}"));
        }
    }
    CASE_LARGEST.store(0, Ordering::Relaxed);
    *lock(&CASE_BIG_SITE) = None;
    let limit = mem.len() as usize;
    CASE_ALLOC_LIMIT.store(limit, Ordering::Relaxed);
    lock(&PANICS).clear();
    *lock(&WATCH) = Some((Instant::now() + deadline(), label.to_string()));
    let result = catch_unwind(AssertUnwindSafe(|| probe.steps(&mem)));
    *lock(&WATCH) = None;
    CASE_ALLOC_LIMIT.store(usize::MAX, Ordering::Relaxed);
    let step = current_step();
    let panics = std::mem::take(&mut *lock(&PANICS));
    if let Some((site, msg)) = panics.first() {
        let how = if result.is_err() {
            "panicked"
        } else {
            "panicked in a library thread (the library turned it into an error)"
        };
        probe.find("panic", site.clone(), format!("{how} in step {step}: {msg}"));
    } else if result.is_err() {
        probe.find("panic", "unknown".into(), format!("panicked in step {step}"));
    }
    let big = CASE_LARGEST.load(Ordering::Relaxed);
    if big > limit {
        let site = lock(&CASE_BIG_SITE).take().unwrap_or_else(|| "unknown".into());
        probe.find(
            "huge-allocation",
            site,
            format!("an allocation of {big} bytes on a {IMAGE_SIZE}-byte image"),
        );
    }
    Outcome {
        findings: probe.findings,
        notes: probe.notes.join(" "),
    }
}
