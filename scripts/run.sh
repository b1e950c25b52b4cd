#!/usr/bin/env bash
# The main job on a fresh Debian machine (as root): install what novafs
# needs, build it, create an emulated 1 GiB persistent-memory region on
# /dev/shm, mount it with FUSE at /mnt/novafs, and show it working.
# Unmount afterwards with: target/release/novafs umount /mnt/novafs
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${NOVAFS_IMAGE:-/dev/shm/novafs.img}
MNT=${NOVAFS_MNT:-/mnt/novafs}

# Rust first: without it nothing below can work.
. scripts/need-rust.sh
need_rust

if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # gcc links the build (rustc calls cc); fuse3 for the mount; the rest are
  # what README's test command runs on the mount and under novafs exec (the same list as .ci/run;
  # tests/setup_installs.rs checks both).
  apt-get install -y -qq gcc fuse3 sqlite3 rsync git tar diffutils util-linux mount acl attr fio postmark python3 >/dev/null
fi
cargo build --release
NOVAFS=target/release/novafs
# mount(8)'s helpers, so that /etc/fstab lines of type novafs (or
# fuse.novafs), `mount -t fuse.novafs IMAGE DIR` and `mount -o remount,ro
# DIR` work.
if [ "$(id -u)" = 0 ]; then
  for helper in /sbin/mount.novafs /sbin/mount.fuse.novafs; do
    ln -sf "$(pwd)/$NOVAFS" "$helper"
  done
fi

# libnovafs for C programs (PRELOAD.md): the library and its header where
# a compiler and the dynamic linker look, `cc prog.c -lnovafs`; and the
# preload shim, which `novafs exec` finds beside the novafs executable.
cargo build --release -p novafs-capi -p novafs-preload
if [ "$(id -u)" = 0 ]; then
  install -m 0644 target/release/libnovafs.so target/release/libnovafs.a target/release/libnovafs_preload.so /usr/local/lib/
  install -m 0644 crates/novafs-capi/include/novafs.h /usr/local/include/
  ldconfig
  echo "libnovafs installed: /usr/local/lib/libnovafs.{so,a}, /usr/local/lib/libnovafs_preload.so, /usr/local/include/novafs.h"
fi

if mountpoint -q "$MNT" 2>/dev/null; then
  "$NOVAFS" umount "$MNT"
fi
"$NOVAFS" mkfs --size 1G --force "$IMAGE"
mkdir -p "$MNT"
"$NOVAFS" mount "$IMAGE" "$MNT"

echo
echo "== a short session on $MNT =="
set -x
mkdir -p "$MNT/docs"
echo "hello from novafs" > "$MNT/docs/hello.txt"
cp -a crates/novafs/src "$MNT/docs/novafs-src"
ln -s docs/hello.txt "$MNT/link"
cat "$MNT/link"
dd if=/dev/urandom of="$MNT/blob" bs=1M count=16 status=none
sha256sum "$MNT/blob"
mv "$MNT/docs/novafs-src" "$MNT/src"
ls -la "$MNT" "$MNT/docs"
diff -r crates/novafs/src "$MNT/src" && echo "copy identical"
df -h "$MNT"
set +x
"$NOVAFS" info "$IMAGE"
echo
echo "novafs is mounted at $MNT (image $IMAGE)."
echo "Unmount cleanly with: $NOVAFS umount $MNT"
