/* Who may do what, as a transcript: `perms DIR` (run as root; DIR must
 * not exist) builds the same fixture once per identity under DIR/TAG,
 * becomes that identity and makes a battery of calls, printing one line
 * per call: the identity, the call, its arguments (paths relative to DIR)
 * and the result (a value, or the errno's name). Modes are octal, owners
 * numeric; no inode numbers or times. tests/exec_perms.rs runs it on
 * tmpfs, on a novafs mount and under the preload shim and compares.
 *
 * It never forks: under the shim a fork hands the image to a daemon, and
 * the shim's own checks would no longer be what runs. So the identities
 * take turns in one process: each keeps saved uid 0 (setresuid(u, u, 0))
 * and comes back to root with setresuid(0, 0, 0). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdarg.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

static const char *base; /* DIR */
static const char *tag;  /* this identity's name and fixture directory */

static const char *ename(int e) {
    switch (e) {
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case EIO: return "EIO";
    case EBADF: return "EBADF";
    case EACCES: return "EACCES";
    case EBUSY: return "EBUSY";
    case EEXIST: return "EEXIST";
    case EXDEV: return "EXDEV";
    case ENOTDIR: return "ENOTDIR";
    case EISDIR: return "EISDIR";
    case EINVAL: return "EINVAL";
    case ETXTBSY: return "ETXTBSY";
    case EFBIG: return "EFBIG";
    case ENOSPC: return "ENOSPC";
    case EROFS: return "EROFS";
    case EMLINK: return "EMLINK";
    case ERANGE: return "ERANGE";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    case ENOTEMPTY: return "ENOTEMPTY";
    case ELOOP: return "ELOOP";
    case ENODATA: return "ENODATA";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    default: {
        static char buf[16];
        snprintf(buf, sizeof buf, "E%d", e);
        return buf;
    }
    }
}

/* DIR/TAG/rel, in one of a few rotating buffers (calls take two paths). */
static const char *P(const char *rel) {
    static char bufs[4][4096];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, sizeof bufs[0], "%s/%s/%s", base, tag, rel);
    return b;
}

/* One line: "TAG WHAT: RESULT", RESULT the value or errno's name. */
static long out(long r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static long out(long r, const char *fmt, ...) {
    int e = errno;
    va_list ap;
    printf("%s ", tag);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    if (r < 0)
        printf(": %s\n", ename(e));
    else
        printf(": %ld\n", r);
    errno = e;
    return r;
}

/* What rel is (lstat, or stat through a final symlink with `follow`). */
static void st(const char *rel, int follow) {
    struct stat s;
    int r = follow ? stat(P(rel), &s) : lstat(P(rel), &s);
    const char *call = follow ? "stat" : "lstat";
    if (r < 0) {
        out(r, "%s %s", call, rel);
        return;
    }
    if (S_ISDIR(s.st_mode))
        printf("%s %s %s: mode %o owner %u:%u\n", tag, call, rel, (unsigned)s.st_mode,
               (unsigned)s.st_uid, (unsigned)s.st_gid);
    else
        printf("%s %s %s: mode %o owner %u:%u size %lld nlink %lu\n", tag, call, rel,
               (unsigned)s.st_mode, (unsigned)s.st_uid, (unsigned)s.st_gid, (long long)s.st_size,
               (unsigned long)s.st_nlink);
}

static void do_open(const char *rel, int flags, mode_t mode, const char *what) {
    int fd = open(P(rel), flags | O_CLOEXEC, mode);
    out(fd < 0 ? -1 : 0, "open %s %s", what, rel);
    if (fd >= 0)
        close(fd);
}

/* ---- the fixture, made as root with umask 0 ---- */

static void fx_dir(const char *rel, mode_t mode, uid_t u, gid_t g) {
    if (mkdir(P(rel), mode) < 0 || chown(P(rel), u, g) < 0 || chmod(P(rel), mode) < 0)
        out(-1, "fixture mkdir %s", rel);
}

static void fx_file(const char *rel, mode_t mode, uid_t u, gid_t g) {
    int fd = open(P(rel), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, "data", 4) != 4 || fchown(fd, u, g) < 0 || fchmod(fd, mode) < 0)
        out(-1, "fixture file %s", rel);
    if (fd >= 0)
        close(fd);
}

static void fx_link(const char *target, const char *rel) {
    if (symlink(target, P(rel)) < 0)
        out(-1, "fixture symlink %s", rel);
}

static void fx_xattr(const char *rel, const char *name, const char *value) {
    if (setxattr(P(rel), name, value, strlen(value), 0) < 0)
        out(-1, "fixture setxattr %s %s", rel, name);
}

static void build(void) {
    char top[4096];
    snprintf(top, sizeof top, "%s/%s", base, tag);
    if (mkdir(top, 0755) < 0)
        out(-1, "fixture mkdir .");
    static const struct {
        const char *rel;
        mode_t mode;
        uid_t u;
        gid_t g;
    } dirs[] = {
        {"d755", 0755, 0, 0},        {"d700", 0700, 0, 0},         {"d711", 0711, 0, 0},
        {"d744", 0744, 0, 0},        {"d777", 0777, 0, 0},         {"d777b", 0777, 0, 0},
        {"d1777", 01777, 0, 0},      {"d1777u", 01777, 1000, 1000}, {"u755", 0755, 1000, 1000},
        {"d555", 0555, 0, 0},        {"d333", 0333, 0, 0},         {"dsgid", 02777, 0, 100},
        {"g770", 0770, 0, 100},      {"d777/sub", 0755, 0, 0},     {"d555/sub", 0755, 0, 0},
        {"d1777/u_d", 0755, 1000, 1000}, {"d1777/n_d", 0755, 65534, 65534},
        {"d1777/r_d", 0755, 0, 0},
    };
    static const struct {
        const char *rel;
        mode_t mode;
        uid_t u;
        gid_t g;
    } files[] = {
        {"f644", 0644, 0, 0},          {"f600", 0600, 0, 0},         {"f000", 0000, 0, 0},
        {"f666", 0666, 0, 0},          {"f666t", 0666, 0, 0},        {"f060", 0060, 0, 100},
        {"f606", 0606, 0, 100},        {"f755", 0755, 0, 0},         {"f644c", 0644, 0, 0},
        {"u644", 0644, 1000, 1000},    {"u600", 0600, 1000, 1000},   {"u_sg", 0644, 1000, 0},
        {"u_own", 0644, 1000, 1000},   {"u_grp", 0644, 1000, 1000},  {"u_grp2", 0644, 1000, 1000},
        {"u_ids", 0644, 1000, 1000},   {"u_t", 0644, 1000, 1000},    {"n644", 0644, 65534, 65534},
        {"suid", 04777, 0, 0},         {"sgid", 02777, 0, 0},        {"sgidnx", 02767, 0, 0},
        {"suid_t", 04777, 0, 0},       {"suid_u", 04666, 1000, 1000}, {"suid_l", 04777, 0, 0},
        {"d755/f", 0644, 0, 0},        {"d700/f", 0644, 0, 0},       {"d711/f", 0644, 0, 0},
        {"d744/f", 0644, 0, 0},        {"d555/f", 0644, 0, 0},       {"d333/f", 0644, 0, 0},
        {"d777/r", 0644, 0, 0},        {"d777/mine", 0666, 0, 0},    {"d777/u", 0644, 1000, 1000},
        {"d1777/root_f", 0644, 0, 0},  {"d1777/root_f2", 0644, 0, 0}, {"d1777/u_f", 0644, 1000, 1000},
        {"d1777/n_f", 0644, 65534, 65534}, {"d1777/n_f2", 0644, 65534, 65534},
        {"d1777u/root_f", 0644, 0, 0}, {"u755/f", 0644, 0, 0},
    };
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++)
        fx_dir(dirs[i].rel, dirs[i].mode, dirs[i].u, dirs[i].g);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        fx_file(files[i].rel, files[i].mode, files[i].u, files[i].g);
    fx_link("f644", "l_f644");
    fx_link("d700/f", "l_d700f");
    fx_link("../f644", "d700/l");
    fx_link("../f644", "d711/l");
    fx_link("../f644", "d1777/l_root");
    fx_xattr("f644", "user.x", "root");
    fx_xattr("f600", "user.x", "root");
    fx_xattr("f666", "user.x", "root");
    fx_xattr("f644", "trusted.t", "t");
}

/* ---- the battery, as the identity ---- */

static const char *const files[] = {
    "f644",   "f600",   "f000",   "f666",    "f060",   "f606",   "f755",   "u644",    "u600",
    "n644",   "d755/f", "d700/f", "d711/f",  "d744/f", "l_f644", "l_d700f", "d700/l", "d711/l",
    "d1777/l_root",
};
static const char *const dirs[] = {"d755", "d700", "d711", "d744", "d777",
                                   "d1777", "d555", "d333", "dsgid", "g770"};

static void looks(void) {
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        const char *f = files[i];
        st(f, 1);
        st(f, 0);
        do_open(f, O_RDONLY, 0, "O_RDONLY");
        do_open(f, O_WRONLY, 0, "O_WRONLY");
        do_open(f, O_RDWR, 0, "O_RDWR");
        do_open(f, O_RDONLY | O_NOFOLLOW, 0, "O_NOFOLLOW");
        out(access(P(f), R_OK), "access R_OK %s", f);
        out(access(P(f), W_OK), "access W_OK %s", f);
        out(access(P(f), X_OK), "access X_OK %s", f);
        out(access(P(f), F_OK), "access F_OK %s", f);
        out(faccessat(AT_FDCWD, P(f), R_OK | W_OK, AT_EACCESS), "faccessat RW AT_EACCESS %s", f);
        out(faccessat(AT_FDCWD, P(f), X_OK, AT_EACCESS), "faccessat X AT_EACCESS %s", f);
    }
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        const char *d = dirs[i];
        st(d, 0);
        out(access(P(d), R_OK), "access R_OK %s", d);
        out(access(P(d), W_OK), "access W_OK %s", d);
        out(access(P(d), X_OK), "access X_OK %s", d);
        out(faccessat(AT_FDCWD, P(d), W_OK | X_OK, AT_EACCESS), "faccessat WX AT_EACCESS %s", d);
        do_open(d, O_RDONLY | O_DIRECTORY, 0, "O_DIRECTORY");
        DIR *dir = opendir(P(d));
        out(dir ? 0 : -1, "opendir %s", d);
        if (dir)
            closedir(dir);
    }
}

static void creates(void) {
    static const char *const where[] = {"d755", "d700", "d711", "d777", "d1777", "d555",
                                        "d333", "dsgid", "g770", "u755"};
    char rel[256];
    for (size_t i = 0; i < sizeof where / sizeof where[0]; i++) {
        snprintf(rel, sizeof rel, "%s/c", where[i]);
        do_open(rel, O_CREAT | O_WRONLY | O_EXCL, 0666, "O_CREAT|O_EXCL");
        st(rel, 0);
        snprintf(rel, sizeof rel, "%s/m", where[i]);
        out(mkdir(P(rel), 0777), "mkdir %s", rel);
        st(rel, 0);
    }
    /* An existing name: EEXIST before write permission on the directory. */
    do_open("d755/f", O_CREAT | O_EXCL | O_WRONLY, 0666, "O_CREAT|O_EXCL");
    do_open("d700/f", O_CREAT | O_EXCL | O_WRONLY, 0666, "O_CREAT|O_EXCL");
    do_open("f644", O_CREAT | O_WRONLY, 0666, "O_CREAT");
    do_open("f644c", O_WRONLY | O_TRUNC, 0, "O_TRUNC");
    st("f644c", 0);
    do_open("f666t", O_WRONLY | O_TRUNC, 0, "O_TRUNC");
    st("f666t", 0);
    out(mkdir(P("d755"), 0777), "mkdir %s", "d755");
    out(symlink("f644", P("d755/f")), "symlink %s", "d755/f");
    out(link(P("f666"), P("d755/f")), "link %s %s", "f666", "d755/f");
    out(symlink("f644", P("d755/sl")), "symlink %s", "d755/sl");
    out(symlink("f644", P("d777/sl")), "symlink %s", "d777/sl");
    st("d777/sl", 0);
}

static void removes(void) {
    static const char *const unlinks[] = {"d555/f",       "d700/f",      "d333/f",        "d777/r",
                                          "d1777/root_f", "d1777/u_f",   "d1777/n_f",     "d1777u/root_f",
                                          "u755/f",       "d555/nothing", "d755/f",       "d1777/l_root"};
    for (size_t i = 0; i < sizeof unlinks / sizeof unlinks[0]; i++)
        out(unlink(P(unlinks[i])), "unlink %s", unlinks[i]);
    static const char *const rmdirs[] = {"d555/sub", "d1777/u_d", "d1777/n_d", "d1777/r_d", "d700/nothing"};
    for (size_t i = 0; i < sizeof rmdirs / sizeof rmdirs[0]; i++)
        out(rmdir(P(rmdirs[i])), "rmdir %s", rmdirs[i]);
    static const char *const renames[][2] = {
        {"d1777/n_f2", "d1777/x"},      /* sticky source */
        {"d777/mine", "d1777/root_f2"}, /* sticky target */
        {"d777/u", "d755/x"},           /* no write on the target's directory */
        {"d755/f", "d777/x"},           /* none on the source's */
        {"d777/sub", "d777b/sub"},      /* a directory's "..": write on itself */
        {"d700/f", "d777/y"},           /* source unsearchable */
        {"d777/mine", "d777/mine2"},    /* plain, in a world-writable directory */
    };
    for (size_t i = 0; i < sizeof renames / sizeof renames[0]; i++)
        out(rename(P(renames[i][0]), P(renames[i][1])), "rename %s %s", renames[i][0], renames[i][1]);
    st("d777/mine2", 0);
    st("d1777/root_f2", 0);
}

static void attrs(void) {
    out(chmod(P("f644"), 0600), "chmod 600 %s", "f644");
    out(chmod(P("u644"), 0640), "chmod 640 %s", "u644");
    st("u644", 0);
    /* A group the caller is not in: S_ISGID goes, silently. */
    out(chmod(P("u_sg"), 02755), "chmod 2755 %s", "u_sg");
    st("u_sg", 0);
    out(chmod(P("l_f644"), 0600), "chmod 600 %s", "l_f644");
    out(chown(P("u_own"), 65534, -1), "chown 65534 -1 %s", "u_own");
    out(chown(P("f644"), 0, 0), "chown 0 0 %s", "f644");
    out(chown(P("f644"), -1, -1), "chown -1 -1 %s", "f644");
    out(chown(P("u_ids"), 1000, 1000), "chown 1000 1000 %s", "u_ids");
    out(chown(P("u_grp"), -1, 100), "chown -1 100 %s", "u_grp");
    out(chown(P("u_grp2"), -1, 65534), "chown -1 65534 %s", "u_grp2");
    out(lchown(P("l_f644"), -1, 100), "lchown -1 100 %s", "l_f644");
    st("u_own", 0);
    st("u_ids", 0);
    st("u_grp", 0);
    st("u_grp2", 0);
    st("l_f644", 0);

    struct timespec t[2] = {{1000, 0}, {2000, 0}}, now[2] = {{0, UTIME_NOW}, {0, UTIME_NOW}};
    struct timespec omit[2] = {{0, UTIME_OMIT}, {0, UTIME_OMIT}};
    out(utimensat(AT_FDCWD, P("f666"), NULL, 0), "utimensat NULL %s", "f666");
    out(utimensat(AT_FDCWD, P("f644"), NULL, 0), "utimensat NULL %s", "f644");
    out(utimensat(AT_FDCWD, P("f666"), now, 0), "utimensat NOW %s", "f666");
    out(utimensat(AT_FDCWD, P("f666"), t, 0), "utimensat times %s", "f666");
    out(utimensat(AT_FDCWD, P("f644"), omit, 0), "utimensat OMIT %s", "f644");
    out(utimensat(AT_FDCWD, P("u_t"), t, 0), "utimensat times %s", "u_t");
    struct stat s;
    if (stat(P("u_t"), &s) == 0)
        printf("%s u_t mtime is 2000: %d\n", tag, s.st_mtime == 2000);

    out(truncate(P("f644"), 1), "truncate 1 %s", "f644");
    out(truncate(P("f666"), 2), "truncate 2 %s", "f666");
    out(truncate(P("d711/f"), 2), "truncate 2 %s", "d711/f");
    st("f666", 0);
}

/* A write (or truncate) by whoever may write: set-ID bits go unless the
 * caller has CAP_FSETID; set-group-ID without group execute stays. */
static void set_ids(void) {
    static const char *const written[] = {"suid", "sgid", "sgidnx", "suid_u"};
    for (size_t i = 0; i < sizeof written / sizeof written[0]; i++) {
        const char *f = written[i];
        int fd = open(P(f), O_WRONLY | O_CLOEXEC);
        out(fd < 0 ? -1 : 0, "open O_WRONLY %s", f);
        if (fd >= 0) {
            out(write(fd, "x", 1), "write 1 %s", f);
            close(fd);
        }
        st(f, 0);
    }
    out(truncate(P("suid_t"), 1), "truncate 1 %s", "suid_t");
    st("suid_t", 0);
}

static void links(void) {
    /* protected_hardlinks (when on) refuses a link to a file the caller
     * does not own and cannot both read and write, or a set-ID one. */
    static const char *const sources[] = {"f600", "f644", "f666", "suid_l", "u644", "d700/f", "d755"};
    char rel[256];
    for (size_t i = 0; i < sizeof sources / sizeof sources[0]; i++) {
        snprintf(rel, sizeof rel, "d777/link%zu", i);
        out(link(P(sources[i]), P(rel)), "link %s %s", sources[i], rel);
    }
    out(link(P("f666"), P("d755/link")), "link %s %s", "f666", "d755/link");
    st("f666", 0);
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void xattrs(void) {
    static const char *const names[] = {"user.x", "trusted.t"};
    static const char *const on[] = {"f644", "f600", "f666", "d1777", "l_f644"};
    char buf[64];
    for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) {
        const char *f = on[i];
        for (size_t j = 0; j < 2; j++) {
            ssize_t n = getxattr(P(f), names[j], buf, sizeof buf);
            out(n, "getxattr %s %s", f, names[j]);
        }
        out(setxattr(P(f), "user.y", "v", 1, 0), "setxattr %s user.y", f);
        out(setxattr(P(f), "trusted.y", "v", 1, 0), "setxattr %s trusted.y", f);
        out(removexattr(P(f), "user.x"), "removexattr %s user.x", f);
        out(lsetxattr(P(f), "user.z", "v", 1, 0), "lsetxattr %s user.z", f);
        char list[256];
        ssize_t n = listxattr(P(f), list, sizeof list);
        if (n < 0) {
            out(n, "listxattr %s", f);
            continue;
        }
        /* The names sorted: each file system lists in its own order. */
        const char *name[32];
        size_t count = 0;
        for (ssize_t k = 0; k < n && count < 32; k += strlen(list + k) + 1)
            name[count++] = list + k;
        qsort(name, count, sizeof name[0], by_name);
        printf("%s listxattr %s:", tag, f);
        for (size_t k = 0; k < count; k++)
            printf(" %s", name[k]);
        printf("\n");
    }
}

static void umasks(void) {
    static const mode_t masks[] = {022, 077, 0, 027, 0777};
    char rel[256];
    for (size_t i = 0; i < sizeof masks / sizeof masks[0]; i++) {
        umask(masks[i]);
        snprintf(rel, sizeof rel, "d777/um%03o", (unsigned)masks[i]);
        do_open(rel, O_CREAT | O_WRONLY | O_EXCL, 06777, "O_CREAT 6777");
        st(rel, 0);
        snprintf(rel, sizeof rel, "d777/umd%03o", (unsigned)masks[i]);
        out(mkdir(P(rel), 07777), "mkdir 7777 %s", rel);
        st(rel, 0);
        /* In a set-group-ID directory: its group, and set-group-ID on a
         * group-executable file only for a member of that group. */
        snprintf(rel, sizeof rel, "dsgid/fum%03o", (unsigned)masks[i]);
        do_open(rel, O_CREAT | O_WRONLY | O_EXCL, 06777, "O_CREAT 6777");
        st(rel, 0);
        snprintf(rel, sizeof rel, "dsgid/um%03o", (unsigned)masks[i]);
        out(mkdir(P(rel), 0777), "mkdir 777 %s", rel);
        st(rel, 0);
    }
    umask(0);
}

static void battery(void) {
    looks();
    creates();
    attrs();
    set_ids();
    links();
    xattrs();
    umasks();
    removes();
}

/* ---- identities ---- */

static void die(const char *what) {
    fprintf(stderr, "perms: %s: %s\n", what, strerror(errno));
    exit(2);
}

static void become(uid_t ruid, uid_t euid, gid_t rgid, gid_t egid, size_t n, const gid_t *groups) {
    if (setgroups(n, groups) < 0)
        die("setgroups");
    if (setresgid(rgid, egid, 0) < 0)
        die("setresgid");
    if (setresuid(ruid, euid, 0) < 0)
        die("setresuid");
}

static void back_to_root(void) {
    if (setresuid(0, 0, 0) < 0 || setresgid(0, 0, 0) < 0 || setgroups(0, NULL) < 0)
        die("back to root");
}

/* glibc's wrappers (libcap's header declares them; a program that
 * changes its capabilities calls these, which a shim can interpose). */
int capget(cap_user_header_t header, cap_user_data_t data);
int capset(cap_user_header_t header, const cap_user_data_t data);

/* The effective capabilities: all that are permitted, less `drop`. */
static void caps_less(unsigned long long drop) {
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    if (capget(&h, d) < 0)
        die("capget");
    unsigned long long eff = ((unsigned long long)d[1].permitted << 32 | d[0].permitted) & ~drop;
    d[0].effective = (unsigned)eff;
    d[1].effective = (unsigned)(eff >> 32);
    if (capset(&h, d) < 0)
        die("capset");
}

#define CAP(c) (1ULL << (c))

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: perms DIR (as root)\n");
        return 2;
    }
    base = argv[1];
    setvbuf(stdout, NULL, _IOLBF, 0);
    umask(0);
    if (geteuid() != 0)
        die("needs root");
    tag = ".";
    if (mkdir(base, 0755) < 0)
        die(base);
    const gid_t users[] = {100};
    const gid_t u1000_groups[] = {100, 1000};

    tag = "root";
    build();
    battery();

    tag = "u1000";
    build();
    become(1000, 1000, 1000, 1000, 2, u1000_groups);
    battery();
    back_to_root();

    tag = "nobody+users";
    build();
    become(65534, 65534, 65534, 65534, 1, users);
    battery();
    back_to_root();

    tag = "nobody";
    build();
    become(65534, 65534, 65534, 65534, 0, NULL);
    battery();
    back_to_root();

    /* Real root, effective 1000: access(2) checks the real ids (and a
     * real root's capabilities), AT_EACCESS and everything else the
     * effective ones. */
    tag = "r0e1000";
    build();
    become(0, 1000, 0, 1000, 2, u1000_groups);
    battery();
    back_to_root();

    /* The file-system uid alone set apart (setfsuid): what the kernel
     * checks, not the effective uid. */
    tag = "fsuid1000";
    build();
    setfsuid(1000);
    if ((uid_t)setfsuid(-1) != 1000)
        die("setfsuid");
    battery();
    setfsuid(0);

    /* Root without the capabilities that override owners and modes. */
    tag = "root-caps";
    build();
    caps_less(CAP(CAP_CHOWN) | CAP(CAP_DAC_OVERRIDE) | CAP(CAP_DAC_READ_SEARCH) | CAP(CAP_FOWNER) |
              CAP(CAP_FSETID));
    battery();
    caps_less(0);
    back_to_root();
    return 0;
}
