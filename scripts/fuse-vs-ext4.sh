#!/usr/bin/env bash
# NOVA §5.2's microbenchmark through the novafs FUSE mount, beside ext4
# (data=journal and data=ordered) on loop devices backed by files in
# /dev/shm, in one run with interleaved rounds: create FILES files, then
# per file open, APPENDS x (write 4 KiB + fsync), close; then unlink them.
# Reports the median microseconds per operation of each phase and the
# append+fsync ratios. A benchmark, not a test: needs root, loop devices,
# mkfs.ext4, a C compiler and /dev/fuse.
#
# usage: scripts/fuse-vs-ext4.sh [FILES [APPENDS [ROUNDS]]]   (default 4000 16 5)
set -euo pipefail

FILES=${1:-4000}
APPENDS=${2:-16}
ROUNDS=${3:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d /dev/shm/novafs-fuse-vs-ext4.XXXXXX)
NOVAFS=$ROOT/target/release/novafs
export NOVAFS_RUN_DIR=$WORK/run  # the daemon's state and log go with the scratch files
LOOPS=()

cleanup() {
    set +e
    for d in "$WORK"/mnt/*; do
        if mountpoint -q "$d"; then
            if [ "$(basename "$d")" = novafs ]; then "$NOVAFS" umount "$d"; else umount "$d"; fi
        fi
    done
    for l in "${LOOPS[@]}"; do losetup -d "$l"; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ "$(id -u)" = 0 ] || { echo "run as root (loop devices and ext4 mounts)" >&2; exit 1; }
(cd "$ROOT" && cargo build --release -q -p novafs-cli)

cc -O2 -o "$WORK/appendbench" "$ROOT/scripts/appendbench.c"

# Sized for one round's data (FILES x APPENDS x 4 KiB) with room to spare.
DATA_MIB=$(( FILES * APPENDS * 4 / 1024 ))
SIZE_MIB=$(( DATA_MIB * 2 + 512 ))
mkdir -p "$WORK/mnt/novafs" "$WORK/mnt/ext4-journal" "$WORK/mnt/ext4-ordered"

"$NOVAFS" mkfs --size "${SIZE_MIB}M" "$WORK/novafs.img" >/dev/null
"$NOVAFS" mount "$WORK/novafs.img" "$WORK/mnt/novafs" >/dev/null
for mode in journal ordered; do
    truncate -s "${SIZE_MIB}M" "$WORK/ext4-$mode.img"
    mkfs.ext4 -q -F "$WORK/ext4-$mode.img"
    LOOP=$(losetup -f --show "$WORK/ext4-$mode.img")
    LOOPS+=("$LOOP")
    mount -o "data=$mode" "$LOOP" "$WORK/mnt/ext4-$mode"
done

SYSTEMS=(novafs ext4-journal ext4-ordered)
echo "NOVA §5.2 microbenchmark: $FILES files x $APPENDS appends of 4 KiB with fsync, $ROUNDS interleaved rounds"
echo "kernel $(uname -r); $(nproc) CPUs; novafs over FUSE (image on /dev/shm), ext4 on loop devices over /dev/shm"
for r in $(seq 1 "$ROUNDS"); do
    for s in "${SYSTEMS[@]}"; do
        d="$WORK/mnt/$s/round$r"
        mkdir "$d"
        "$WORK/appendbench" "$d" "$FILES" "$APPENDS" > "$WORK/result.$s.$r"
        rmdir "$d"
        sync
    done
done

median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
printf '\n%-14s %12s %16s %12s   (median us per operation)\n' system create append+fsync unlink
declare -A APPEND
for s in "${SYSTEMS[@]}"; do
    c=$(cat "$WORK/result.$s".* | awk '{print $1}' | median)
    a=$(cat "$WORK/result.$s".* | awk '{print $2}' | median)
    u=$(cat "$WORK/result.$s".* | awk '{print $3}' | median)
    APPEND[$s]=$a
    printf '%-14s %12.2f %16.2f %12.2f\n' "$s" "$c" "$a" "$u"
done
echo
awk -v n="${APPEND[novafs]}" -v j="${APPEND[ext4-journal]}" -v o="${APPEND[ext4-ordered]}" 'BEGIN {
    printf "append+fsync: novafs is %.1fx faster than ext4 data=journal (target >= 4x) and %.1fx faster than ext4 data=ordered (target >= 2x)\n", j / n, o / n
}'
