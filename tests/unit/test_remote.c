/*
 * Unit tests of base_remote (the remote runner's address and certificate pin parsers,
 * src/base/base_remote.c, docs/scale-out.md):
 *
 * - addresses: IPv4, names, bracketed IPv6, the port bounds 1 and 65535 are accepted and split;
 *   a wrong scheme, an empty host, an unbracketed ':' in the host, port 0, a leading zero, a port
 *   over 65535, a missing port, trailing bytes, an unclosed bracket and a 256-byte host are not;
 * - pins: 64 hex digits in either case, or 32 pairs joined by ':', give the bytes; 63 or 65
 *   digits, a non-hex digit, a misplaced ':' or a missing one are refused;
 * - pre-shared key texts: 32..64 bytes of hex with whitespace around give the key; fewer bytes
 *   (-2), more (-3), an odd count, a non-hex byte, a NUL or a space inside (-1) do not; identities
 *   of 1..128 bytes of [A-Za-z0-9._:@-] pass, others not;
 * - the front's handoff to the worker's loop (cs_tls_front_accept): one descriptor a message is
 *   handed back close-on-exec; none waiting is EAGAIN; a message with none, two or three is
 *   EPROTO and leaves none of them open; the front's end closed is EPIPE;
 * - PSK mode of runner_tls, on 127.0.0.1 with a real handshake (a front handing its connections
 *   to this test as the worker's loop, a link connecting to it): the same key and identity (32
 *   and 64 bytes of key) carry bytes both ways; another key on the gateway or another identity
 *   reaches nothing (no connection is handed over) and the link's reason names the pre-shared
 *   key; a short key file, a key file readable by others, a mix of both modes, a bad identity
 *   and a key path that is not a regular file fail at cs_tls_ctx_new with a message that never
 *   holds the key. (A certificate-mode gateway against a PSK worker: e2e_remote.)
 * - first flights (cs_tls_first_flight), on real ClientHellos OpenSSL's s_client sent
 *   (fuzz/corpus/tls_hello): a PSK one naming "gw" is valid when the lookup knows "gw" (and is
 *   handed exactly those bytes) and refused naming the identity when it does not; a certificate
 *   one is valid in certificate mode and refused in PSK mode (no pre-shared key); a TLS 1.2 only
 *   one is refused; every strict prefix asks for the rest (5 bytes, then the whole record);
 *   garbage is refused at its first byte; a record of length 0, a ServerHello and a ClientHello
 *   whose extensions overrun are refused.
 * - the hello answer's isolation (docs/scale-out.md): what a worker's probe found goes out
 *   through the generated encoder and comes back through the decoder as it was (sandbox, ABI,
 *   syscall reports); a worker without the sandbox states none and none and nothing else; a
 *   hello without the member, or one stating the sandbox without network enforcement, reads as
 *   no sandbox.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <netinet/in.h>

#include "base_diag.h"
#include "base_remote.h"
#include "runner.h"
#include "runner_tls.h"

static void accepts(const char *url, const char *host, const char *port)
{
    char h[CS_RUNNER_URL_HOST_MAX], p[CS_RUNNER_URL_PORT_MAX];
    if (cs_runner_url_parse(url, h, p) != 0)
        fail_msg("refused: %s", url);
    assert_string_equal(h, host);
    assert_string_equal(p, port);
}

static void refuses(const char *url)
{
    char h[CS_RUNNER_URL_HOST_MAX], p[CS_RUNNER_URL_PORT_MAX];
    if (cs_runner_url_parse(url, h, p) == 0)
        fail_msg("accepted: %s", url ? url : "(null)");
}

static void addresses(void **state)
{
    (void)state;
    accepts("tcp://10.0.0.2:7451", "10.0.0.2", "7451");
    accepts("tcp://worker-1.example.org:1", "worker-1.example.org", "1");
    accepts("tcp://[fe80::1]:65535", "fe80::1", "65535");
    accepts("tcp://under_score:80", "under_score", "80");
    refuses("http://h:80");
    refuses("tcp:/h:80");
    refuses("tcp://:80");
    refuses("tcp://a:b:80");
    refuses("tcp://h:0");
    refuses("tcp://h:080");
    refuses("tcp://h:65536");
    refuses("tcp://h:");
    refuses("tcp://h");
    refuses("tcp://h:80/");
    refuses("tcp://h:80 ");
    refuses("tcp://[::1:80");
    refuses("tcp://[]:80");
    refuses("tcp://h h:80");
    refuses(NULL);
    char big[300] = "tcp://";
    memset(big + 6, 'a', 256);
    strcpy(big + 262, ":80");
    refuses(big);
    big[6 + 255] = ':';
    strcpy(big + 6 + 255, ":80"); /* 255 bytes of host: the most there is room for */
    char h[CS_RUNNER_URL_HOST_MAX], p[CS_RUNNER_URL_PORT_MAX];
    assert_int_equal(cs_runner_url_parse(big, h, p), 0);
    assert_int_equal(strlen(h), 255);
}

static void pins(void **state)
{
    (void)state;
    unsigned char pin[CS_TLS_PIN_SIZE];
    const char *hex = "9F86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
    assert_int_equal(cs_tls_pin_parse(hex, pin), 0);
    assert_int_equal(pin[0], 0x9f);
    assert_int_equal(pin[31], 0x08);
    char colons[96];
    size_t k = 0;
    for (int i = 0; i < CS_TLS_PIN_SIZE; i++) {
        colons[k++] = hex[2 * i];
        colons[k++] = hex[2 * i + 1];
        if (i + 1 < CS_TLS_PIN_SIZE)
            colons[k++] = ':';
    }
    colons[k] = '\0';
    unsigned char pin2[CS_TLS_PIN_SIZE];
    assert_int_equal(cs_tls_pin_parse(colons, pin2), 0);
    assert_memory_equal(pin, pin2, sizeof pin);
    char bad[100];
    snprintf(bad, sizeof bad, "%.63s", hex);
    assert_int_equal(cs_tls_pin_parse(bad, pin), -1);
    snprintf(bad, sizeof bad, "%s0", hex);
    assert_int_equal(cs_tls_pin_parse(bad, pin), -1);
    snprintf(bad, sizeof bad, "%s", hex);
    bad[10] = 'g';
    assert_int_equal(cs_tls_pin_parse(bad, pin), -1);
    snprintf(bad, sizeof bad, "%s", colons);
    bad[2] = '-';
    assert_int_equal(cs_tls_pin_parse(bad, pin), -1);
    snprintf(bad, sizeof bad, "%s", colons);
    bad[1] = ':';
    assert_int_equal(cs_tls_pin_parse(bad, pin), -1);
    assert_int_equal(cs_tls_pin_parse("", pin), -1);
    assert_int_equal(cs_tls_pin_parse(NULL, pin), -1);
}

static const char key_a[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
static const char key_b[] = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

static void psk_texts(void **state)
{
    (void)state;
    unsigned char k[CS_TLS_PSK_MAX];
    size_t n = 0;
    char buf[300];
    assert_int_equal(cs_tls_psk_parse(key_a, strlen(key_a), k, &n), 0);
    assert_int_equal(n, 32);
    assert_int_equal(k[0], 0x00);
    assert_int_equal(k[31], 0xff);
    snprintf(buf, sizeof buf, "  \t%s\r\n\n", key_b);
    assert_int_equal(cs_tls_psk_parse(buf, strlen(buf), k, &n), 0);
    assert_int_equal(n, 32);
    assert_int_equal(k[0], 0xff);
    snprintf(buf, sizeof buf, "%s%s", key_a, key_b); /* 64 bytes: the most */
    assert_int_equal(cs_tls_psk_parse(buf, strlen(buf), k, &n), 0);
    assert_int_equal(n, 64);
    snprintf(buf, sizeof buf, "%s%s00", key_a, key_b);
    assert_int_equal(cs_tls_psk_parse(buf, strlen(buf), k, &n), -3);
    assert_int_equal(cs_tls_psk_parse(key_a, 62, k, &n), -2); /* 31 bytes */
    assert_int_equal(cs_tls_psk_parse(key_a, 63, k, &n), -1);
    assert_int_equal(cs_tls_psk_parse("", 0, k, &n), -2);
    assert_int_equal(cs_tls_psk_parse(NULL, 0, k, &n), -1);
    snprintf(buf, sizeof buf, "%s", key_a);
    buf[7] = 'g';
    assert_int_equal(cs_tls_psk_parse(buf, strlen(buf), k, &n), -1);
    buf[7] = ' ';
    assert_int_equal(cs_tls_psk_parse(buf, strlen(buf), k, &n), -1);
    buf[7] = '\0';
    assert_int_equal(cs_tls_psk_parse(buf, 64, k, &n), -1);

    assert_true(cs_tls_psk_identity_ok("gateway-1@worker.example:7"));
    assert_true(cs_tls_psk_identity_ok("a_b"));
    assert_false(cs_tls_psk_identity_ok(""));
    assert_false(cs_tls_psk_identity_ok(NULL));
    assert_false(cs_tls_psk_identity_ok("a b"));
    assert_false(cs_tls_psk_identity_ok("a/b"));
    assert_false(cs_tls_psk_identity_ok("\xc3\xa9"));
    memset(buf, 'a', 129);
    buf[129] = '\0';
    assert_false(cs_tls_psk_identity_ok(buf));
    buf[128] = '\0';
    assert_true(cs_tls_psk_identity_ok(buf));
}

/* ---- PSK handshakes through runner_tls ---- */

static char dir[] = "/tmp/cs-test-remote-XXXXXX";

/* A key file under dir holding text, with mode. Returns its path (static storage, per name). */
static const char *key_file(const char *name, const char *text, mode_t mode)
{
    static char paths[8][256];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, 256, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(chmod(p, mode), 0);
    return p;
}

/* The loop's end of a handoff pair (its other end goes to the front), non-blocking, as the
 * worker makes it. */
static int handoff_pair(int *front_end)
{
    int sp[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
    assert_int_equal(fcntl(sp[0], F_SETFL, O_NONBLOCK), 0);
    *front_end = sp[1];
    return sp[0];
}

static int wait_in(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms);
}

/*
 * A worker (front) with server settings and a gateway (link) with client settings on 127.0.0.1.
 * Returns 1 when bytes went both ways through a connection handed to the loop, 0 when the link
 * ended before anything reached it (why holds the link's reason).
 */
static int handshake_through(const struct cs_tls_config *server, const struct cs_tls_config *client,
                             char *why, size_t cap)
{
    struct cs_diag err = {0};
    char port[8];
    int hf;
    int ul = handoff_pair(&hf);
    struct cs_tls_ctx *sctx = cs_tls_ctx_new(server, true, &err);
    if (!sctx)
        fail_msg("server ctx: %s", err.text);
    struct cs_tls_ctx *cctx = cs_tls_ctx_new(client, false, &err);
    if (!cctx)
        fail_msg("client ctx: %s", err.text);
    struct cs_tls_front *f = cs_tls_front_start(sctx, "127.0.0.1", "0", hf, &err);
    assert_non_null(f);
    close(hf); /* the front keeps its own */
    snprintf(port, sizeof port, "%d", cs_tls_front_port(f));
    int fd = -1;
    struct cs_tls_link *l = cs_tls_link_start(cctx, "127.0.0.1", port, 5000, &fd, &err);
    assert_non_null(l);
    int ok = 0;
    /* The gateway writes first; an authenticated link brings it to the loop's end. */
    assert_int_equal(write(fd, "ping", 4), 4);
    struct pollfd p[2] = {{.fd = ul, .events = POLLIN}, {.fd = fd, .events = POLLIN}};
    assert_int_equal(poll(p, 2, 5000) > 0, 1);
    if (p[0].revents & POLLIN) {
        int c = cs_tls_front_accept(ul);
        assert_true(c >= 0);
        char b[8] = "";
        assert_int_equal(wait_in(c, 3000), 1);
        assert_int_equal(read(c, b, sizeof b), 4);
        assert_memory_equal(b, "ping", 4);
        assert_int_equal(write(c, "pong", 4), 4);
        assert_int_equal(wait_in(fd, 3000), 1);
        assert_int_equal(read(fd, b, sizeof b), 4);
        assert_memory_equal(b, "pong", 4);
        close(c);
        ok = 1;
    } else {
        /* Refused: the gateway's end sees the stream end, and nothing was handed over. */
        char b[8];
        assert_int_equal(wait_in(fd, 3000), 1);
        assert_true(read(fd, b, sizeof b) <= 0);
        assert_int_equal(wait_in(ul, 200), 0);
    }
    cs_tls_link_why(l, why, cap);
    cs_tls_link_free(l);
    close(fd);
    cs_tls_front_free(f);
    /* The front's end of the handoff went with it: the loop sees its end, not a busy wake-up. */
    assert_int_equal(cs_tls_front_accept(ul), -1);
    assert_int_equal(errno, EPIPE);
    cs_tls_ctx_free(cctx);
    cs_tls_ctx_free(sctx);
    close(ul);
    return ok;
}

/* Sends n descriptors (0..3) with one byte over sock. */
static void send_fds(int sock, const int *fds, size_t n)
{
    union {
        char buf[CMSG_SPACE(3 * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    char byte = 0;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (n) {
        msg.msg_control = ctl.buf;
        msg.msg_controllen = CMSG_SPACE(n * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(n * sizeof(int));
        memcpy(CMSG_DATA(c), fds, n * sizeof(int));
    }
    assert_int_equal(sendmsg(sock, &msg, 0), 1);
}

/* The loop's side of the handoff takes exactly one descriptor a message: none waiting is
 * EAGAIN, a message without one or with two or three (more than its buffer holds) is EPROTO
 * and leaves no descriptor open (the read ends of a pipe sent over are closed: its writer gets
 * EPIPE), one is handed back, and a front's end closed is EPIPE. */
static void handoff_messages(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    int front;
    int loop = handoff_pair(&front);
    errno = 0;
    assert_int_equal(cs_tls_front_accept(loop), -1);
    assert_int_equal(errno, EAGAIN);

    send_fds(front, NULL, 0);
    assert_int_equal(cs_tls_front_accept(loop), -1);
    assert_int_equal(errno, EPROTO);

    for (size_t n = 2; n <= 3; n++) {
        int p[2];
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        int many[3] = {p[0], p[0], p[0]};
        send_fds(front, many, n);
        close(p[0]);
        assert_int_equal(cs_tls_front_accept(loop), -1);
        assert_int_equal(errno, EPROTO);
        assert_int_equal(write(p[1], "x", 1), -1);
        assert_int_equal(errno, EPIPE);
        close(p[1]);
    }

    int sp[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    send_fds(front, &sp[1], 1);
    close(sp[1]);
    int got = cs_tls_front_accept(loop);
    assert_true(got >= 0);
    assert_int_equal(fcntl(got, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
    assert_int_equal(write(got, "hi", 2), 2);
    char b[4];
    assert_int_equal(read(sp[0], b, sizeof b), 2);
    close(got);
    close(sp[0]);

    close(front);
    assert_int_equal(cs_tls_front_accept(loop), -1);
    assert_int_equal(errno, EPIPE);
    close(loop);
}

static void psk_handshakes(void **state)
{
    (void)state;
    assert_non_null(mkdtemp(dir));
    const char *a = key_file("a.psk", key_a, 0600), *b = key_file("b.psk", key_b, 0640);
    struct cs_tls_config srv = {.psk_file = a, .psk_identity = "gw-1"};
    struct cs_tls_config cli = srv;
    char why[320];
    assert_int_equal(handshake_through(&srv, &cli, why, sizeof why), 1);
    char longest[2 * CS_TLS_PSK_MAX + 2];
    snprintf(longest, sizeof longest, "%s%s\n", key_a, key_b); /* 64 bytes */
    struct cs_tls_config big = {.psk_file = key_file("big.psk", longest, 0600),
                                .psk_identity = "gw-1"};
    assert_int_equal(handshake_through(&big, &big, why, sizeof why), 1);
    unlink(big.psk_file);

    cli.psk_file = b; /* another key */
    assert_int_equal(handshake_through(&srv, &cli, why, sizeof why), 0);
    assert_non_null(strstr(why, "pre-shared key"));
    cli.psk_file = a;
    cli.psk_identity = "gw-2"; /* another identity */
    assert_int_equal(handshake_through(&srv, &cli, why, sizeof why), 0);
    assert_non_null(strstr(why, "pre-shared key"));

    /* Bad setups: refused when the context is made, the key never in the message. */
    struct cs_diag err = {0};
    struct cs_tls_config bad = {.psk_identity = "gw"};
    bad.psk_file =
        key_file("short.psk", "00112233445566778899aabbccddeeff0011223344556677\n", 0600);
    assert_null(cs_tls_ctx_new(&bad, true, &err));
    assert_non_null(strstr(err.text, "less than 32 bytes"));
    assert_null(strstr(err.text, "0011223344"));
    memset(&err, 0, sizeof err);
    bad.psk_file = key_file("loose.psk", key_a, 0604);
    assert_null(cs_tls_ctx_new(&bad, false, &err));
    assert_non_null(strstr(err.text, "by others"));
    assert_null(strstr(err.text, key_a));
    memset(&err, 0, sizeof err);
    bad.psk_file = a;
    bad.cert = "/nonexistent.pem";
    bad.key = "/nonexistent.key";
    assert_null(cs_tls_ctx_new(&bad, false, &err));
    assert_non_null(strstr(err.text, "two modes"));
    memset(&err, 0, sizeof err);
    bad.cert = bad.key = NULL;
    bad.psk_identity = "no spaces";
    assert_null(cs_tls_ctx_new(&bad, true, &err));
    assert_non_null(strstr(err.text, "identity"));
    memset(&err, 0, sizeof err);
    bad.psk_identity = "gw";
    bad.psk_file = dir; /* not a regular file */
    assert_null(cs_tls_ctx_new(&bad, true, &err));
    assert_non_null(strstr(err.text, "regular file"));
    unlink(a);
    unlink(b);
    unlink(key_file("short.psk", "", 0600));
    unlink(key_file("loose.psk", "", 0600));
    rmdir(dir);
}

/* iso through the hello answer's encoder and decoder, as a gateway reads it. */
static struct cs_supervisor_isolation through_wire(const struct cs_supervisor_isolation *iso,
                                                   char *text, size_t cap)
{
    struct csw_runner_wire m;
    memset(&m, 0, sizeof m);
    m.tag = CSW_RUNNER_WIRE_RESPONSE;
    m.u.response.protocol = CS_RUNNER_PROTOCOL;
    m.u.response.request_id = (struct cs_str){(char *)"rrpc-1", 6};
    m.u.response.ok = true;
    m.u.response.has_result = true;
    m.u.response.result.tag = CSW_RUNNER_WIRE_RESULT_HELLO;
    struct csw_runner_wire_hello_result *h = &m.u.response.result.u.hello.data;
    h->protocol = CS_RUNNER_PROTOCOL;
    h->has_isolation = true;
    cs_runner_isolation_encode(iso, &h->isolation);
    json_t *j = NULL;
    struct cs_wire_diag diag;
    assert_int_equal(csw_runner_wire_encode(&m, &j, &diag), CS_WIRE_OK);
    char *dump = json_dumps(
        json_object_get(json_object_get(json_object_get(j, "result"), "data"), "isolation"),
        JSON_SORT_KEYS | JSON_COMPACT);
    snprintf(text, cap, "%s", dump);
    free(dump);
    struct csw_runner_wire back;
    assert_int_equal(csw_runner_wire_decode(j, &back, &diag), CS_WIRE_OK);
    json_decref(j);
    assert_int_equal(back.tag, CSW_RUNNER_WIRE_RESPONSE);
    assert_true(back.u.response.result.u.hello.data.has_isolation);
    struct cs_supervisor_isolation got;
    cs_runner_isolation_decode(&back.u.response.result.u.hello.data.isolation, &got);
    csw_runner_wire_free(&back);
    return got;
}

static size_t corpus(const char *name, unsigned char *buf, size_t cap)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", CS_TLS_HELLO_CORPUS, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

static int gw_calls;

static bool knows_gw(void *arg, const unsigned char *id, size_t n)
{
    (void)arg;
    gw_calls++;
    return n == 2 && memcmp(id, "gw", 2) == 0;
}

static bool knows_none(void *arg, const unsigned char *id, size_t n)
{
    (void)arg;
    (void)id;
    (void)n;
    return false;
}

static enum cs_tls_flight flight(const unsigned char *b, size_t n, bool psk,
                                 bool (*known)(void *, const unsigned char *, size_t), size_t *need,
                                 const char **why)
{
    *need = 0;
    *why = NULL;
    return cs_tls_first_flight(b, n, psk, known, NULL, need, why);
}

static void first_flights(void **state)
{
    (void)state;
    unsigned char psk[1024], cert[1024], old[1024];
    size_t np = corpus("psk_gw", psk, sizeof psk), nc = corpus("cert_tls13", cert, sizeof cert),
           no = corpus("tls12_only", old, sizeof old);
    size_t need;
    const char *why;
    assert_true(np > 5 && np == 5 + ((size_t)psk[3] << 8 | psk[4]));
    gw_calls = 0;
    assert_int_equal(flight(psk, np, true, knows_gw, &need, &why), CS_TLS_FLIGHT_VALID);
    assert_int_equal(gw_calls, 1);
    assert_int_equal(flight(psk, np, false, knows_none, &need, &why), CS_TLS_FLIGHT_VALID);
    assert_int_equal(flight(psk, np, true, knows_none, &need, &why), CS_TLS_FLIGHT_REFUSE);
    assert_non_null(strstr(why, "another pre-shared key identity"));
    for (size_t k = 0; k < np; k++) {
        assert_int_equal(flight(psk, k, true, knows_gw, &need, &why), CS_TLS_FLIGHT_MORE);
        assert_int_equal(need, k < 5 ? 5 : np);
    }
    assert_int_equal(flight(cert, nc, false, knows_gw, &need, &why), CS_TLS_FLIGHT_VALID);
    assert_int_equal(flight(cert, nc, true, knows_gw, &need, &why), CS_TLS_FLIGHT_REFUSE);
    assert_non_null(strstr(why, "offered no pre-shared key"));
    assert_int_equal(flight(old, no, false, knows_gw, &need, &why), CS_TLS_FLIGHT_REFUSE);
    assert_non_null(strstr(why, "TLS 1.3"));
    assert_int_equal(flight((const unsigned char *)"G", 1, true, knows_gw, &need, &why),
                     CS_TLS_FLIGHT_REFUSE);
    assert_non_null(strstr(why, "not a TLS handshake record"));
    const unsigned char empty[5] = {22, 3, 1, 0, 0};
    assert_int_equal(flight(empty, 5, false, knows_gw, &need, &why), CS_TLS_FLIGHT_REFUSE);
    assert_non_null(strstr(why, "bad length"));
    unsigned char bad[1024];
    memcpy(bad, cert, nc);
    bad[5] = 2; /* a ServerHello */
    assert_int_equal(flight(bad, nc, false, knows_gw, &need, &why), CS_TLS_FLIGHT_REFUSE);
    assert_non_null(strstr(why, "not a ClientHello"));
    /* The last extension's length one more than the bytes there. */
    memcpy(bad, cert, nc);
    size_t at = 5 + 4 + 2 + 32, sid = bad[at];
    at += 1 + sid;
    at += 2 + ((size_t)bad[at] << 8 | bad[at + 1]);
    at += 1 + bad[at];
    at += 2;
    size_t last = at;
    while (last + 4 < nc) {
        size_t len = (size_t)bad[last + 2] << 8 | bad[last + 3];
        if (last + 4 + len >= nc)
            break;
        last += 4 + len;
    }
    bad[last + 3]++;
    assert_int_equal(flight(bad, nc, false, knows_gw, &need, &why), CS_TLS_FLIGHT_REFUSE);
    assert_non_null(strstr(why, "malformed"));
}

static void hello_isolation(void **state)
{
    (void)state;
    char text[512];
    struct cs_supervisor_isolation in = {
        .sandbox = true, .landlock_abi = 6, .syscall_denials = true};
    struct cs_supervisor_isolation got = through_wire(&in, text, sizeof text);
    assert_string_equal(text, "{\"command_sandbox\":\"linux-sandbox\",\"landlock_abi\":6,"
                              "\"network_enforcement\":\"enforced\",\"syscall_denials\":true}");
    assert_true(got.sandbox);
    assert_int_equal(got.landlock_abi, 6);
    assert_true(got.syscall_denials);
    /* No sandbox: none and none, and no ABI or reports claimed even if the kernel has them. */
    struct cs_supervisor_isolation bare = {
        .sandbox = false, .landlock_abi = 4, .syscall_denials = true};
    got = through_wire(&bare, text, sizeof text);
    assert_string_equal(text, "{\"command_sandbox\":\"none\",\"network_enforcement\":\"none\"}");
    assert_false(got.sandbox);
    assert_int_equal(got.landlock_abi, 0);
    assert_false(got.syscall_denials);
    /* A hello that states nothing, or half a sandbox, is no sandbox. */
    got.sandbox = true;
    cs_runner_isolation_decode(NULL, &got);
    assert_false(got.sandbox);
    struct csw_runner_wire_worker_isolation half = {
        .command_sandbox = CSW_RUNNER_WIRE_WORKER_ISOLATION_COMMAND_SANDBOX_LINUX_SANDBOX,
        .network_enforcement = CSW_RUNNER_WIRE_WORKER_ISOLATION_NETWORK_ENFORCEMENT_NONE,
        .has_landlock_abi = true,
        .landlock_abi = 3};
    cs_runner_isolation_decode(&half, &got);
    assert_false(got.sandbox);
    assert_int_equal(got.landlock_abi, 0);
}

/* ---- the pump: a side that hung up while its bytes cannot move ---- */

static int64_t process_cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A TCP listener on 127.0.0.1 with a small receive buffer; *port gets its port. */
static int small_listener(char port[8])
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(l >= 0);
    int small = 4096;
    assert_int_equal(setsockopt(l, SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(l, 1), 0);
    socklen_t n = sizeof a;
    assert_int_equal(getsockname(l, (struct sockaddr *)&a, &n), 0);
    snprintf(port, 8, "%u", (unsigned)ntohs(a.sin_port));
    return l;
}

/* Fills fd (non-blocking) with the byte pattern i % 251 from *sent on, until it has taken
 * nothing for 200 ms: whatever reads the other end is stuck. */
static void fill(int fd, size_t *sent)
{
    unsigned char b[4096];
    for (int idle = 0; idle < 20;) {
        for (size_t i = 0; i < sizeof b; i++)
            b[i] = (unsigned char)((*sent + i) % 251);
        ssize_t n = write(fd, b, sizeof b);
        if (n > 0) {
            *sent += (size_t)n;
            idle = 0;
        } else {
            assert_int_equal(errno, EAGAIN);
            usleep(10000);
            idle++;
        }
    }
}

/* The process (the pump thread: the test's own sleeps) spends under 100 ms of CPU in 500 ms. */
static void assert_pump_sleeps(const char *while_)
{
    int64_t cpu = process_cpu_ms();
    usleep(500000);
    int64_t spent = process_cpu_ms() - cpu;
    print_message("pump CPU while %s: %lld ms of 500\n", while_, (long long)spent);
    assert_true(spent < 100);
}

/* Reads fd to its end or an error (*last: the last read's return), checking fill's pattern;
 * returns the bytes read. */
static size_t read_pattern(int fd, ssize_t *last)
{
    unsigned char b[65536];
    size_t got = 0;
    for (;;) {
        assert_int_equal(wait_in(fd, 5000), 1);
        ssize_t n = read(fd, b, sizeof b);
        *last = n;
        if (n <= 0)
            return got;
        for (ssize_t i = 0; i < n; i++)
            assert_int_equal(b[i], (got + (size_t)i) % 251);
        got += (size_t)n;
    }
}

/*
 * The gateway's pump thread (plaintext: the same loop as TLS, without the records) holds bytes
 * for the side that does not take them, and the other side hangs up. poll reports a hang-up
 * whatever it was asked, so a pump that kept polling that side woke at once, every time, and
 * spun a CPU until the stuck side moved. It must sleep instead, then deliver what it holds, in
 * order, and end the link.
 */
static void pump_sleeps_through_a_hangup(void **state)
{
    (void)state;
    struct cs_tls_config plain = {.plaintext = true};
    struct cs_diag err = {0};
    struct cs_tls_ctx *ctx = cs_tls_ctx_new(&plain, false, &err);
    assert_non_null(ctx);
    char port[8];

    /* 1. The loop's end closes while the worker reads nothing: bytes wait for the network. */
    int l = small_listener(port);
    int fd = -1;
    struct cs_tls_link *link = cs_tls_link_start(ctx, "127.0.0.1", port, 5000, &fd, &err);
    assert_non_null(link);
    int s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    assert_true(s >= 0);
    size_t sent = 0;
    fill(fd, &sent);
    close(fd); /* the pump's local side hangs up; it still holds bytes for s */
    assert_pump_sleeps("the network was stuck and the loop gone");
    /* Everything the loop wrote arrives, in order, then the end. */
    ssize_t last = -1;
    assert_int_equal(read_pattern(s, &last), sent);
    assert_int_equal(last, 0);
    cs_tls_link_free(link);
    close(s);

    /* 2. The network resets while the loop reads nothing: bytes wait for the loop. */
    fd = -1;
    link = cs_tls_link_start(ctx, "127.0.0.1", port, 5000, &fd, &err);
    assert_non_null(link);
    s = accept4(l, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    assert_true(s >= 0);
    sent = 0;
    fill(s, &sent);
    struct linger rst = {.l_onoff = 1, .l_linger = 0};
    assert_int_equal(setsockopt(s, SOL_SOCKET, SO_LINGER, &rst, sizeof rst), 0);
    close(s); /* a reset: the pump's network side reports an error and a hang-up */
    assert_pump_sleeps("the loop was stuck and the network reset");
    /* The loop then reads what the pump held, in order (a reset may drop what the kernel
     * still queued), and the end of the link. */
    size_t got = read_pattern(fd, &last);
    assert_true(got > 0 && got <= sent);
    char why[320];
    cs_tls_link_why(link, why, sizeof why);
    print_message("the link ended: %s\n", why);
    cs_tls_link_free(link);
    close(fd);
    close(l);
    cs_tls_ctx_free(ctx);
}

int main(void)
{
    /* clang-format off */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(addresses),
        cmocka_unit_test(pins),
        cmocka_unit_test(psk_texts),
        cmocka_unit_test(handoff_messages),
        cmocka_unit_test(psk_handshakes),
        cmocka_unit_test(hello_isolation),
        cmocka_unit_test(first_flights),
        cmocka_unit_test(pump_sleeps_through_a_hangup),
    };
    /* clang-format on */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
