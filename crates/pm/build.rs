//! Decides whether the tests that need memory protection keys run or
//! report themselves ignored (libtest has no runtime skip on stable Rust):
//! `cfg(pm_pkeys)` is set where /proc/cpuinfo lists both `pku` (the CPU
//! has keys) and `ospke` (the kernel enabled them). Such a test checks
//! again when it runs and fails if the keys are not there after all.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rustc-check-cfg=cfg(pm_pkeys)");
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags = cpuinfo.lines().find(|l| l.starts_with("flags")).unwrap_or_default();
    let has = |flag: &str| flags.split_whitespace().any(|f| f == flag);
    if has("pku") && has("ospke") {
        println!("cargo::rustc-cfg=pm_pkeys");
    }
}
