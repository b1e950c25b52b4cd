#!/usr/bin/env bash
# Run xfstests (fstests) over novafs mounted through FUSE.
#
#   scripts/xfstests.sh XFSTESTS_DIR [CHECK_ARGS...]
#
#   scripts/xfstests.sh ~/xfstests                      # ./check -g quick (about 20 min)
#   scripts/xfstests.sh ~/xfstests generic/001 generic/079
#   NOVAFS=/path/to/novafs scripts/xfstests.sh ~/xfstests -g auto
#
# xfstests is NOT part of this project. This script does not contain or
# download it: XFSTESTS_DIR must be an xfstests tree that is already built.
# To get and build one (Debian 12, as root):
#
#   apt-get install build-essential autoconf automake libtool libtool-bin \
#     gettext uuid-dev libattr1-dev libacl1-dev libaio-dev liburing-dev \
#     libgdbm-dev libcap-dev libinih-dev liburcu-dev pkg-config xfsprogs \
#     xfslibs-dev e2fsprogs attr acl quota bc dbench fio gawk psmisc \
#     uuid-runtime python3 sqlite3 util-linux fuse3
#   git clone <the upstream xfstests-dev repository, or its GitHub mirror
#     kdave/xfstests> xfstests
#   cd xfstests && make -j"$(nproc)"
#
# (Tested with xfstests commit 63a29724, Debian 12's xfsprogs 6.1.0.)
#
# What this script does (as root):
#   - runs itself in a private mount namespace (unshare -m) whose /sbin is an
#     overlay, so that the helper symlinks below are seen by this run only:
#     the project's own tests (fuse_lifecycle) re-point the global
#     /sbin/mount.*novafs helpers to their binary, which would otherwise change
#     the binary under a running xfstests. The mounts are therefore not
#     visible from other shells (use nsenter). XFSTESTS_GLOBAL_HELPERS=1 skips
#     the namespace and changes the global helpers instead, putting back their
#     previous targets at the end;
#   - copies the novafs binary (NOVAFS, default target/release/novafs of this
#     repository) into a new work directory, so that a rebuild during the run
#     does not change it, and points mount(8)'s helpers /sbin/mount.novafs and
#     /sbin/mount.fuse.novafs at that copy;
#   - makes two fresh images in /dev/shm (IMAGE_SIZE, default 2G) and the
#     mount points TEST_DIR and SCRATCH_MNT;
#   - creates xfstests' users and group (fsgqa, 123456-fsgqa, fsgqa2) if
#     missing;
#   - writes, in the work directory, the xfstests configuration and a df
#     wrapper (DF_PROG): novafs mounts have the type "fuse.novafs", which
#     xfstests' _fs_type does not map to FSTYP=fuse;
#   - runs ./check with the remaining arguments (default: -g quick), then
#     unmounts, runs `novafs fsck` on both images (xfstests has no fsck for
#     FSTYP=fuse) and prints where the results are.
#
# Notes:
#   - FSTYP=fuse cannot mkfs: xfstests empties the scratch file system instead,
#     and tests needing _scratch_mkfs_sized or a block device are "not run".
#   - mount(8) treats dev and suid as defaults and does not hand them to the
#     helper; for root, the helper then gives a dev,suid mount, as for kernel
#     file systems (`novafs mount` itself defaults to nodev,nosuid). The mount
#     line printed before the run shows the flags.
#   - xfstests has no per-test timeout: a hung test hangs the run.
#
# Environment (all optional): NOVAFS, IMAGE_SIZE, TEST_IMG, SCRATCH_IMG,
# TEST_DIR, SCRATCH_MNT, WORK_DIR (default: a new /tmp/novafs-xfstests.XXXXXX),
# KEEP_IMAGES=1 (keep the images in /dev/shm afterwards),
# NOVAFS_MOUNT_OPTIONS (more -o options for every mount, e.g.
# writeback_cache),
# XFSTESTS_GLOBAL_HELPERS=1 (no private mount namespace; see above).
set -euo pipefail

usage() {
  sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

die() {
  echo "xfstests.sh: $*" >&2
  exit 1
}

[ $# -ge 1 ] || usage
case "$1" in -h | --help) usage ;; esac
[ "$(id -u)" = 0 ] || die "run as root (xfstests mounts and creates users)"

# Private mount namespace (see the header): re-run this script inside one.
if [ "${XFSTESTS_GLOBAL_HELPERS:-0}" != 1 ] && [ -z "${NOVAFS_XFSTESTS_IN_NS:-}" ]; then
  command -v unshare >/dev/null ||
    die "unshare (util-linux) is missing; or set XFSTESTS_GLOBAL_HELPERS=1"
  export NOVAFS_XFSTESTS_IN_NS=1
  exec unshare --mount --propagation private "$BASH" "$0" "$@"
fi

XFSTESTS_DIR=$(cd "$1" && pwd)
shift
[ $# -gt 0 ] || set -- -g quick

REPO=$(cd "$(dirname "$0")/.." && pwd)
NOVAFS=${NOVAFS:-$REPO/target/release/novafs}
IMAGE_SIZE=${IMAGE_SIZE:-2G}
TEST_IMG=${TEST_IMG:-/dev/shm/novafs-xfstests-test.img}
SCRATCH_IMG=${SCRATCH_IMG:-/dev/shm/novafs-xfstests-scratch.img}
TEST_DIR=${TEST_DIR:-/mnt/novafs-xfstests/test}
SCRATCH_MNT=${SCRATCH_MNT:-/mnt/novafs-xfstests/scratch}
HELPERS=(/sbin/mount.novafs /sbin/mount.fuse.novafs)

[ -x "$XFSTESTS_DIR/check" ] || die "$XFSTESTS_DIR has no ./check: not an xfstests tree"
[ -x "$XFSTESTS_DIR/ltp/fsstress" ] || die "$XFSTESTS_DIR is not built (no ltp/fsstress): run make there"
[ -x "$NOVAFS" ] || die "no novafs binary at $NOVAFS (cargo build --release, or set NOVAFS)"
[ -e /dev/fuse ] || die "/dev/fuse is missing"
for m in "$TEST_DIR" "$SCRATCH_MNT"; do
  if mountpoint -q "$m" 2>/dev/null; then
    die "$m is already a mount point; unmount it first"
  fi
done

if [ -n "${WORK_DIR:-}" ]; then
  mkdir -p "$WORK_DIR"
  WORK=$(cd "$WORK_DIR" && pwd)
else
  WORK=$(mktemp -d /tmp/novafs-xfstests.XXXXXX)
fi
RESULTS=$WORK/results
mkdir -p "$RESULTS"
START_UTC=$(date -u +%Y-%m-%dT%H:%M:%S)

# The binary the helpers run: a private copy.
cp "$NOVAFS" "$WORK/novafs"
NOVAFS=$WORK/novafs

declare -A OLD_HELPER=()
if [ -n "${NOVAFS_XFSTESTS_IN_NS:-}" ]; then
  # This namespace's own /sbin: an overlay whose changes stay in $WORK.
  SBIN=$(readlink -f /sbin)
  mkdir -p "$WORK/sbin/upper" "$WORK/sbin/work"
  mount -t overlay overlay \
    -o "lowerdir=$SBIN,upperdir=$WORK/sbin/upper,workdir=$WORK/sbin/work" "$SBIN" ||
    die "cannot overlay $SBIN in a private mount namespace; set XFSTESTS_GLOBAL_HELPERS=1"
else
  # The global helpers: their previous targets are put back on exit.
  for h in "${HELPERS[@]}"; do
    if [ -L "$h" ]; then
      OLD_HELPER[$h]=$(readlink "$h")
    elif [ -e "$h" ]; then
      die "$h exists and is not a symlink; move it away first"
    fi
  done
fi

cleanup() {
  local m h
  for m in "$TEST_DIR" "$SCRATCH_MNT"; do
    if mountpoint -q "$m" 2>/dev/null; then
      "$NOVAFS" umount "$m" || umount "$m" || true
    fi
  done
  [ -z "${NOVAFS_XFSTESTS_IN_NS:-}" ] || return 0
  for h in "${HELPERS[@]}"; do
    if [ "$(readlink "$h" 2>/dev/null)" != "$NOVAFS" ]; then
      echo "xfstests.sh: WARNING: $h was changed during the run (to $(readlink "$h")):" \
        "some mounts may not have used $NOVAFS" >&2
    fi
    if [ -n "${OLD_HELPER[$h]:-}" ]; then
      ln -sfn "${OLD_HELPER[$h]}" "$h"
    else
      rm -f "$h"
    fi
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for h in "${HELPERS[@]}"; do
  ln -sfn "$NOVAFS" "$h"
done

# Users and group that xfstests' README asks for.
getent group fsgqa >/dev/null || groupadd fsgqa
id -u fsgqa >/dev/null 2>&1 || useradd -m -g fsgqa fsgqa
id -u 123456-fsgqa >/dev/null 2>&1 || useradd -m -g fsgqa 123456-fsgqa
id -u fsgqa2 >/dev/null 2>&1 || useradd -m fsgqa2

# Fresh images and mount points.
"$NOVAFS" mkfs --force --size "$IMAGE_SIZE" "$TEST_IMG" >/dev/null
"$NOVAFS" mkfs --force --size "$IMAGE_SIZE" "$SCRATCH_IMG" >/dev/null
mkdir -p "$TEST_DIR" "$SCRATCH_MNT"

# df wrapper: report "fuse.novafs" as "fuse" (xfstests' _fs_type only maps
# fuse.glusterfs and fuse.ceph-fuse).
cat >"$WORK/df-fuse" <<'EOF'
#!/bin/bash
set -o pipefail
df -T -P "$@" | sed -e 's/ fuse\.novafs / fuse /'
EOF
chmod +x "$WORK/df-fuse"

cat >"$WORK/local.config" <<EOF
export FSTYP=fuse
export FUSE_SUBTYP=.novafs
export TEST_DEV=$TEST_IMG
export TEST_DIR=$TEST_DIR
export SCRATCH_DEV=$SCRATCH_IMG
export SCRATCH_MNT=$SCRATCH_MNT
export MOUNT_OPTIONS="-o allow_other,dev,suid${NOVAFS_MOUNT_OPTIONS:+,$NOVAFS_MOUNT_OPTIONS}"
export TEST_FS_MOUNT_OPTS="-o allow_other,dev,suid${NOVAFS_MOUNT_OPTIONS:+,$NOVAFS_MOUNT_OPTIONS}"
export DF_PROG=$WORK/df-fuse
export RESULT_BASE=$RESULTS
EOF

# Show what a mount through mount(8) gives, then leave it unmounted.
mount -t fuse.novafs -o allow_other,dev,suid "$TEST_IMG" "$TEST_DIR"
echo "novafs: $(grep " $TEST_DIR " /proc/self/mountinfo)"
"$NOVAFS" umount "$TEST_DIR"

echo "xfstests: $XFSTESTS_DIR, novafs: $("$NOVAFS" --version) ($NOVAFS), work dir: $WORK"
rc=0
(cd "$XFSTESTS_DIR" && HOST_OPTIONS=$WORK/local.config ./check "$@") 2>&1 |
  tee "$WORK/check.log" || rc=$?

cleanup
trap - EXIT
fsck_rc=0
for img in "$TEST_IMG" "$SCRATCH_IMG"; do
  # umount(8) returns before the daemon lets the image go: wait for its lock.
  flock -w 60 "$img" true || true
  "$NOVAFS" fsck "$img" || fsck_rc=1
done
if [ "${KEEP_IMAGES:-0}" != 1 ] && [ "$fsck_rc" = 0 ]; then
  rm -f "$TEST_IMG" "$SCRATCH_IMG"
fi

# Daemon logs of this run's mounts (named after the mount point) with lines
# above INFO written since the start. generic/732's "in use" ERROR is expected.
noisy=""
for m in "$TEST_DIR" "$SCRATCH_MNT"; do
  m=${m#/}
  for f in "${NOVAFS_RUN_DIR:-/run/novafs}/${m//\//_}"*.log; do
    [ -f "$f" ] || continue
    n=$(awk -v s="$START_UTC" '$1 >= s && / (ERROR|WARN) |panicked/' "$f" | wc -l)
    [ "$n" = 0 ] || noisy+="$f: $n line(s)"$'\n'
  done
done

echo
echo "check log:   $WORK/check.log"
echo "results:     $RESULTS (failed tests: $RESULTS/*/*.out.bad, *.full)"
echo "config:      $WORK/local.config"
if [ -n "$noisy" ]; then
  echo "daemon logs with errors or warnings:"
  while read -r f; do [ -z "$f" ] || echo "  $f"; done <<<"$noisy"
fi
[ "$fsck_rc" = 0 ] || echo "novafs fsck found problems; images kept: $TEST_IMG $SCRATCH_IMG"
if [ "$rc" = 0 ] && [ "$fsck_rc" != 0 ]; then
  rc=1
fi
exit "$rc"
