#!/usr/bin/env bash
# Stress novafs through the mount: the long forms of the full-image test and
# of the soak (crates/novafs-cli/tests/fuse_full.rs and
# crates/novafs/tests/full_image.rs are the short forms `cargo test` runs).
#
#   scripts/stress.sh full [SECONDS] [SEED...]   # default 60 s, 3 seeds
#   scripts/stress.sh soak [SECONDS] [SEED]      # default 1800 s
#
# full: a 256 MiB image; fsstress (-p 4 -l 0 -S c) fills it while a snapshot
#   is taken every 0.3 s and the oldest beyond four deleted. Then the daemon
#   is killed (SIGKILL), every snapshot is deleted offline, the image is
#   mounted again, `rm -rf` empties it, `novafs umount` and `fsck --repair`
#   must succeed, the used pages must come back to the empty image's figure
#   plus the root directory's log, and fsck must find nothing leaked.
# soak: a 4 GiB image that never fills; fsstress -p 16, a snapshot every
#   0.2 s (four kept), `novafs scrub` and a reader walking the tree in loops;
#   fsstress cleans its tree after every 5,000 operations per process (-c), so
#   the image stays about a third full.
#
# Every novafs call is bounded by `timeout`; a call that times out is a hang:
# the script prints the daemon's threads (gdb, where installed) and fails.
#
# Needs root, /dev/fuse, and fsstress: FSSTRESS=/path/to/xfstests/ltp/fsstress
# (xfstests is not part of this project: see scripts/xfstests.sh for how to
# build it). Uses target/release/novafs (NOVAFS overrides); KEEP=1 keeps the
# work directory (image, daemon log) for a look after a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

NOVAFS=${NOVAFS:-$PWD/target/release/novafs}
FSSTRESS=${FSSTRESS:-}
mode=${1:-full}
secs=${2:-}
shift $(( $# > 2 ? 2 : $# )) || true

[ -x "$NOVAFS" ] || { echo "stress: $NOVAFS missing: run cargo build --release" >&2; exit 2; }
[ -n "$FSSTRESS" ] && [ -x "$FSSTRESS" ] || { echo "stress: set FSSTRESS to an xfstests ltp/fsstress binary" >&2; exit 2; }
[ -e /dev/fuse ] || { echo "stress: /dev/fuse absent" >&2; exit 2; }

work=$(mktemp -d /dev/shm/novafs-stress.XXXXXX)
img=$work/image
mnt=$work/mnt
mkdir -p "$mnt"
export NOVAFS_RUN_DIR=$work/run
LIMIT=120   # seconds: a call that takes longer is a hang

cleanup() {
  "$NOVAFS" umount "$mnt" >/dev/null 2>&1 || umount -l "$mnt" 2>/dev/null || true
  pkill -f "fsstress -d $mnt" 2>/dev/null || true
  if [ -n "${KEEP:-}" ]; then echo "stress: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

daemon_pid() { pgrep -f "novafs.*mount.*$img" | head -n1; }

hang() {
  echo "stress: HANG: $*" >&2
  touch "$work/hung" # seen by the main shell when a background loop hangs
  local pid; pid=$(daemon_pid || true)
  if [ -n "$pid" ] && command -v gdb >/dev/null; then
    gdb -p "$pid" -batch -ex 'thread apply all bt' 2>/dev/null | grep -E '^Thread|novafs::' | head -80 >&2
  fi
  exit 1
}

nv() { timeout "$LIMIT" "$NOVAFS" "$@" || { rc=$?; [ $rc -eq 124 ] && hang "novafs $*"; return $rc; }; }

snapshot_loop() { # PERIOD: take one every PERIOD s, keep four
  local i=0
  while :; do
    i=$((i + 1))
    nv snapshot create "$mnt" "s$i" >/dev/null 2>&1 || true
    if [ $i -gt 4 ]; then nv snapshot delete "$mnt" "s$((i - 4))" >/dev/null 2>&1 || true; fi
    sleep "$1"
  done
}

# Stops background loops and everything they started (a scrub, a find).
stop_tree() {
  local p
  for p in "$@"; do
    # shellcheck disable=SC2046
    stop_tree $(pgrep -P "$p" || true)
    kill "$p" 2>/dev/null || true
  done
}

pages_used() { "$NOVAFS" info "$img" | awk '/^usage:/ {print $2}'; }

full_once() { # SEED
  local seed=$1
  echo "stress: full image, seed $seed, ${secs:-60} s"
  nv mkfs --force --size 256M "$img" >/dev/null
  local empty; empty=$(pages_used)
  nv mount "$img" "$mnt" >/dev/null
  mkdir "$mnt/d"
  timeout "${secs:-60}" "$FSSTRESS" -d "$mnt/d" -p 4 -n 1000000 -l 0 -S c -s "$seed" >/dev/null 2>&1 &
  local load=$!
  snapshot_loop 0.3 &
  local snaps=$!
  wait $load || true
  stop_tree $snaps; wait $snaps 2>/dev/null || true
  df -k "$mnt" | tail -n1
  # SIGKILL on the full image, then everything offline.
  kill -9 "$(daemon_pid)"
  sleep 1
  "$NOVAFS" umount "$mnt" >/dev/null 2>&1 || umount -l "$mnt" 2>/dev/null || true
  for s in $("$NOVAFS" snapshot list "$img" | awk 'NR > 1 {print $1}'); do
    nv snapshot delete "$img" "$s" >/dev/null
  done
  nv mount "$img" "$mnt" >/dev/null
  timeout "$LIMIT" rm -rf "$mnt/d" || hang "rm -rf"
  nv umount "$mnt"
  nv fsck --repair "$img" >/dev/null
  local report; report=$(nv fsck "$img")
  echo "$report" | tail -n1
  if echo "$report" | grep -q leaked; then echo "stress: pages leaked" >&2; exit 1; fi
  local used; used=$(pages_used)
  # The root directory's log may have grown by a page and its mirror, and
  # the snapshot list keeps one page and its mirror from the first snapshot.
  if [ "$used" -gt $((empty + 4)) ]; then
    echo "stress: $used pages used after emptying, $empty when new" >&2
    exit 1
  fi
}

soak() { # SEED
  local seed=$1
  echo "stress: soak, seed $seed, ${secs:-1800} s"
  nv mkfs --force --size 4G "$img" >/dev/null
  nv mount "$img" "$mnt" >/dev/null
  mkdir "$mnt/d"
  timeout "${secs:-1800}" "$FSSTRESS" -d "$mnt/d" -p 16 -n 5000 -l 0 -c -S c -s "$seed" >/dev/null 2>&1 &
  local load=$!
  snapshot_loop 0.2 &
  local snaps=$!
  ( while :; do nv scrub "$mnt" >/dev/null || true; done ) &
  local scrubber=$!
  ( while :; do timeout "$LIMIT" find "$mnt" -type f -exec cat {} + >/dev/null 2>&1 || true; done ) &
  local reader=$!
  wait $load || true
  stop_tree $snaps $scrubber $reader; wait 2>/dev/null || true
  nv umount "$mnt"
  nv fsck "$img" | grep -v ": note: " || true
  nv fsck "$img" >/dev/null || { echo "stress: fsck found problems" >&2; exit 1; }
}

check_hung() { [ ! -e "$work/hung" ] || { echo "stress: a call hung (above)" >&2; exit 1; }; }

case $mode in
  full)
    seeds=("$@")
    [ ${#seeds[@]} -gt 0 ] || seeds=($RANDOM $RANDOM $RANDOM)
    for s in "${seeds[@]}"; do full_once "$s"; check_hung; done ;;
  soak) soak "${1:-$RANDOM}"; check_hung ;;
  *) echo "usage: scripts/stress.sh full|soak [SECONDS] [SEED...]" >&2; exit 2 ;;
esac
echo "stress: $mode passed"
