/* NOVA §5.2's microbenchmark in C, so that the program adds as little as
 * possible: create FILES files in DIR, then per file open, APPENDS x
 * (write 4 KiB + fsync), close; then unlink them. Prints the mean
 * microseconds per create, per append+fsync and per unlink. Used by
 * scripts/fuse-vs-ext4.sh and scripts/preload-bench.sh. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void die(const char *what, const char *path) {
    perror(what);
    fprintf(stderr, "  at %s\n", path);
    exit(1);
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: DIR FILES APPENDS\n"); return 2; }
    const char *dir = argv[1];
    long files = atol(argv[2]), appends = atol(argv[3]);
    char path[4096], page[4096];
    memset(page, 0x5a, sizeof page);
    double t = now();
    for (long i = 0; i < files; i++) {
        snprintf(path, sizeof path, "%s/f%ld", dir, i);
        int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
        if (fd < 0 || close(fd)) die("create", path);
    }
    double create = (now() - t) / files;
    t = now();
    for (long i = 0; i < files; i++) {
        snprintf(path, sizeof path, "%s/f%ld", dir, i);
        int fd = open(path, O_WRONLY | O_APPEND);
        if (fd < 0) die("open", path);
        for (long k = 0; k < appends; k++) {
            if (write(fd, page, sizeof page) != sizeof page) die("write", path);
            if (fsync(fd)) die("fsync", path);
        }
        if (close(fd)) die("close", path);
    }
    double append = (now() - t) / (files * appends);
    t = now();
    for (long i = 0; i < files; i++) {
        snprintf(path, sizeof path, "%s/f%ld", dir, i);
        if (unlink(path)) die("unlink", path);
    }
    double unlink_us = (now() - t) / files;
    printf("%.2f %.2f %.2f\n", create, append, unlink_us);
    return 0;
}
