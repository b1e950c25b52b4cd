/* Runs a fixed sequence of calls in DIR and prints one line per call:
 * what it returned (a value, or the errno's name) and what it left. The
 * test runs it on tmpfs and under the shim (DIR under the prefix, the
 * image in-process) and the two transcripts must be equal. Never prints
 * inode numbers, times or the DIR itself (paths are shown relative). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <unistd.h>

static const char *root;

static const char *err(void) {
    switch (errno) {
    case ENOENT: return "ENOENT";
    case EEXIST: return "EEXIST";
    case ENOTEMPTY: return "ENOTEMPTY";
    case EISDIR: return "EISDIR";
    case ENOTDIR: return "ENOTDIR";
    case EBADF: return "EBADF";
    case EINVAL: return "EINVAL";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case ENODATA: return "ENODATA";
    case ERANGE: return "ERANGE";
    case EXDEV: return "EXDEV";
    case ELOOP: return "ELOOP";
    case EFAULT: return "EFAULT";
    default: return strerror(errno);
    }
}

/* A descriptor's number depends on what else the process has open: only
 * whether the call succeeded is shown. */
static int opened(const char *what, int fd) {
    if (fd < 0) printf("%s: %s\n", what, err());
    else printf("%s: ok\n", what);
    return fd;
}

/* Prints a call's result: a non-negative value, or its errno. */
static long show(const char *what, long r) {
    if (r < 0) printf("%s: %s\n", what, err());
    else printf("%s: %ld\n", what, r);
    return r;
}

static char *at(const char *rel) {
    static char buf[4][PATH_MAX];
    static int n;
    char *b = buf[n++ % 4];
    snprintf(b, PATH_MAX, "%s/%s", root, rel);
    return b;
}

/* A path shown relative to DIR. */
static const char *rel(const char *p) {
    size_t n = strlen(root);
    return strncmp(p, root, n) == 0 ? (p[n] ? p + n : "(root)") : p;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void list(const char *what, DIR *d) {
    char *names[64];
    int n = 0;
    struct dirent *e;
    errno = 0;
    while ((e = readdir(d)) && n < 64) {
        names[n++] = strdup(e->d_name);
    }
    qsort(names, n, sizeof *names, by_name);
    printf("%s:", what);
    for (int i = 0; i < n; i++) {
        printf(" %s", names[i]);
        free(names[i]);
    }
    printf(" (errno %s)\n", errno ? err() : "0");
}

/* nftw's visits, sorted (listing order is the file system's own). */
static char *visits[64];
static int nvisits;

static int visit(const char *p, const struct stat *st, int kind, struct FTW *ftw) {
    char line[PATH_MAX + 64];
    snprintf(line, sizeof line, "%s kind %d level %d base %s size %lld", rel(p), kind, ftw->level, p + ftw->base,
             S_ISREG(st->st_mode) ? (long long)st->st_size : -1LL);
    if (nvisits < 64) visits[nvisits++] = strdup(line);
    return 0;
}

static void walk(const char *what, const char *p, int flags) {
    nvisits = 0;
    int r = nftw(p, visit, 8, flags);
    qsort(visits, nvisits, sizeof *visits, by_name);
    printf("%s: %d\n", what, r);
    for (int i = 0; i < nvisits; i++) {
        printf("  %s\n", visits[i]);
        free(visits[i]);
    }
}

static int not_dot(const struct dirent *e) {
    return e->d_name[0] != '.';
}

static void mode_of(const char *what, const char *p) {
    struct stat st;
    if (lstat(p, &st)) printf("%s: %s\n", what, err());
    else printf("%s: mode %o size %lld nlink %lu\n", what, st.st_mode, (long long)st.st_size, (unsigned long)st.st_nlink);
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    root = argv[1];
    char buf[8192];

    /* Files and offsets. */
    int fd = opened("open creat", open(at("a"), O_CREAT | O_EXCL | O_RDWR, 0640));
    show("write", write(fd, "hello world\n", 12));
    show("lseek cur", lseek(fd, 0, SEEK_CUR));
    show("pread", pread(fd, buf, 5, 6));
    printf("pread data: %.5s\n", buf);
    show("pwrite", pwrite(fd, "W", 1, 6));
    struct iovec iov[2] = {{"ab", 2}, {"cd", 2}};
    show("writev", writev(fd, iov, 2));
    struct iovec piov[2] = {{"PQ", 2}, {"RS", 2}};
    show("pwritev", pwritev(fd, piov, 2, 12));
    char pv[4];
    struct iovec rpiov[1] = {{pv, 4}};
    show("preadv", preadv(fd, rpiov, 1, 12));
    printf("preadv data: %.4s\n", pv);
    show("lseek set", lseek(fd, 0, SEEK_SET));
    char x[3], y[20];
    struct iovec riov[2] = {{x, 3}, {y, sizeof y}};
    long got = show("readv", readv(fd, riov, 2));
    printf("readv data: %.3s|%.*s\n", x, (int)(got > 3 ? got - 3 : 0), y);
    opened("open excl again", open(at("a"), O_CREAT | O_EXCL | O_RDWR, 0640));

    /* Descriptors. */
    int d2 = opened("dup", dup(fd));
    show("lseek shared by dup", (lseek(fd, 3, SEEK_SET), lseek(d2, 0, SEEK_CUR)));
    int hi = 77;
    show("dup2 to 77", dup2(fd, hi));
    show("fcntl getfd after dup2", fcntl(hi, F_GETFD));
    show("fcntl setfd", fcntl(hi, F_SETFD, FD_CLOEXEC));
    show("fcntl getfd", fcntl(hi, F_GETFD));
    show("fcntl dupfd >= 90", fcntl(fd, F_DUPFD, 90));
    show("fcntl getfl accmode", fcntl(fd, F_GETFL) & O_ACCMODE);
    show("fcntl setfl append", fcntl(fd, F_SETFL, O_APPEND));
    show("fcntl getfl append", (fcntl(fd, F_GETFL) & O_APPEND) != 0);
    show("write appending", write(fd, "Z", 1));
    show("lseek end", lseek(fd, 0, SEEK_CUR));
    struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    show("setlk", fcntl(fd, F_SETLK, &lk));
    lk.l_type = F_WRLCK;
    show("getlk", fcntl(fd, F_GETLK, &lk));
    show("getlk type unlck", lk.l_type == F_UNLCK);
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLOUT};
    show("poll", poll(&p, 1, 0));
    show("poll revents", p.revents & (POLLIN | POLLOUT));
    show("close 77", close(hi));
    show("close 77 again", close(hi));
    show("read closed", read(hi, buf, 1));
    struct stat st;
    show("fstat", fstat(fd, &st));
    printf("fstat: mode %o size %lld\n", st.st_mode, (long long)st.st_size);
    show("ftruncate", ftruncate(fd, 4));
    mode_of("after ftruncate", at("a"));
    show("close", close(fd));
    show("close d2", close(d2));

    /* stdio. */
    FILE *f = fopen(at("s"), "w");
    show("fopen w", f ? 0 : -1);
    fprintf(f, "line %d\nline %d\n", 1, 2);
    show("fileno is a descriptor", fileno(f) >= 0 ? 0 : -1);
    show("fstat fileno", fstat(fileno(f), &st));
    show("fclose", fclose(f));
    f = fopen(at("s"), "a+");
    fputs("line 3\n", f);
    rewind(f);
    while (fgets(buf, sizeof buf, f)) printf("fgets: %s", buf);
    show("fclose a+", fclose(f));
    f = fopen(at("nothere"), "r");
    show("fopen missing", f ? 0 : -1);
    fd = open(at("s"), O_RDONLY);
    f = fdopen(fd, "r");
    show("fread", (long)fread(buf, 1, sizeof buf, f));
    show("fclose fdopen", fclose(f));

    /* Directories. */
    show("mkdir", mkdir(at("d"), 0750));
    show("mkdir again", mkdir(at("d"), 0750));
    for (int i = 0; i < 5; i++) {
        char name[32];
        snprintf(name, sizeof name, "d/f%d", i);
        close(open(at(name), O_CREAT | O_WRONLY, 0600));
    }
    DIR *dir = opendir(at("d"));
    show("opendir", dir ? 0 : -1);
    list("readdir", dir);
    rewinddir(dir);
    list("readdir after rewind", dir);
    show("fstat dirfd is dir", (fstat(dirfd(dir), &st), S_ISDIR(st.st_mode)));
    int dfd = dirfd(dir);
    opened("openat from dirfd", fd = openat(dfd, "f1", O_WRONLY));
    close(fd);
    show("closedir", closedir(dir));
    fd = open(at("d"), O_RDONLY | O_DIRECTORY);
    dir = fdopendir(fd);
    list("fdopendir", dir);
    closedir(dir);
    show("rmdir not empty", rmdir(at("d")));
    show("unlink dir", unlink(at("d")));
    show("opendir file", opendir(at("a")) ? 0 : -1);

    /* libc's walkers: scandir, nftw, glob. */
    show("mkdir w", mkdir(at("w"), 0755) | mkdir(at("w/b"), 0755));
    close(open(at("w/a"), O_CREAT | O_WRONLY, 0644));
    close(open(at("w/b/c"), O_CREAT | O_WRONLY, 0644));
    show("symlink in w", symlink("a", at("w/l")) | symlink("gone", at("w/dangling")));
    struct dirent **names;
    int nnames = scandir(at("w"), &names, not_dot, alphasort);
    printf("scandir: %d", nnames);
    for (int i = 0; i < nnames; i++) {
        printf(" %s", names[i]->d_name);
        free(names[i]);
    }
    printf("\n");
    if (nnames >= 0) free(names);
    show("scandir missing", scandir(at("nothing"), &names, NULL, alphasort));
    walk("nftw", at("w"), 0);
    walk("nftw phys depth", at("w"), FTW_PHYS | FTW_DEPTH);
    walk("nftw missing", at("nothing"), 0);
    glob_t g;
    printf("glob: %d", glob(at("w/*"), 0, NULL, &g));
    for (size_t i = 0; i < g.gl_pathc; i++) printf(" %s", rel(g.gl_pathv[i]));
    printf("\n");
    globfree(&g);
    printf("glob nothing: %d\n", glob(at("w/z*"), 0, NULL, &g));
    show("rm w", unlink(at("w/a")) | unlink(at("w/b/c")) | unlink(at("w/l")) | unlink(at("w/dangling")) |
                     rmdir(at("w/b")) | rmdir(at("w")));

    /* The working directory. */
    show("chdir", chdir(at("d")));
    char cwd[PATH_MAX];
    printf("getcwd: %s\n", getcwd(cwd, sizeof cwd) ? rel(cwd) : err());
    opened("open relative", fd = open("f2", O_RDONLY));
    close(fd);
    show("stat dotdot", stat("../a", &st));
    char real[PATH_MAX];
    printf("realpath: %s\n", realpath("../d/./f3", real) ? rel(real) : err());
    show("chdir dotdot", chdir(".."));
    printf("getcwd: %s\n", getcwd(cwd, sizeof cwd) ? rel(cwd) : err());
    show("chdir /", chdir("/"));

    /* Names. */
    show("rename", rename(at("d/f0"), at("moved")));
    show("rename missing", rename(at("d/f0"), at("moved2")));
    show("rename noreplace", renameat2(AT_FDCWD, at("moved"), AT_FDCWD, at("a"), RENAME_NOREPLACE));
    show("link", link(at("moved"), at("hard")));
    mode_of("linked", at("hard"));
    show("symlink", symlink("moved", at("sym")));
    ssize_t n = readlink(at("sym"), buf, sizeof buf);
    printf("readlink: %.*s\n", (int)(n < 0 ? 0 : n), buf);
    mode_of("lstat symlink", at("sym"));
    show("stat through symlink", stat(at("sym"), &st));
    /* realpath expands links inside the image, relative and absolute. */
    show("mkdir for links", mkdir(at("ld"), 0755));
    show("symlink up", symlink("ld/..", at("lup")));
    show("symlink absolute", symlink(at("ld"), at("labs")));
    show("symlink dangling", symlink("nowhere", at("ldang")));
    printf("realpath link: %s\n", realpath(at("sym"), real) ? rel(real) : err());
    printf("realpath link dotdot: %s\n", realpath(at("lup/moved"), real) ? rel(real) : err());
    printf("realpath absolute link: %s\n", realpath(at("labs/../ld"), real) ? rel(real) : err());
    printf("realpath dangling: %s\n", realpath(at("ldang"), real) ? rel(real) : err());
    printf("realpath through a file: %s\n", realpath(at("moved/x"), real) ? rel(real) : err());
    show("unlink links", unlink(at("lup")) | unlink(at("labs")) | unlink(at("ldang")) | rmdir(at("ld")));
    /* A path pointer that cannot be read is EFAULT, not a crash. */
    const char *bad = (const char *)(unsigned long)0xdeadc0de;
    show("chmod bad pointer", chmod(bad, 0644));
    const char *volatile null = NULL; /* hidden from -Wnonnull */
    show("chmod NULL", chmod(null, 0644));
    show("link to a bad pointer", link(at("moved"), bad));
    show("rename from a bad pointer", rename(bad, at("moved")));
    show("unlink", unlink(at("hard")));
    show("unlink missing", unlink(at("hard")));
    show("chmod", chmod(at("moved"), 0604));
    mode_of("after chmod", at("moved"));
    show("truncate", truncate(at("moved"), 100));
    mode_of("after truncate", at("moved"));
    show("access rw", access(at("moved"), R_OK | W_OK));
    show("access missing", access(at("nope"), F_OK));
    struct timespec ts[2] = {{1000000000, 5}, {1000000001, 7}};
    show("utimensat", utimensat(AT_FDCWD, at("moved"), ts, 0));
    show("stat mtime", (stat(at("moved"), &st), st.st_mtim.tv_sec == 1000000001 && st.st_mtim.tv_nsec == 7));

    /* Temporary files. */
    char tmpl[PATH_MAX];
    snprintf(tmpl, sizeof tmpl, "%s/tmpXXXXXX", root);
    fd = mkstemp(tmpl);
    show("mkstemp", fd >= 0 ? 0 : -1);
    show("mkstemp name kept", strncmp(rel(tmpl), "/tmp", 4) == 0 && strstr(tmpl, "XXXXXX") == NULL);
    show("mkstemp write", write(fd, "t", 1));
    close(fd);
    show("remove", remove(tmpl));
    snprintf(tmpl, sizeof tmpl, "%s/dirXXXXXX", root);
    show("mkdtemp", mkdtemp(tmpl) ? 0 : -1);
    show("remove dir", remove(tmpl));

    /* Extended attributes. */
    int xa = setxattr(at("moved"), "user.k", "v1", 2, 0);
    if (xa == 0 || errno != EOPNOTSUPP) {
        show("setxattr", xa);
        n = getxattr(at("moved"), "user.k", buf, sizeof buf);
        printf("getxattr: %.*s\n", (int)(n < 0 ? 0 : n), buf);
        show("getxattr missing", getxattr(at("moved"), "user.none", buf, sizeof buf));
        show("removexattr", removexattr(at("moved"), "user.k"));
    }

    /* Mappings: stores reach the file. */
    fd = open(at("m"), O_CREAT | O_RDWR, 0600);
    show("ftruncate for mmap", ftruncate(fd, 8192));
    char *m = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    show("mmap", m == MAP_FAILED ? -1 : 0);
    if (m != MAP_FAILED) {
        memcpy(m + 4096, "mapped!", 7);
        show("msync", msync(m, 8192, MS_SYNC));
        show("munmap", munmap(m, 8192));
        show("pread mapped", pread(fd, buf, 7, 4096));
        printf("mapped data: %.7s\n", buf);
    }
    close(fd);

    /* Leaving: what is there. */
    dir = opendir(root);
    list("final", dir);
    closedir(dir);
    return 0;
}
