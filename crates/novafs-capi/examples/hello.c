/* libnovafs in a few lines: make an image (if IMAGE does not exist),
 * mount it in this process, write a file durably, read it back, take a
 * snapshot, unmount.
 *
 *   cc hello.c -lnovafs -o hello && ./hello /dev/shm/hello.img
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <novafs.h>

int main(int argc, char **argv) {
    const char *image = argc > 1 ? argv[1] : "/dev/shm/hello.img";
    if (access(image, F_OK) != 0) {
        int r = novafs_format(image, novafs_minimum_size() + (64 << 20));
        if (r < 0) {
            fprintf(stderr, "format %s: %s\n", image, strerror(-r));
            return 1;
        }
    }
    int err = 0;
    Novafs *fs = novafs_mount(image, 0, &err);
    if (fs == NULL) {
        fprintf(stderr, "mount %s: %s\n", image, strerror(err));
        return 1;
    }
    int fd = novafs_open(fs, "/hello.txt", O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0) {
        fprintf(stderr, "open: %s\n", strerror(-fd));
        return 1;
    }
    /* Durable when it returns: no fsync needed (strict mode). */
    const char msg[] = "hello from C, in persistent memory\n";
    novafs_write(fs, fd, msg, sizeof msg - 1);
    char buf[64] = {0};
    ssize_t n = novafs_pread(fs, fd, buf, sizeof buf - 1, 0);
    printf("read back %zd bytes: %s", n, buf);
    novafs_close(fs, fd);
    int r = novafs_snapshot_take(fs, "hello");
    printf("snapshot \"hello\": %s\n", r == 0 ? "taken" : strerror(-r));
    return novafs_unmount(fs) == 0 ? 0 : 1;
}
