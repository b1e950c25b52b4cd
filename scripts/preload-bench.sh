#!/usr/bin/env bash
# Unmodified programs on novafs through the preload shim (`novafs exec`),
# beside the same programs on the novafs FUSE mount, ext4 (data=journal
# and data=ordered) and xfs, the kernel file systems on loop devices over
# /dev/shm; novafs images on /dev/shm. One run, interleaved rounds; the
# median of each, and the shim's ratios. A benchmark, not a test: needs
# root, loop devices, mkfs.ext4, mkfs.xfs, a C compiler, /dev/fuse, fio,
# postmark and sqlite3.
#
# Workloads (each a fresh directory per round):
#   micro    NOVA §5.2: FILES creates, APPENDS x (4 KiB append + fsync)
#            each, unlinks (scripts/appendbench.c); µs per append+fsync
#   fio      4 KiB random writes with fsync after each, psync engine, one
#            thread (fio --thread: no child process); IOPS
#   postmark NUMBER files, TRANSACTIONS transactions (its defaults
#            otherwise); transactions per second, timed from outside
#   sqlite   TXNS TPC-B-like transactions (3 updates and an insert each,
#            rollback journal, synchronous=FULL) by sqlite3; per second
#
# usage: scripts/preload-bench.sh [ROUNDS]   (default 5)
set -euo pipefail

ROUNDS=${1:-5}
FILES=2000 APPENDS=16 FIO_SECS=3 PM_FILES=2000 PM_TXNS=100000 TXNS=2000
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d /dev/shm/novafs-preload-bench.XXXXXX)
NOVAFS=$ROOT/target/release/novafs
export NOVAFS_RUN_DIR=$WORK/run
LOOPS=()

cleanup() {
    set +e
    for d in "$WORK"/mnt/*; do
        if mountpoint -q "$d"; then
            if [ "$(basename "$d")" = fuse ]; then "$NOVAFS" umount "$d"; else umount "$d"; fi
        fi
    done
    for l in "${LOOPS[@]}"; do losetup -d "$l"; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ "$(id -u)" = 0 ] || { echo "run as root (loop devices and kernel mounts)" >&2; exit 1; }
(cd "$ROOT" && cargo build --release -q -p novafs-cli -p novafs-preload)
cc -O2 -o "$WORK/appendbench" "$ROOT/scripts/appendbench.c"

SIZE=2048M
mkdir -p "$WORK/mnt/fuse" "$WORK/mnt/ext4-journal" "$WORK/mnt/ext4-ordered" "$WORK/mnt/xfs"
"$NOVAFS" mkfs --size "$SIZE" "$WORK/shim.img" >/dev/null
"$NOVAFS" mkfs --size "$SIZE" "$WORK/fuse.img" >/dev/null
chmod 600 "$WORK/shim.img"
# The mount builds its page tables before it serves, as the library
# benchmark's file system does; the shim does so for the workloads that
# time themselves (micro, fio: first-touch faults of an emulated image are
# not the file system's cost), and not for those timed from outside as a
# whole (postmark, sqlite: a user's start-up, page faults and all).
"$NOVAFS" mount -o prefault=now "$WORK/fuse.img" "$WORK/mnt/fuse" >/dev/null
for fs in ext4-journal ext4-ordered xfs; do
    truncate -s "$SIZE" "$WORK/$fs.img"
    LOOP=$(losetup -f --show "$WORK/$fs.img")
    LOOPS+=("$LOOP")
    case $fs in
        ext4-*) mkfs.ext4 -q -F "$LOOP"; mount -o "data=${fs#ext4-}" "$LOOP" "$WORK/mnt/$fs" ;;
        xfs) mkfs.xfs -q -f "$LOOP"; mount "$LOOP" "$WORK/mnt/$fs" ;;
    esac
done

# The shim serves $SHIM_AT; every other system is a directory of its own.
SHIM_AT=$WORK/mnt/shim
SYSTEMS=(shim fuse ext4-journal ext4-ordered xfs)
dir_of() { if [ "$1" = shim ]; then echo "$SHIM_AT"; else echo "$WORK/mnt/$1"; fi; }
# Runs a command on system $1: under `novafs exec` for the shim.
on() {
    local s=$1; shift
    if [ "$s" = shim ]; then "$NOVAFS" exec --image "$WORK/shim.img" --at "$SHIM_AT" -- "$@"; else "$@"; fi
}
now_ns() { date +%s%N; }

# The SQLite workload's script: a TPC-B-like bank (pgbench's shape).
{
    echo "PRAGMA synchronous=FULL;"
    echo "CREATE TABLE branches(id INTEGER PRIMARY KEY, bal INTEGER);"
    echo "CREATE TABLE tellers(id INTEGER PRIMARY KEY, branch INTEGER, bal INTEGER);"
    echo "CREATE TABLE accounts(id INTEGER PRIMARY KEY, branch INTEGER, bal INTEGER, filler TEXT);"
    echo "CREATE TABLE history(teller INTEGER, branch INTEGER, account INTEGER, delta INTEGER, at INTEGER);"
    echo "INSERT INTO branches SELECT value, 0 FROM generate_series(1, 10);"
    echo "INSERT INTO tellers SELECT value, value % 10 + 1, 0 FROM generate_series(1, 100);"
    echo "INSERT INTO accounts SELECT value, value % 10 + 1, 0, hex(zeroblob(40)) FROM generate_series(1, 100000);"
    awk -v n="$TXNS" 'BEGIN { srand(42); for (i = 0; i < n; i++) {
        a = int(rand() * 100000) + 1; t = int(rand() * 100) + 1; b = int(rand() * 10) + 1; d = int(rand() * 10000) - 5000
        printf "BEGIN; UPDATE accounts SET bal = bal + %d WHERE id = %d; UPDATE tellers SET bal = bal + %d WHERE id = %d; ", d, a, d, t
        printf "UPDATE branches SET bal = bal + %d WHERE id = %d; INSERT INTO history VALUES (%d, %d, %d, %d, %d); COMMIT;\n", d, b, t, b, a, d, i }
    }'
    echo "SELECT count(*) FROM history;"
} > "$WORK/tpcb.sql"

run_round() {
    local s=$1 r=$2 d out
    d=$(dir_of "$s")/r$r
    on "$s" mkdir -p "$d/micro" "$d/pm"
    NOVAFS_PREFAULT=now on "$s" "$WORK/appendbench" "$d/micro" "$FILES" "$APPENDS" | awk '{print $2}' > "$WORK/micro.$s.$r"
    out=$(NOVAFS_PREFAULT=now on "$s" fio --name=w --thread --filename="$d/fio.dat" --size=64M --bs=4k --rw=randwrite \
        --ioengine=psync --fsync=1 --runtime="$FIO_SECS" --time_based --output-format=json)
    echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["write"]["iops"])' > "$WORK/fio.$s.$r"
    local t0 t1
    t0=$(now_ns)
    printf 'set location %s\nset number %s\nset transactions %s\nrun\nquit\n' "$d/pm" "$PM_FILES" "$PM_TXNS" \
        | on "$s" postmark > /dev/null
    t1=$(now_ns)
    echo "$PM_TXNS $t0 $t1" | awk '{print $1 / (($3 - $2) / 1e9)}' > "$WORK/postmark.$s.$r"
    t0=$(now_ns)
    on "$s" sqlite3 "$d/bank.db" < "$WORK/tpcb.sql" > "$WORK/sqlite-out.$s.$r"
    t1=$(now_ns)
    [ "$(cat "$WORK/sqlite-out.$s.$r")" = "$TXNS" ] || { echo "sqlite on $s: $(cat "$WORK/sqlite-out.$s.$r")" >&2; exit 1; }
    echo "$TXNS $t0 $t1" | awk '{print $1 / (($3 - $2) / 1e9)}' > "$WORK/sqlite.$s.$r"
    on "$s" rm -rf "$d"
    sync
}

# The same microbenchmark through the Rust library itself (`novafs bench`).
library_round() {
    "$NOVAFS" bench --files "$FILES" --appends "$APPENDS" --rounds 1 --image "$WORK/lib.img" \
        | awk -F'|' '/append 4 KiB \+ fsync/ { gsub(/ /, "", $3); print $3 }' > "$WORK/micro.library.$1"
}

echo "novafs through the preload shim beside the library, FUSE, ext4 and xfs: $ROUNDS interleaved rounds"
echo "kernel $(uname -r); $(nproc) CPUs; images and loop devices on /dev/shm"
for r in $(seq 1 "$ROUNDS"); do
    library_round "$r"
    for s in "${SYSTEMS[@]}"; do
        run_round "$s" "$r"
    done
    echo "round $r done"
done

median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
printf '\n%-14s %18s %12s %16s %16s   (medians)\n' system "append+fsync µs" "fio IOPS" "postmark txn/s" "sqlite txn/s"
declare -A M
for s in "${SYSTEMS[@]}"; do
    for w in micro fio postmark sqlite; do
        M[$w.$s]=$(cat "$WORK/$w.$s".* | median)
    done
    printf '%-14s %18.2f %12.0f %16.0f %16.0f\n' "$s" "${M[micro.$s]}" "${M[fio.$s]}" "${M[postmark.$s]}" "${M[sqlite.$s]}"
done
M[micro.library]=$(cat "$WORK/micro.library".* | median)
printf '%-14s %18.2f %12s %16s %16s\n' library "${M[micro.library]}" - - -
echo
awk -v s="${M[micro.shim]}" -v f="${M[micro.fuse]}" -v j="${M[micro.ext4-journal]}" -v l="${M[micro.library]}" 'BEGIN {
    printf "append+fsync: the shim is %.1fx faster than ext4 data=journal (target >= 20x), %.1fx faster than FUSE, and takes %.2fx the library'"'"'s time (target <= 1.5x)\n", j / s, f / s, s / l }'
for w in fio postmark sqlite; do
    best=$(for s in ext4-journal ext4-ordered xfs; do echo "${M[$w.$s]}"; done | sort -g | tail -1)
    awk -v w="$w" -v s="${M[$w.shim]}" -v b="$best" 'BEGIN { printf "%s: the shim is %.1fx the best of ext4 and xfs\n", w, s / b }'
done
