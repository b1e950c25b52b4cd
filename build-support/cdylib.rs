// The C libraries a test loads, built for it: cargo builds a crate's
// cdylib for `cargo build`, not for the crate's tests. Shared by the tests
// of novafs-capi, novafs-preload and novafs-cli (each `include!`s this
// file).

/// Builds `package`'s library with the profile this test was built with
/// (`cargo test --release` too, so that the library is this code's) and
/// returns the profile directory it is in, the one above the test's
/// executable.
fn cdylib_dir(package: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let out = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("target/<profile>")
        .to_path_buf();
    // `test` builds into target/debug.
    let profile = if out.ends_with("release") { "release" } else { "test" };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = std::process::Command::new(cargo)
        .args(["build", "--quiet", "--profile", profile, "-p", package, "--lib"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("run cargo build");
    assert!(status.success(), "cargo build -p {package} failed");
    out
}
