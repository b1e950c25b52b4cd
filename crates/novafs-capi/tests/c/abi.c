/* The C ABI from C: every call group once, with its exact results and
 * errors, then a remount to see that everything stayed. Run by
 * tests/c_abi.rs as `abi IMAGE`; exits non-zero at the first failure. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <grp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "novafs.h"

static int checks;

#define CHECK(cond)                                                                 \
    do {                                                                            \
        checks++;                                                                   \
        if (!(cond)) {                                                              \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

#define EQ(a, b)                                                                         \
    do {                                                                                 \
        long long a_ = (long long)(a), b_ = (long long)(b);                              \
        checks++;                                                                        \
        if (a_ != b_) {                                                                  \
            fprintf(stderr, "%s:%d: %s is %lld, not %lld\n", __FILE__, __LINE__, #a, a_, b_); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

struct appender {
    Novafs *fs;
    int fd;
    char tag;
};

enum { APPENDS = 200, RECORD = 64 };

/* Appends APPENDS records of RECORD bytes, each all `tag`, through one
 * shared O_APPEND descriptor. */
static void *append_records(void *arg) {
    struct appender *a = arg;
    char rec[RECORD];
    memset(rec, a->tag, sizeof rec);
    for (int i = 0; i < APPENDS; i++)
        if (novafs_write(a->fs, a->fd, rec, sizeof rec) != RECORD)
            return (void *)1;
    return NULL;
}

static void files_and_errors(Novafs *fs) {
    char buf[256];
    struct stat st;

    EQ(novafs_mkdir(fs, "/docs", 0755), 0);
    EQ(novafs_mkdir(fs, "/docs", 0755), -EEXIST);
    int fd = novafs_open(fs, "/docs/a.txt", O_CREAT | O_EXCL | O_RDWR, 0644);
    CHECK(fd >= 0);
    EQ(novafs_open(fs, "/docs/a.txt", O_CREAT | O_EXCL | O_RDWR, 0644), -EEXIST);
    EQ(novafs_write(fs, fd, "hello, persistent memory", 24), 24);
    EQ(novafs_pwrite(fs, fd, "HELLO", 5, 0), 5);
    EQ(novafs_lseek(fs, fd, 0, SEEK_CUR), 24);
    EQ(novafs_lseek(fs, fd, 0, SEEK_SET), 0);
    EQ(novafs_read(fs, fd, buf, sizeof buf), 24);
    CHECK(memcmp(buf, "HELLO, persistent memory", 24) == 0);
    EQ(novafs_read(fs, fd, buf, sizeof buf), 0);
    EQ(novafs_fsync(fs, fd), 0);
    EQ(novafs_fstat(fs, fd, &st), 0);
    EQ(st.st_size, 24);
    CHECK(S_ISREG(st.st_mode));
    EQ(st.st_mode & 07777, 0644 & ~022);

    /* readv/writev */
    struct iovec v[2] = {{"ab", 2}, {"cd", 2}};
    EQ(novafs_writev(fs, fd, v, 2), 4);
    char x[2], y[3];
    struct iovec r[2] = {{x, 2}, {y, 3}};
    EQ(novafs_pread(fs, fd, buf, 4, 24), 4);
    CHECK(memcmp(buf, "abcd", 4) == 0);
    EQ(novafs_lseek(fs, fd, 22, SEEK_SET), 22);
    EQ(novafs_readv(fs, fd, r, 2), 5);
    CHECK(memcmp(x, "ry", 2) == 0 && memcmp(y, "abc", 3) == 0);

    /* truncation and fallocate */
    EQ(novafs_ftruncate(fs, fd, 10), 0);
    EQ(novafs_stat(fs, "/docs/a.txt", &st), 0);
    EQ(st.st_size, 10);
    EQ(novafs_fallocate(fs, fd, 0, 0, 8192), 0);
    EQ(novafs_fstat(fs, fd, &st), 0);
    EQ(st.st_size, 8192);
    EQ(novafs_truncate(fs, "/docs/a.txt", 5), 0);

    /* errors */
    EQ(novafs_open(fs, "/nope/a", O_RDONLY, 0), -ENOENT);
    EQ(novafs_open(fs, "/docs/a.txt/x", O_RDONLY, 0), -ENOTDIR);
    EQ(novafs_open(fs, "/docs", O_WRONLY, 0), -EISDIR);
    EQ(novafs_open(fs, "/docs/a.txt", O_RDONLY | O_DIRECTORY, 0), -ENOTDIR);
    EQ(novafs_read(fs, 999, buf, 1), -EBADF);
    EQ(novafs_rmdir(fs, "/docs"), -ENOTEMPTY);
    EQ(novafs_unlink(fs, "/docs"), -EISDIR);
    char longname[300];
    memset(longname, 'n', sizeof longname);
    longname[0] = '/';
    longname[299] = 0;
    EQ(novafs_open(fs, longname, O_CREAT | O_RDWR, 0644), -ENAMETOOLONG);
    int ro = novafs_open(fs, "/docs/a.txt", O_RDONLY, 0);
    CHECK(ro >= 0);
    EQ(novafs_write(fs, ro, "x", 1), -EBADF);
    EQ(novafs_ftruncate(fs, ro, 0), -EINVAL);
    EQ(novafs_close(fs, ro), 0);
    EQ(novafs_close(fs, ro), -EBADF);

    /* names: relative paths, links, renames, an unlinked open file */
    EQ(novafs_chdir(fs, "/docs"), 0);
    EQ(novafs_link(fs, "a.txt", "b.txt"), 0);
    EQ(novafs_stat(fs, "/docs/b.txt", &st), 0);
    EQ(st.st_nlink, 2);
    EQ(novafs_symlink(fs, "a.txt", "c.lnk"), 0);
    EQ(novafs_readlink(fs, "c.lnk", buf, sizeof buf), 5);
    CHECK(memcmp(buf, "a.txt", 5) == 0);
    EQ(novafs_lstat(fs, "c.lnk", &st), 0);
    CHECK(S_ISLNK(st.st_mode));
    EQ(novafs_stat(fs, "c.lnk", &st), 0);
    CHECK(S_ISREG(st.st_mode));
    EQ(novafs_rename(fs, "b.txt", "../b.txt"), 0);
    EQ(novafs_stat(fs, "/b.txt", &st), 0);
    EQ(novafs_renameat2(fs, AT_FDCWD, "/b.txt", AT_FDCWD, "/docs/a.txt", RENAME_NOREPLACE), -EEXIST);
    EQ(novafs_unlink(fs, "a.txt"), 0);
    EQ(novafs_stat(fs, "a.txt", &st), -ENOENT);
    EQ(novafs_lseek(fs, fd, 0, SEEK_SET), 0);
    EQ(novafs_read(fs, fd, buf, sizeof buf), 5); /* still open: still there */
    CHECK(memcmp(buf, "HELLO", 5) == 0);
    EQ(novafs_close(fs, fd), 0);
    EQ(novafs_unlink(fs, "c.lnk"), 0);

    /* *at calls from an open directory */
    int dfd = novafs_open(fs, "/docs", O_RDONLY | O_DIRECTORY, 0);
    CHECK(dfd >= 0);
    fd = novafs_openat(fs, dfd, "d.txt", O_CREAT | O_WRONLY | O_TRUNC, 0600);
    CHECK(fd >= 0);
    EQ(novafs_write(fs, fd, "dddd", 4), 4);
    EQ(novafs_close(fs, fd), 0);
    EQ(novafs_fstatat(fs, dfd, "d.txt", &st, 0), 0);
    EQ(st.st_size, 4);
    EQ(st.st_mode & 07777, 0600);
    EQ(novafs_unlinkat(fs, dfd, "d.txt", 0), 0);
    EQ(novafs_close(fs, dfd), 0);
    EQ(novafs_chdir(fs, "/"), 0);

    /* attributes */
    EQ(novafs_chmod(fs, "/b.txt", 0600), 0);
    EQ(novafs_stat(fs, "/b.txt", &st), 0);
    EQ(st.st_mode & 07777, 0600);
    EQ(novafs_chown(fs, "/b.txt", 1000, 1000), 0);
    EQ(novafs_stat(fs, "/b.txt", &st), 0);
    EQ(st.st_uid, 1000);
    struct timespec ts[2] = {{1000000000, 5}, {1234567890, 123456789}};
    EQ(novafs_utimensat(fs, AT_FDCWD, "/b.txt", ts, 0), 0);
    EQ(novafs_stat(fs, "/b.txt", &st), 0);
    EQ(st.st_atim.tv_sec, 1000000000);
    EQ(st.st_mtim.tv_sec, 1234567890);
    EQ(st.st_mtim.tv_nsec, 123456789);
    EQ(novafs_access(fs, "/b.txt", R_OK | W_OK), 0);

    /* extended attributes */
    EQ(novafs_setxattr(fs, "/b.txt", "user.color", "blue", 4, 0), 0);
    EQ(novafs_setxattr(fs, "/b.txt", "user.color", "red", 3, XATTR_CREATE), -EEXIST);
    EQ(novafs_getxattr(fs, "/b.txt", "user.color", NULL, 0), 4);
    EQ(novafs_getxattr(fs, "/b.txt", "user.color", buf, 2), -ERANGE);
    EQ(novafs_getxattr(fs, "/b.txt", "user.color", buf, sizeof buf), 4);
    CHECK(memcmp(buf, "blue", 4) == 0);
    EQ(novafs_listxattr(fs, "/b.txt", buf, sizeof buf), 11);
    CHECK(memcmp(buf, "user.color", 11) == 0);
    EQ(novafs_removexattr(fs, "/b.txt", "user.color"), 0);
    EQ(novafs_getxattr(fs, "/b.txt", "user.color", buf, sizeof buf), -ENODATA);

    /* a directory listing */
    for (int i = 0; i < 100; i++) {
        char name[32];
        snprintf(name, sizeof name, "/docs/f%03d", i);
        fd = novafs_open(fs, name, O_CREAT | O_WRONLY, 0644);
        CHECK(fd >= 0);
        EQ(novafs_close(fs, fd), 0);
    }
    NovafsDir *d = novafs_opendir(fs, "/docs");
    CHECK(d != NULL);
    int seen[100] = {0}, dots = 0, n = 0;
    const NovafsDirent *e;
    while ((e = novafs_readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) {
            dots++;
            continue;
        }
        CHECK(e->d_name[0] == 'f' && e->d_type == DT_REG);
        seen[atoi(e->d_name + 1)]++;
        n++;
    }
    EQ(dots, 2);
    EQ(n, 100);
    for (int i = 0; i < 100; i++)
        EQ(seen[i], 1);
    novafs_rewinddir(d);
    CHECK(novafs_readdir(d) != NULL);
    EQ(novafs_closedir(d), 0);
    errno = 0;
    CHECK(novafs_opendir(fs, "/b.txt") == NULL && errno == ENOTDIR);
}

/* Four threads append through one O_APPEND descriptor: every record
 * whole, none lost or overlapping. */
static void threads_append(Novafs *fs) {
    int fd = novafs_open(fs, "/log", O_CREAT | O_WRONLY | O_APPEND, 0644);
    CHECK(fd >= 0);
    pthread_t t[4];
    struct appender a[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (struct appender){fs, fd, (char)('A' + i)};
        CHECK(pthread_create(&t[i], NULL, append_records, &a[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        void *ret;
        CHECK(pthread_join(t[i], &ret) == 0 && ret == NULL);
    }
    EQ(novafs_close(fs, fd), 0);
    fd = novafs_open(fs, "/log", O_RDONLY, 0);
    int count[4] = {0};
    char rec[RECORD];
    for (int i = 0; i < 4 * APPENDS; i++) {
        EQ(novafs_read(fs, fd, rec, RECORD), RECORD);
        CHECK(rec[0] >= 'A' && rec[0] <= 'D');
        for (int j = 1; j < RECORD; j++)
            CHECK(rec[j] == rec[0]);
        count[rec[0] - 'A']++;
    }
    EQ(novafs_read(fs, fd, rec, RECORD), 0);
    for (int i = 0; i < 4; i++)
        EQ(count[i], APPENDS);
    EQ(novafs_close(fs, fd), 0);
}

/* A snapshot keeps the old contents, read-only. */
static void snapshots(Novafs *fs) {
    char buf[16];
    int fd = novafs_open(fs, "/snap.txt", O_CREAT | O_RDWR | O_TRUNC, 0644);
    EQ(novafs_write(fs, fd, "before", 6), 6);
    EQ(novafs_snapshot_take(fs, "s1"), 0);
    EQ(novafs_snapshot_take(fs, "s1"), -EEXIST);
    EQ(novafs_pwrite(fs, fd, "AFTER!", 6, 0), 6);
    EQ(novafs_close(fs, fd), 0);
    EQ(novafs_snapshot_list(fs, buf, sizeof buf), 3);
    CHECK(memcmp(buf, "s1", 3) == 0);
    int err = 0;
    Novafs *view = novafs_snapshot_open(fs, "s1", &err);
    CHECK(view != NULL);
    fd = novafs_open(view, "/snap.txt", O_RDONLY, 0);
    CHECK(fd >= 0);
    EQ(novafs_read(view, fd, buf, sizeof buf), 6);
    CHECK(memcmp(buf, "before", 6) == 0);
    EQ(novafs_open(view, "/new", O_CREAT | O_WRONLY, 0644), -EROFS);
    EQ(novafs_close(view, fd), 0);
    EQ(novafs_unmount(view), 0);
    CHECK(novafs_snapshot_open(fs, "none", &err) == NULL && err == ENOENT);
}

/* DAX mmap: the file's own pages, shared with read and write. */
static void mappings(Novafs *fs) {
    char buf[8192];
    int fd = novafs_open(fs, "/mapped", O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK(fd >= 0);
    memset(buf, 'm', sizeof buf);
    EQ(novafs_write(fs, fd, buf, sizeof buf), sizeof buf);
    char *p = novafs_mmap(fs, NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    CHECK(p[0] == 'm' && p[8191] == 'm');
    memcpy(p + 4096, "stored through the mapping", 26);
    EQ(novafs_msync(fs, p, 8192, MS_SYNC), 0);
    EQ(novafs_pread(fs, fd, buf, 26, 4096), 26);
    CHECK(memcmp(buf, "stored through the mapping", 26) == 0);
    /* A write through the descriptor shows in the mapping. */
    EQ(novafs_pwrite(fs, fd, "WRITTEN", 7, 0), 7);
    CHECK(memcmp(p, "WRITTEN", 7) == 0);
    EQ(novafs_munmap(fs, p, 4096), -EINVAL); /* only whole mappings */
    EQ(novafs_munmap(fs, p, 8192), 0);
    errno = 0;
    CHECK(novafs_mmap(fs, NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0) == MAP_FAILED && errno == EOPNOTSUPP);
    CHECK(novafs_mmap(fs, NULL, 4096, PROT_READ, MAP_SHARED, fd, 100) == MAP_FAILED && errno == EINVAL);
    int ro = novafs_open(fs, "/mapped", O_RDONLY, 0);
    CHECK(novafs_mmap(fs, NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, ro, 0) == MAP_FAILED && errno == EACCES);
    p = novafs_mmap(fs, NULL, 4096, PROT_READ, MAP_PRIVATE, ro, 0);
    CHECK(p != MAP_FAILED && memcmp(p, "WRITTEN", 7) == 0);
    /* The mapping holds the file: unlinked and closed, it still reads. */
    EQ(novafs_close(fs, ro), 0);
    EQ(novafs_close(fs, fd), 0);
    EQ(novafs_unlink(fs, "/mapped"), 0);
    CHECK(memcmp(p, "WRITTEN", 7) == 0);
    EQ(novafs_munmap(fs, p, 4096), 0);
}

/* Permission checks for another user: a forked child that drops to
 * nobody (it only reads and fails, so its copy of the handle writes
 * nothing). */
static void permissions(Novafs *fs) {
    int fd = novafs_open(fs, "/secret", O_CREAT | O_WRONLY, 0600);
    CHECK(fd >= 0);
    EQ(novafs_close(fs, fd), 0);
    EQ(novafs_mkdir(fs, "/closed", 0700), 0);
    if (getuid() != 0) {
        fprintf(stderr, "permissions: not root, cannot switch users; skipped\n");
        return;
    }
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0)
            _exit(10);
        if (novafs_refresh_credentials(fs) != 0)
            _exit(11);
        if (novafs_open(fs, "/secret", O_RDONLY, 0) != -EACCES)
            _exit(12);
        if (novafs_open(fs, "/closed/x", O_CREAT | O_WRONLY, 0644) != -EACCES)
            _exit(13);
        if (novafs_chmod(fs, "/secret", 0777) != -EPERM)
            _exit(14);
        if (novafs_access(fs, "/secret", R_OK) != -EACCES)
            _exit(15);
        if (novafs_unlink(fs, "/secret") != -EACCES)
            _exit(16);
        _exit(0);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    EQ(WEXITSTATUS(status), 0);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: abi IMAGE (a new file)\n");
        return 2;
    }
    umask(022);
    EQ(novafs_format(argv[1], 4096), -EINVAL); /* too small */
    unlink(argv[1]);
    EQ(novafs_format(argv[1], novafs_minimum_size() + (64 << 20)), 0);
    int err = 0;
    Novafs *fs = novafs_mount(argv[1], 0, &err);
    CHECK(fs != NULL);
    CHECK(novafs_mount(argv[1], 0, &err) == NULL);
    EQ(err, EBUSY);

    files_and_errors(fs);
    threads_append(fs);
    snapshots(fs);
    mappings(fs);
    permissions(fs);
    EQ(novafs_unmount(fs), 0);

    /* Everything is there after a remount. */
    fs = novafs_mount(argv[1], NOVAFS_RDONLY, &err);
    CHECK(fs != NULL);
    struct stat st;
    EQ(novafs_stat(fs, "/log", &st), 0);
    EQ(st.st_size, 4 * APPENDS * RECORD);
    EQ(novafs_stat(fs, "/b.txt", &st), 0);
    EQ(st.st_size, 5);
    EQ(st.st_mtim.tv_nsec, 123456789);
    EQ(novafs_open(fs, "/x", O_CREAT | O_WRONLY, 0644), -EROFS);
    EQ(novafs_unmount(fs), 0);
    printf("abi: %d checks passed\n", checks);
    return 0;
}
