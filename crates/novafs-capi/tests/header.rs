//! include/novafs.h is what cbindgen writes from the crate now: a change to
//! the ABI that forgot the header fails here. `NOVAFS_BLESS=1 cargo test -p
//! novafs-capi --test header` writes it again.

use std::path::Path;

#[test]
fn header_is_current() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen parses the crate")
        .write(&mut generated);
    let path = crate_dir.join("include/novafs.h");
    if std::env::var_os("NOVAFS_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write the header");
        return;
    }
    let checked_in = std::fs::read(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "include/novafs.h is out of date: run `NOVAFS_BLESS=1 cargo test -p novafs-capi --test header`"
    );
}
