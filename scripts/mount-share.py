#!/usr/bin/env python3
"""How much of an operation through the novafs mount is novafs's own work:
NOVA Fig. 6c's question ("VFS accounts for 49% of create") asked of FUSE.

Formats a scratch image in /dev/shm, mounts it with `-o stats,prefault=now`
(every request timed; page tables built first, so no first-touch fault is
counted), then creates N files, appends 4 KiB + fsync to each, and unlinks
them, timing each call from here. After each phase it reads `novafs stats`
and prints, per operation: the median time the program saw, the requests
the kernel sent per operation with the time inside novafs for each, and
novafs's share of the operation. A benchmark, not a test: needs root and
/dev/fuse, and the release binary (`cargo build --release`).

usage: scripts/mount-share.py [N]   (default 5000)
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOVAFS = os.path.join(ROOT, "target", "release", "novafs")
# The daemon's state and log go with the scratch files.
ENV = dict(os.environ)


def stats(mnt):
    """Per opcode: (count, mean µs inside novafs)."""
    out = subprocess.run([NOVAFS, "stats", mnt], capture_output=True, text=True, check=True, env=ENV).stdout
    table = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 5 and f[1].isdigit():
            table[f[0]] = (int(f[1]), float(f[3]))
    return table


def phase(name, n, op, mnt, before):
    times = []
    for i in range(n):
        t = time.perf_counter_ns()
        op(i)
        times.append(time.perf_counter_ns() - t)
    after = stats(mnt)
    median = statistics.median(times) / 1e3
    inside, requests = 0.0, []
    for code, (count, handle) in after.items():
        c0, h0 = before.get(code, (0, 0.0))
        if count - c0 < n // 10:  # a stray request, not part of every operation
            continue
        # The phase's own mean, from the running means before and after.
        mean = (count * handle - c0 * h0) / (count - c0)
        per_op = (count - c0) / n
        inside += per_op * mean
        requests.append(f"{code} {per_op:.2f}x {mean:.2f} µs")
    print(f"| {name} | {median:.1f} | {', '.join(requests)} | {inside:.2f} | {100 * inside / median:.0f}% |")
    return after


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    work = tempfile.mkdtemp(prefix="novafs-mount-share.", dir="/dev/shm")
    image, mnt = os.path.join(work, "img"), os.path.join(work, "mnt")
    os.mkdir(mnt)
    ENV["NOVAFS_RUN_DIR"] = os.path.join(work, "run")
    subprocess.run([NOVAFS, "mkfs", "--size", "2G", image], check=True, env=ENV, stdout=subprocess.DEVNULL)
    subprocess.run([NOVAFS, "mount", "-o", "stats,prefault=now", image, mnt], check=True, env=ENV)
    try:
        d = os.path.join(mnt, "d")
        os.mkdir(d)
        page = b"x" * 4096
        print("| operation | median µs (program) | requests per operation: mean µs inside novafs | inside novafs µs | novafs's share |")
        print("|---|---|---|---|---|")
        phase("create", n, lambda i: os.close(os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644)), mnt, stats(mnt))
        fds = [os.open(f"{d}/f{i}", os.O_WRONLY | os.O_APPEND) for i in range(n)]

        def append(i):
            os.write(fds[i], page)
            os.fsync(fds[i])

        phase("append 4 KiB + fsync", n, append, mnt, stats(mnt))
        for fd in fds:
            os.close(fd)
        phase("unlink", n, lambda i: os.unlink(f"{d}/f{i}"), mnt, stats(mnt))
    finally:
        subprocess.run([NOVAFS, "umount", mnt], env=ENV)
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
