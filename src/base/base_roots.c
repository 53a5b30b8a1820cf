/*
 * base_roots: the held workspace root descriptors (see base_roots.h).
 */
#include "base_roots.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct held {
    char *path;
    int fd;
};

static struct held *roots;
static size_t n_roots;

int cs_roots_walk(const char *abs)
{
    if (!abs || abs[0] != '/') {
        errno = EINVAL;
        return -1;
    }
    int dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return -1;
    const char *p = abs;
    while (*p) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        const char *end = strchr(p, '/');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char name[256];
        if (n >= sizeof name || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) {
            close(dir);
            errno = n >= sizeof name ? ENAMETOOLONG : EINVAL;
            return -1;
        }
        memcpy(name, p, n);
        name[n] = '\0';
        int next = openat(dir, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = errno;
        close(dir);
        if (next < 0) {
            errno = e;
            return -1;
        }
        dir = next;
        p += n;
    }
    return dir;
}

int cs_roots_add(const char *path, int fd)
{
    if (cs_roots_get(path) >= 0) {
        errno = EEXIST;
        return -1;
    }
    struct held *v = realloc(roots, (n_roots + 1) * sizeof *v);
    if (!v)
        return -1;
    roots = v;
    char *copy = strdup(path);
    int dup = copy ? fcntl(fd, F_DUPFD_CLOEXEC, 3) : -1;
    if (dup < 0) {
        int e = copy ? errno : ENOMEM;
        free(copy);
        errno = e;
        return -1;
    }
    roots[n_roots].path = copy;
    roots[n_roots].fd = dup;
    n_roots++;
    return 0;
}

int cs_roots_get(const char *path)
{
    for (size_t i = 0; path && i < n_roots; i++)
        if (strcmp(roots[i].path, path) == 0)
            return roots[i].fd;
    return -1;
}

size_t cs_roots_count(void)
{
    return n_roots;
}

const char *cs_roots_path(size_t i)
{
    return i < n_roots ? roots[i].path : NULL;
}

int cs_roots_fd(size_t i)
{
    return i < n_roots ? roots[i].fd : -1;
}

bool cs_roots_active(void)
{
    return n_roots > 0;
}

void cs_roots_clear(void)
{
    for (size_t i = 0; i < n_roots; i++) {
        free(roots[i].path);
        close(roots[i].fd);
    }
    free(roots);
    roots = NULL;
    n_roots = 0;
}
