//! Every operation type, alone or in short runs, is atomic at every crash
//! point: after recovery the tree shows it fully or not at all, and fsck
//! is clean (DESIGN.md §1 strict mode, §4 crash tests).
#![allow(clippy::unwrap_used)]

mod common;

use common::assert_atomic;

#[test]
fn create_is_atomic_at_every_crash_point() {
    assert_atomic("create");
}

#[test]
fn mkdir_is_atomic_at_every_crash_point() {
    assert_atomic("mkdir");
}

#[test]
fn mknod_of_every_file_type_is_atomic_at_every_crash_point() {
    assert_atomic("mknod");
}

#[test]
fn symlink_short_long_and_maximal_is_atomic_at_every_crash_point() {
    assert_atomic("symlink");
}

#[test]
fn small_write_is_atomic_at_every_crash_point() {
    assert_atomic("write_small");
}

#[test]
fn large_write_is_atomic_at_every_crash_point() {
    assert_atomic("write_large");
}

#[test]
fn unaligned_write_across_pages_is_atomic_at_every_crash_point() {
    assert_atomic("write_unaligned");
}

#[test]
fn overwrite_is_atomic_at_every_crash_point() {
    assert_atomic("overwrite");
}

#[test]
fn append_is_atomic_at_every_crash_point() {
    assert_atomic("append");
}

#[test]
fn truncate_down_is_atomic_at_every_crash_point() {
    assert_atomic("truncate_down");
}

#[test]
fn truncate_up_is_atomic_at_every_crash_point() {
    assert_atomic("truncate_up");
}

#[test]
fn fallocate_is_atomic_at_every_crash_point() {
    assert_atomic("fallocate");
}

#[test]
fn punch_hole_is_atomic_at_every_crash_point() {
    assert_atomic("punch_hole");
}

#[test]
fn unlink_of_a_linked_and_of_a_last_name_is_atomic_at_every_crash_point() {
    assert_atomic("unlink");
}

#[test]
fn unlink_of_an_open_file_then_release_is_atomic_at_every_crash_point() {
    assert_atomic("unlink_open_file");
}

#[test]
fn relinking_an_unlinked_open_file_is_atomic_at_every_crash_point() {
    assert_atomic("relink_open_file");
}

#[test]
fn rmdir_is_atomic_at_every_crash_point() {
    assert_atomic("rmdir");
}

#[test]
fn rename_within_a_directory_is_atomic_at_every_crash_point() {
    assert_atomic("rename_in_dir");
}

#[test]
fn rename_across_dirs_is_atomic_at_every_crash_point() {
    assert_atomic("rename_across_dirs");
}

#[test]
fn rename_over_an_existing_file_is_atomic_at_every_crash_point() {
    assert_atomic("rename_over_file");
}

#[test]
fn rename_over_a_file_with_other_links_is_atomic_at_every_crash_point() {
    assert_atomic("rename_over_linked_file");
}

#[test]
fn rename_of_a_directory_across_dirs_is_atomic_at_every_crash_point() {
    assert_atomic("rename_dir_across_dirs");
}

#[test]
fn rename_of_a_directory_over_an_empty_directory_is_atomic_at_every_crash_point() {
    assert_atomic("rename_dir_over_empty_dir");
}

#[test]
fn rename_exchange_is_atomic_at_every_crash_point() {
    assert_atomic("rename_exchange");
}

#[test]
fn rename_exchange_of_directories_across_dirs_is_atomic_at_every_crash_point() {
    assert_atomic("rename_exchange_dirs");
}

#[test]
fn rename_noreplace_is_atomic_at_every_crash_point() {
    assert_atomic("rename_noreplace");
}

#[test]
fn link_is_atomic_at_every_crash_point() {
    assert_atomic("link");
}

#[test]
fn setattr_is_atomic_at_every_crash_point() {
    assert_atomic("setattr");
}

#[test]
fn xattr_set_replace_and_remove_inline_and_in_pages_is_atomic_at_every_crash_point() {
    assert_atomic("xattr");
}

#[test]
fn acl_set_chmod_and_inheritance_is_atomic_at_every_crash_point() {
    assert_atomic("acl");
}

#[test]
fn snapshot_take_and_delete_are_atomic_at_every_crash_point() {
    assert_atomic("snapshot");
}

#[test]
fn what_snapshots_keep_survives_every_crash_point() {
    assert_atomic("snapshot_keep");
}

#[test]
fn rename_whiteout_is_atomic_at_every_crash_point() {
    assert_atomic("rename_whiteout");
}

#[test]
fn zero_range_is_atomic_at_every_crash_point() {
    assert_atomic("zero_range");
}

#[test]
fn rmdir_of_a_directory_still_held_is_atomic_at_every_crash_point() {
    assert_atomic("rmdir_open_dir");
}
