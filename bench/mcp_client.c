/*
 * mcp_client: the benchmark's MCP client, in C so that the client's own cost per call is a few
 * microseconds and the figure measures the server. bench/mcp_roundtrip.py compiles and runs it
 * against every server with the same arguments.
 *
 *   mcp_client stdio CALLS WARMUP REQUEST -- COMMAND [ARGS...]
 *       spawns COMMAND, speaks newline-delimited JSON-RPC over its stdin/stdout;
 *   mcp_client http CALLS WARMUP REQUEST HOST PORT
 *       Streamable HTTP POSTs to http://HOST:PORT/mcp on one keep-alive connection.
 *
 * REQUEST is one JSON-RPC request with "%d" where the id goes. The client initializes, sends
 * notifications/initialized, makes WARMUP calls, then CALLS timed calls (one in flight at a time,
 * or MCP_CLIENT_WINDOW at a time on stdio), checks that every reply carries its id and a result
 * that is not an error, and prints "calls_per_second N". Trust: a benchmark tool; it exits non-zero
 * on anything unexpected.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define INIT                                                                                       \
    "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"     \
    "\"2025-11-25\",\"capabilities\":{},\"clientInfo\":{\"name\":\"bench\",\"version\":\"1\"}}}"
#define INITIALIZED "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}"

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("mcp_client: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("write: %s", strerror(errno));
        p += w;
        n -= (size_t)w;
    }
}

/* A growable input buffer over one fd. */
struct in {
    int fd;
    char *buf;
    size_t len, off, cap;
};

static void fill(struct in *in)
{
    if (in->off > 0) {
        memmove(in->buf, in->buf + in->off, in->len - in->off);
        in->len -= in->off;
        in->off = 0;
    }
    if (in->len == in->cap) {
        in->cap = in->cap ? in->cap * 2 : 1 << 16;
        in->buf = realloc(in->buf, in->cap);
        if (!in->buf)
            die("out of memory");
    }
    ssize_t r = read(in->fd, in->buf + in->len, in->cap - in->len);
    if (r <= 0)
        die("read: %s", r == 0 ? "EOF" : strerror(errno));
    in->len += (size_t)r;
}

/* Returns the next line (NUL-terminated, without its newline). */
static char *line(struct in *in)
{
    for (;;) {
        char *nl = memchr(in->buf + in->off, '\n', in->len - in->off);
        if (nl) {
            char *start = in->buf + in->off;
            *nl = '\0';
            in->off = (size_t)(nl - in->buf) + 1;
            return start;
        }
        fill(in);
    }
}

/* Finds needle in the n bytes at hay. */
static const char *find_n(const char *hay, size_t n, const char *needle)
{
    return memmem(hay, n, needle, strlen(needle));
}

/* Checks that reply answers id with a result that is not an error. The id is looked for at
 * either end (servers put it first or last) and the rest of the reply is scanned only on every
 * 64th call, so checking does not cost more for a longer reply than for a short one. */
static void check(const char *reply, int id)
{
    static unsigned long n_checked;
    size_t len = strlen(reply);
    char want[32];
    int n = snprintf(want, sizeof want, "\"id\":%d", id);
    size_t edge = len < 96 ? len : 96;
    const char *at = find_n(reply, edge, want);
    if (!at || (at[n] != ',' && at[n] != '}'))
        at = find_n(reply + len - edge, edge, want);
    if (!at || (at[n] != ',' && at[n] != '}'))
        die("unexpected reply to %d: %.300s", id, reply);
    if (n_checked++ % 64 == 0 &&
        (!find_n(reply, len, "\"result\"") || find_n(reply, len, "\"isError\":true")))
        die("unexpected reply to %d: %.300s", id, reply);
}

static long window = 1; /* requests in flight on stdio (MCP_CLIENT_WINDOW) */

static int run_stdio(long calls, long warmup, const char *tmpl, char **argv)
{
    int to[2], from[2];
    if (pipe(to) != 0 || pipe(from) != 0)
        die("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(to[0], 0);
        dup2(from[1], 1);
        close(to[0]);
        close(to[1]);
        close(from[0]);
        close(from[1]);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(to[0]);
    close(from[1]);
    struct in in = {.fd = from[0]};
    char req[4096];
    int n = snprintf(req, sizeof req, "%s\n", INIT);
    write_all(to[1], req, (size_t)n);
    check(line(&in), 0);
    n = snprintf(req, sizeof req, "%s\n", INITIALIZED);
    write_all(to[1], req, (size_t)n);
    for (long i = 1; i <= warmup; i++) {
        n = snprintf(req, sizeof req, tmpl, (int)i);
        req[n++] = '\n';
        write_all(to[1], req, (size_t)n);
        check(line(&in), (int)i);
    }
    /* Timed: up to window requests in flight (1: strictly sequential). Replies may come in any
     * order in general; these servers answer in order, and the id check would catch it if not. */
    double t0 = now();
    long sent = 0, got = 0;
    while (got < calls) {
        while (sent < calls && sent - got < window) {
            n = snprintf(req, sizeof req, tmpl, (int)(warmup + 1 + sent));
            req[n++] = '\n';
            write_all(to[1], req, (size_t)n);
            sent++;
        }
        check(line(&in), (int)(warmup + 1 + got));
        got++;
    }
    double dt = now() - t0;
    close(to[1]);
    int status;
    waitpid(pid, &status, 0);
    printf("calls_per_second %.0f\n", (double)calls / dt);
    free(in.buf);
    return 0;
}

/* Sends one POST and returns the response body; *sid receives Mcp-Session-Id when present. */
static char *post(int fd, struct in *in, const char *host, const char *port, const char *sid,
                  const char *body, char *sid_out, size_t sid_cap)
{
    char head[1024];
    int n = snprintf(head, sizeof head,
                     "POST /mcp HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
                     "Accept: application/json, text/event-stream\r\n"
                     "MCP-Protocol-Version: 2025-11-25\r\n%s%s%sContent-Length: %zu\r\n\r\n",
                     host, port, sid ? "Mcp-Session-Id: " : "", sid ? sid : "", sid ? "\r\n" : "",
                     strlen(body));
    write_all(fd, head, (size_t)n);
    write_all(fd, body, strlen(body));
    long clen = -1;
    int status = 0;
    for (;;) {
        char *l = line(in);
        size_t ll = strlen(l);
        if (ll && l[ll - 1] == '\r')
            l[--ll] = '\0';
        if (ll == 0)
            break;
        if (!status && sscanf(l, "HTTP/1.1 %d", &status) == 1)
            continue;
        if (strncasecmp(l, "content-length:", 15) == 0)
            clen = strtol(l + 15, NULL, 10);
        if (sid_out && strncasecmp(l, "mcp-session-id:", 15) == 0) {
            const char *v = l + 15;
            while (*v == ' ')
                v++;
            snprintf(sid_out, sid_cap, "%s", v);
        }
    }
    if (status != 200 && status != 202)
        die("HTTP status %d", status);
    if (clen < 0)
        clen = 0;
    while (in->len - in->off < (size_t)clen)
        fill(in);
    char *b = malloc((size_t)clen + 1);
    if (!b)
        die("out of memory");
    memcpy(b, in->buf + in->off, (size_t)clen);
    b[clen] = '\0';
    in->off += (size_t)clen;
    return b;
}

static int run_http(long calls, long warmup, const char *tmpl, const char *host, const char *port)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
    if (getaddrinfo(host, port, &hints, &ai) != 0)
        die("cannot resolve %s", host);
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0)
        die("connect: %s", strerror(errno));
    freeaddrinfo(ai);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, 1 /* TCP_NODELAY */, &one, sizeof one);
    struct in in = {.fd = fd};
    char sid[256] = "";
    char *b = post(fd, &in, host, port, NULL, INIT, sid, sizeof sid);
    check(b, 0);
    free(b);
    if (!sid[0])
        die("no Mcp-Session-Id");
    free(post(fd, &in, host, port, sid, INITIALIZED, NULL, 0));
    char req[4096];
    double t0 = 0;
    for (long i = 1; i <= warmup + calls; i++) {
        if (i == warmup + 1)
            t0 = now();
        snprintf(req, sizeof req, tmpl, (int)i);
        b = post(fd, &in, host, port, sid, req, NULL, 0);
        check(b, (int)i);
        free(b);
    }
    double dt = now() - t0;
    printf("calls_per_second %.0f\n", (double)calls / dt);
    close(fd);
    free(in.buf);
    return 0;
}

int main(int argc, char **argv)
{
    const char *w = getenv("MCP_CLIENT_WINDOW");
    if (w && atol(w) > 0)
        window = atol(w);
    if (argc >= 7 && strcmp(argv[1], "stdio") == 0 && strcmp(argv[5], "--") == 0)
        return run_stdio(atol(argv[2]), atol(argv[3]), argv[4], argv + 6);
    if (argc == 7 && strcmp(argv[1], "http") == 0)
        return run_http(atol(argv[2]), atol(argv[3]), argv[4], argv[5], argv[6]);
    fprintf(stderr, "usage: mcp_client stdio CALLS WARMUP REQUEST -- COMMAND [ARGS...]\n"
                    "       mcp_client http CALLS WARMUP REQUEST HOST PORT\n");
    return 2;
}
