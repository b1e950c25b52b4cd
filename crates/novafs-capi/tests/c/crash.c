/* A program killed while it writes loses nothing it was told was
 * written. `crash IMAGE write` mounts IMAGE and appends numbered 4 KiB
 * records to /log from where it ends, and at every tenth record writes
 * its number to /tmp and renames /tmp over /latest, printing the count
 * once the calls returned, until it is killed; `crash IMAGE check N`
 * mounts IMAGE (recovering it) and checks that at least the N records
 * printed are there, each whole and in order, and that /latest names a
 * record no older than the last rename it was told of. Run by
 * tests/c_abi.rs. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "novafs.h"

enum { RECORD = 4096 };

static void fill(char *rec, long i) {
    memset(rec, 'a' + (int)(i % 26), RECORD);
    memcpy(rec, &i, sizeof i);
}

static int fail(const char *what, long v) {
    fprintf(stderr, "crash: %s (%ld)\n", what, v);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3)
        return fail("usage: crash IMAGE write | crash IMAGE check N", 0);
    int err = 0;
    Novafs *fs = novafs_mount(argv[1], 0, &err);
    if (fs == NULL)
        return fail("mount", err);
    char rec[RECORD], got[RECORD];
    if (strcmp(argv[2], "write") == 0) {
        int fd = novafs_open(fs, "/log", O_CREAT | O_WRONLY | O_APPEND, 0644);
        struct stat st;
        if (fd < 0 || novafs_fstat(fs, fd, &st) != 0)
            return fail("open", fd);
        for (long i = st.st_size / RECORD;; i++) {
            fill(rec, i);
            long n = novafs_write(fs, fd, rec, RECORD);
            if (n != RECORD)
                return fail("write", n);
            if (i % 10 == 0) {
                int t = novafs_open(fs, "/tmp", O_CREAT | O_WRONLY | O_TRUNC, 0644);
                if (t < 0 || novafs_write(fs, t, &i, sizeof i) != sizeof i || novafs_close(fs, t) != 0)
                    return fail("tmp", t);
                int r = novafs_rename(fs, "/tmp", "/latest");
                if (r != 0)
                    return fail("rename", r);
            }
            /* Told: the count goes out only after the calls returned. */
            char line[32];
            int len = snprintf(line, sizeof line, "%ld\n", i + 1);
            if (write(1, line, len) != len)
                return fail("stdout", 0);
        }
    }
    long told = argc > 3 ? atol(argv[3]) : 0;
    struct stat st;
    int r = novafs_stat(fs, "/log", &st);
    if (r != 0)
        return fail("stat /log", r);
    long have = st.st_size / RECORD;
    if (st.st_size % RECORD != 0)
        return fail("a torn record: size", st.st_size);
    if (have < told)
        return fail("records lost: have", have);
    int fd = novafs_open(fs, "/log", O_RDONLY, 0);
    for (long i = 0; i < have; i++) {
        fill(rec, i);
        if (novafs_read(fs, fd, got, RECORD) != RECORD || memcmp(rec, got, RECORD) != 0)
            return fail("record damaged", i);
    }
    /* /latest names a record, no older than the last rename told. */
    long latest = -1;
    int l = novafs_open(fs, "/latest", O_RDONLY, 0);
    if (l >= 0 && novafs_read(fs, l, &latest, sizeof latest) != sizeof latest)
        return fail("/latest torn", 0);
    if (told > 0 && (latest < (told - 1) / 10 * 10 || latest >= have))
        return fail("/latest is wrong", latest);
    if (novafs_unmount(fs) != 0)
        return fail("unmount", 0);
    printf("crash: %ld records told, %ld found, whole\n", told, have);
    return 0;
}
