#!/usr/bin/env bash
# Run pjdfstest over novafs: through a mount, and under the preload shim.
#
#   scripts/pjdfstest.sh PJDFSTEST_DIR [TEST_PATHS...]
#
#   scripts/pjdfstest.sh ~/pjdfstest                    # every test (about 5 min each way)
#   scripts/pjdfstest.sh ~/pjdfstest tests/chown tests/rename/09.t
#   NOVAFS=/path/to/novafs scripts/pjdfstest.sh ~/pjdfstest
#
# pjdfstest is NOT part of this project. This script does not contain or
# download it: PJDFSTEST_DIR must be a pjdfstest tree whose `pjdfstest`
# binary is already built. To get and build one (Debian 12, as root):
#
#   apt-get install build-essential autoconf automake perl
#   git clone <the pjd/pjdfstest repository> pjdfstest
#   cd pjdfstest && autoreconf -ifs && ./configure && make pjdfstest
#
# What this script does (as root; pjdfstest changes identities):
#   1. tmpfs: the same tests on a fresh tmpfs, the reference;
#   2. mount: a fresh image mounted with `-o allow_other,dev,suid` (other
#      users must reach it; pjdfstest makes device nodes and set-ID files),
#      then prove from inside the mount;
#   3. shim: `novafs exec --image IMAGE --at PREFIX -- prove ...` from
#      inside PREFIX, on another fresh image. prove owns the image and
#      forks at once, so it hands the image over to a daemon and each test
#      (a shell running the pjdfstest binary, which becomes other users)
#      is a client of that mount (PRELOAD.md "Processes");
# then fscks both images and prints each run's summary. It exits 1 when a
# test passes on tmpfs and fails on novafs, or an image is not clean.
set -euo pipefail

if [ $# -lt 1 ] || [ ! -x "$1/pjdfstest" ]; then
  echo "usage: $0 PJDFSTEST_DIR [TEST_PATHS...]  (PJDFSTEST_DIR/pjdfstest must be built: see this script's header)" >&2
  exit 2
fi
if [ "$(id -u)" != 0 ]; then
  echo "$0: pjdfstest needs root (it becomes other users); run it as root" >&2
  exit 2
fi
PJD=$(cd "$1" && pwd)
shift
TESTS=("$@")
[ ${#TESTS[@]} -gt 0 ] || TESTS=(tests)
for i in "${!TESTS[@]}"; do TESTS[$i]="$PJD/${TESTS[$i]}"; done

REPO=$(cd "$(dirname "$0")/.." && pwd)
NOVAFS=${NOVAFS:-$REPO/target/release/novafs}
[ -x "$NOVAFS" ] || { echo "$0: no novafs binary at $NOVAFS (cargo build --release)" >&2; exit 2; }
WORK=$(mktemp -d /dev/shm/novafs-pjdfstest.XXXXXX)
chmod 755 "$WORK"
# The logs of the three runs stay here.
OUT=${OUT:-$REPO/target/pjdfstest}
mkdir -p "$OUT"
cleanup() {
  cd /
  mountpoint -q "$WORK/tmpfs" && umount "$WORK/tmpfs"
  mountpoint -q "$WORK/mnt" && "$NOVAFS" umount "$WORK/mnt"
  rm -rf "$WORK"
}
trap cleanup EXIT

# One prove run from DIR into LOG: prints its "Files=" and "Result:" lines.
run_prove() {
  local dir=$1 log=$2
  shift 2
  (cd "$dir" && "$@" prove -r "${TESTS[@]}" >"$log" 2>&1) || true
  grep -E '^(Files=|Result:)' "$log" | tr '\n' ' '
  echo
}

# The test files that failed in LOG, one per line.
failed_files() {
  grep -E '^/.*\(Wstat: ' "$1" | awk '{print $1}' | sed "s|^$PJD/||" | sort
}

mkdir -p "$WORK/tmpfs" "$WORK/mnt" "$WORK/at" "$WORK/run"
mount -t tmpfs -o mode=755 none "$WORK/tmpfs"
echo "tmpfs: $(run_prove "$WORK/tmpfs" "$OUT/tmpfs.log")"
umount "$WORK/tmpfs"

"$NOVAFS" mkfs --size 512M --force "$WORK/mount.img" >/dev/null
"$NOVAFS" mount -o allow_other,dev,suid "$WORK/mount.img" "$WORK/mnt" >/dev/null
echo "mount: $(run_prove "$WORK/mnt" "$OUT/mount.log")"
"$NOVAFS" umount "$WORK/mnt"

"$NOVAFS" mkfs --size 512M --force "$WORK/shim.img" >/dev/null
chmod 600 "$WORK/shim.img"
# The prefix is an empty kernel directory: prove's working directory.
echo "shim:  $(NOVAFS_RUN_DIR="$WORK/run" run_prove "$WORK/at" "$OUT/shim.log" \
  "$NOVAFS" exec --image "$WORK/shim.img" --at "$WORK/at" --)"

status=0
for run in mount shim; do
  fsck=$("$NOVAFS" fsck "$WORK/$run.img" 2>&1) || { echo "$run: fsck: $fsck"; status=1; }
  worse=$(comm -13 <(failed_files "$OUT/tmpfs.log") <(failed_files "$OUT/$run.log"))
  if [ -n "$worse" ]; then
    echo "$run: failed where tmpfs passed (details in $OUT/$run.log):"
    echo "$worse" | sed 's/^/  /'
    status=1
  fi
done
[ -z "$(ls -A "$WORK/at")" ] || { echo "shim: the run wrote to the kernel's $WORK/at"; status=1; }
echo "logs: $OUT/{tmpfs,mount,shim}.log"
exit $status
