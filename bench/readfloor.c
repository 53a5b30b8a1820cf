/*
 * readfloor: the floor of bench/concurrency.py's many-client reads, measured on the same files in
 * the same run. For each file, one thread plays a server that owes this contract's answer to
 * `read` and another plays its client, over a loopback TCP connection of their own, all files at
 * once: the server pages through the file in windows of WINDOW bytes, and per window does what
 * any implementation of docs/contract (tools.md, `read`) must do at the least: read the window,
 * (with --hash) run SHA-256 over it (the version's proof, as the version cache does it), write it
 * as a JSON string (the structuredContent's `content`), write that JSON again as a JSON string
 * (the text item holds the same JSON, complete), and send both over the socket; the client reads
 * the reply by its length and asks for the next window (one byte), as an HTTP client on a
 * keep-alive connection does. The strings go through the project's own escaper (base_json.c),
 * into buffers allocated once. No JSON-RPC, no HTTP, no MCP: what is left is the copying and
 * escaping a reply of this shape costs on this machine's cores.
 *
 * Usage: readfloor [--hash] WINDOW FILE...
 * Prints one line: "bytes B seconds S" (B: file bytes delivered, S: wall time until the last
 * file is done). Exits 1 with a message on any failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base_json.h"

static size_t window;
static bool hash;

static void die(const char *what)
{
    fprintf(stderr, "readfloor: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("write");
        p += w;
        n -= (size_t)w;
    }
}

static void read_all(int fd, char *p, size_t n)
{
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            die("read");
        p += r;
        n -= (size_t)r;
    }
}

struct pair {
    const char *path;
    int sfd, cfd;
    unsigned long long bytes;
};

static void *server(void *arg)
{
    struct pair *p = arg;
    int fd = open(p->path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        die(p->path);
    char *win = malloc(window), *s = malloc(CS_JSON_QUOTE_MAX(window) + 16);
    char *reply = malloc(8 + 2 * CS_JSON_QUOTE_MAX(CS_JSON_QUOTE_MAX(window) + 16) + 64);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!win || !s || !reply || !ctx)
        die("malloc");
    for (off_t off = 0; off < st.st_size;) {
        char ask;
        read_all(p->sfd, &ask, 1);
        ssize_t n = pread(fd, win, window, off);
        if (n <= 0)
            die("pread");
        if (hash) {
            unsigned char md[EVP_MAX_MD_SIZE];
            unsigned int mdn;
            if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1 ||
                EVP_DigestUpdate(ctx, win, (size_t)n) != 1 ||
                EVP_DigestFinal_ex(ctx, md, &mdn) != 1)
                die("sha256");
        }
        size_t sn = 0;
        memcpy(s, "{\"content\":", 11);
        sn = 11 + cs_json_quote(win, (size_t)n, s + 11);
        s[sn++] = '}';
        size_t at = 8;
        memcpy(reply + at, "{\"text\":", 8);
        at += 8;
        at += cs_json_quote(s, sn, reply + at);
        memcpy(reply + at, ",\"structuredContent\":", 21);
        at += 21;
        memcpy(reply + at, s, sn);
        at += sn;
        reply[at++] = '}';
        unsigned long long len = at - 8;
        memcpy(reply, &len, 8);
        write_all(p->sfd, reply, at);
        off += n;
        p->bytes += (unsigned long long)n;
    }
    char end = 0;
    read_all(p->sfd, &end, 1);
    unsigned long long zero = 0;
    write_all(p->sfd, (const char *)&zero, 8);
    EVP_MD_CTX_free(ctx);
    free(win);
    free(s);
    free(reply);
    close(fd);
    return NULL;
}

static void *client(void *arg)
{
    struct pair *p = arg;
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    if (!buf)
        die("malloc");
    for (;;) {
        write_all(p->cfd, "n", 1);
        unsigned long long len;
        read_all(p->cfd, (char *)&len, 8);
        if (len == 0)
            break;
        if (len > cap) {
            cap = (size_t)len;
            free(buf);
            buf = malloc(cap);
            if (!buf)
                die("malloc");
        }
        read_all(p->cfd, buf, (size_t)len);
    }
    free(buf);
    return NULL;
}

/* A connected loopback TCP pair, as the gateway's HTTP clients have. */
static void tcp_pair(int *a, int *b)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(l, 1) != 0 ||
        getsockname(l, (struct sockaddr *)&sa, &sl) != 0)
        die("listen");
    *b = socket(AF_INET, SOCK_STREAM, 0);
    if (*b < 0 || connect(*b, (struct sockaddr *)&sa, sizeof sa) != 0)
        die("connect");
    *a = accept(l, NULL, NULL);
    if (*a < 0)
        die("accept");
    int one = 1;
    setsockopt(*a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(*b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    close(l);
}

int main(int argc, char **argv)
{
    int i = 1;
    if (i < argc && strcmp(argv[i], "--hash") == 0) {
        hash = true;
        i++;
    }
    if (argc - i < 2) {
        fprintf(stderr, "usage: readfloor [--hash] WINDOW FILE...\n");
        return 2;
    }
    window = strtoull(argv[i++], NULL, 10);
    if (window == 0)
        return 2;
    int n = argc - i;
    struct pair *p = calloc((size_t)n, sizeof *p);
    pthread_t *th = calloc(2 * (size_t)n, sizeof *th);
    if (!p || !th)
        die("calloc");
    for (int k = 0; k < n; k++) {
        p[k].path = argv[i + k];
        tcp_pair(&p[k].sfd, &p[k].cfd);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int k = 0; k < n; k++)
        if (pthread_create(&th[2 * k], NULL, server, &p[k]) != 0 ||
            pthread_create(&th[2 * k + 1], NULL, client, &p[k]) != 0)
            die("pthread_create");
    unsigned long long bytes = 0;
    for (int k = 0; k < 2 * n; k++)
        pthread_join(th[k], NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    for (int k = 0; k < n; k++)
        bytes += p[k].bytes;
    printf("bytes %llu seconds %.6f\n", bytes,
           (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
    return 0;
}
