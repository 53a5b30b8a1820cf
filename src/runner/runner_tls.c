/*
 * runner_tls: TCP and TLS 1.3 under the framed wire code, through pump threads. See
 * runner_tls.h for the design; docs/scale-out.md for why a pump and not the loop.
 */
#include "runner_tls.h"

#include "base_diag.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "base_log.h"

#define HANDSHAKE_MS 10000
#define PUMP_BUF     65536
#define MAX_CONNS    16

/* ---- contexts ---- */

#define PSK_FILE_MAX 4096

/* TLS_AES_128_GCM_SHA256, the one suite of PSK mode (its hash is the PSK's). */
static const unsigned char psk_suite[2] = {0x13, 0x01};

struct cs_tls_ctx {
    bool plaintext;
    bool psk; /* PSK mode, else certificate mode */
    SSL_CTX *ssl;
    unsigned char pin[CS_TLS_PIN_SIZE];
    unsigned char key[CS_TLS_PSK_MAX];
    size_t key_len;
    char psk_id[CS_TLS_PSK_ID_MAX + 1];
};

/* The SSL_CTX's ex_data slot holding its cs_tls_ctx; an SSL's, set by the server's PSK lookup
 * when the peer named another identity. */
static int ctx_index = -1, unknown_id_index = -1;
static pthread_once_t index_once = PTHREAD_ONCE_INIT;

static void index_init(void)
{
    ctx_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, NULL);
    unknown_id_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

static const struct cs_tls_ctx *ctx_of(SSL *ssl)
{
    return ssl ? SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), ctx_index) : NULL;
}

/* The pin is the trust: the leaf certificate's SHA-256 must equal it; the chain (self-signed,
 * usually) is not consulted. Runs inside the handshake, so a wrong peer fails the handshake. */
static int verify_pin(int preverify, X509_STORE_CTX *store)
{
    (void)preverify;
    if (X509_STORE_CTX_get_error_depth(store) != 0)
        return 1;
    SSL *ssl = X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx());
    const struct cs_tls_ctx *c = ctx_of(ssl);
    X509 *cert = X509_STORE_CTX_get_current_cert(store);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdn = 0;
    if (!c || !cert || X509_digest(cert, EVP_sha256(), md, &mdn) != 1 || mdn != CS_TLS_PIN_SIZE ||
        CRYPTO_memcmp(md, c->pin, CS_TLS_PIN_SIZE) != 0) {
        X509_STORE_CTX_set_error(store, X509_V_ERR_CERT_REJECTED);
        return 0;
    }
    X509_STORE_CTX_set_error(store, X509_V_OK);
    return 1;
}

/* PSK mode's client: any certificate is refused (a server that sends one did not use our PSK). */
static int refuse_cert(int preverify, X509_STORE_CTX *store)
{
    (void)preverify;
    X509_STORE_CTX_set_error(store, X509_V_ERR_CERT_REJECTED);
    return 0;
}

/* A session carrying the external PSK, for TLS_AES_128_GCM_SHA256 in TLS 1.3. */
static SSL_SESSION *psk_session(SSL *ssl, const struct cs_tls_ctx *c)
{
    const SSL_CIPHER *suite = SSL_CIPHER_find(ssl, psk_suite);
    SSL_SESSION *s = suite ? SSL_SESSION_new() : NULL;
    if (s && SSL_SESSION_set1_master_key(s, c->key, c->key_len) == 1 &&
        SSL_SESSION_set_cipher(s, suite) == 1 &&
        SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION) == 1)
        return s;
    SSL_SESSION_free(s);
    return NULL;
}

/* The gateway offers its identity and key. md is the hash already chosen (after a retry), or
 * NULL: with another hash than SHA-256 no PSK is offered (and the handshake then fails). */
static int psk_use(SSL *ssl, const EVP_MD *md, const unsigned char **id, size_t *idlen,
                   SSL_SESSION **sess)
{
    const struct cs_tls_ctx *c = ctx_of(ssl);
    *sess = NULL;
    if (!c)
        return 0;
    if (md && EVP_MD_get_type(md) != NID_sha256)
        return 1;
    *sess = psk_session(ssl, c);
    if (!*sess)
        return 0;
    *id = (const unsigned char *)c->psk_id;
    *idlen = strlen(c->psk_id);
    return 1;
}

/* The worker knows one identity; any other finds no key (and, with no certificate to fall back
 * on, the handshake fails). Compared in constant time over our identity's length. */
static int psk_find(SSL *ssl, const unsigned char *id, size_t idlen, SSL_SESSION **sess)
{
    const struct cs_tls_ctx *c = ctx_of(ssl);
    *sess = NULL;
    if (!c)
        return 0;
    size_t n = strlen(c->psk_id);
    if (idlen != n || CRYPTO_memcmp(id, c->psk_id, n) != 0) {
        SSL_set_ex_data(ssl, unknown_id_index, (void *)1);
        return 1;
    }
    *sess = psk_session(ssl, c);
    return *sess ? 1 : 0;
}

int cs_tls_psk_load(const char *path, unsigned char out[CS_TLS_PSK_MAX], size_t *len,
                    struct cs_diag *err)
{
    char buf[PSK_FILE_MAX + 1];
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "cannot open the pre-shared key file %s: %s", path,
                    strerror(errno));
        return -1;
    }
    int rc = -1;
    ssize_t n = -1;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "the pre-shared key file %s is not a regular file",
                    path);
    } else if (st.st_mode & (S_IROTH | S_IWOTH)) {
        cs_diag_set(err, CSW_ERROR_INTERNAL,
                    "the pre-shared key file %s is readable or writable by others "
                    "(mode %03o; chmod o-rw it)",
                    path, (unsigned)(st.st_mode & 0777));
    } else if ((n = read(fd, buf, sizeof buf)) < 0 || n > PSK_FILE_MAX) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "cannot read the pre-shared key file %s: %s", path,
                    n < 0 ? strerror(errno) : "larger than 4 KiB");
    } else {
        int p = cs_tls_psk_parse(buf, (size_t)n, out, len);
        if (p == 0)
            rc = 0;
        else
            cs_diag_set(err, CSW_ERROR_INTERNAL, "the pre-shared key file %s %s", path,
                        p == -2   ? "holds less than 32 bytes of key (make one with "
                                    "`openssl rand -hex 32`)"
                        : p == -3 ? "holds more than 64 bytes of key"
                                  : "is not hex digits (make one with `openssl rand -hex 32`)");
    }
    OPENSSL_cleanse(buf, sizeof buf);
    close(fd);
    return rc;
}

/* OpenSSL's first queued error as text (the queue is then cleared). */
static void ssl_detail(char buf[static 256])
{
    unsigned long e = ERR_get_error();
    snprintf(buf, 256, "no detail");
    if (e)
        ERR_error_string_n(e, buf, 256);
    ERR_clear_error();
}

/* A link's end, for cs_tls_link_why: what failed and OpenSSL's reason. */
static void ssl_why(char *why, size_t cap, const char *what)
{
    char buf[256];
    ssl_detail(buf);
    cs_diag_format(why, cap, "%s: %s", what, buf);
}

static void ssl_error(struct cs_diag *err, const char *what)
{
    char buf[256];
    ssl_detail(buf);
    cs_diag_set(err, CSW_ERROR_INTERNAL, "%s: %s", what, buf);
}

struct cs_tls_ctx *cs_tls_ctx_new(const struct cs_tls_config *cfg, bool server, struct cs_diag *err)
{
    struct cs_tls_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "out of memory");
        return NULL;
    }
    c->plaintext = cfg->plaintext;
    if (c->plaintext)
        return c;
    pthread_once(&index_once, index_init);
    memcpy(c->pin, cfg->peer_pin, sizeof c->pin);
    c->psk = cfg->psk_file != NULL;
    if (c->psk && (cfg->cert || cfg->key)) {
        cs_diag_set(err, CSW_ERROR_INTERNAL,
                    "a pre-shared key and a certificate are two modes: give one of them");
        goto fail;
    }
    if (c->psk && !cs_tls_psk_identity_ok(cfg->psk_identity)) {
        cs_diag_set(err, CSW_ERROR_INTERNAL,
                    "a pre-shared key needs its identity: 1..128 bytes of [A-Za-z0-9._:@-]");
        goto fail;
    }
    if (c->psk) {
        snprintf(c->psk_id, sizeof c->psk_id, "%s", cfg->psk_identity);
        if (cs_tls_psk_load(cfg->psk_file, c->key, &c->key_len, err) != 0)
            goto fail;
    }
    c->ssl = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    if (!c->ssl || ctx_index < 0 || unknown_id_index < 0) {
        ssl_error(err, "SSL_CTX_new");
        goto fail;
    }
    SSL_CTX_set_min_proto_version(c->ssl, TLS1_3_VERSION);
    SSL_CTX_set_max_proto_version(c->ssl, TLS1_3_VERSION);
    SSL_CTX_set_session_cache_mode(c->ssl, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_num_tickets(c->ssl, 0);
    SSL_CTX_set_options(c->ssl, SSL_OP_NO_TICKET);
    /* Not SSL_MODE_AUTO_RETRY: the pump works on non-blocking sockets. */
    SSL_CTX_clear_mode(c->ssl, SSL_MODE_AUTO_RETRY);
    SSL_CTX_set_ex_data(c->ssl, ctx_index, c);
    if (c->psk) {
        /* One suite whose hash is the PSK's; no certificate on either side. */
        if (SSL_CTX_set_ciphersuites(c->ssl, "TLS_AES_128_GCM_SHA256") != 1) {
            ssl_error(err, "SSL_CTX_set_ciphersuites");
            goto fail;
        }
        if (server) {
            SSL_CTX_set_psk_find_session_callback(c->ssl, psk_find);
            SSL_CTX_set_verify(c->ssl, SSL_VERIFY_NONE, NULL);
        } else {
            SSL_CTX_set_psk_use_session_callback(c->ssl, psk_use);
            SSL_CTX_set_verify(c->ssl, SSL_VERIFY_PEER, refuse_cert);
        }
        return c;
    }
    if (!cfg->cert || !cfg->key) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "TLS needs a certificate and a key (or plaintext)");
        goto fail;
    }
    if (SSL_CTX_use_certificate_chain_file(c->ssl, cfg->cert) != 1) {
        ssl_error(err, "cannot load the certificate");
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(c->ssl, cfg->key, SSL_FILETYPE_PEM) != 1) {
        ssl_error(err, "cannot load the key");
        goto fail;
    }
    if (SSL_CTX_check_private_key(c->ssl) != 1) {
        ssl_error(err, "the key does not match the certificate");
        goto fail;
    }
    SSL_CTX_set_verify(c->ssl, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, verify_pin);
    return c;
fail:
    cs_tls_ctx_free(c);
    return NULL;
}

bool cs_tls_ctx_plaintext(const struct cs_tls_ctx *c)
{
    return c->plaintext;
}

const char *cs_tls_ctx_auth(const struct cs_tls_ctx *c)
{
    return c->plaintext ? "plaintext" : c->psk ? "psk" : "certificate";
}

void cs_tls_ctx_free(struct cs_tls_ctx *c)
{
    if (!c)
        return;
    SSL_CTX_free(c->ssl);
    OPENSSL_cleanse(c->key, sizeof c->key);
    free(c);
}

/* ---- the pump ---- */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Dead links are noticed in seconds, not at the 120 s call deadline: keepalive probes after 3 s
 * of silence, 1 s apart, 3 of them; unacknowledged data gives up after 6 s. */
static void tune_tcp(int fd)
{
    int one = 1, idle = 3, intvl = 1, cnt = 3;
    unsigned int user_timeout = 6000;
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Waits for events on fd or the stop descriptor, up to ms (-1: no limit). Returns 1 ready,
 * 0 timeout, -1 stopped or error. */
static int wait_fd(int fd, short events, int stopfd, int ms)
{
    struct pollfd p[2] = {{.fd = fd, .events = events}, {.fd = stopfd, .events = POLLIN}};
    for (;;) {
        int n = poll(p, 2, ms);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || (p[1].revents & POLLIN))
            return -1;
        return n > 0 ? 1 : 0;
    }
}

/* The TLS handshake on the non-blocking fd, within HANDSHAKE_MS. Returns 0 or -1 (why set). */
static int handshake(SSL *ssl, bool server, int stopfd, char *why, size_t cap)
{
    int64_t end = now_ms() + HANDSHAKE_MS;
    for (;;) {
        ERR_clear_error();
        int r = server ? SSL_accept(ssl) : SSL_connect(ssl);
        const struct cs_tls_ctx *c = ctx_of(ssl);
        if (r == 1 && c && c->psk && !SSL_session_reused(ssl)) {
            snprintf(why, cap, "TLS handshake failed: the peer did not use our pre-shared key");
            return -1;
        }
        if (r == 1)
            return 0;
        int e = SSL_get_error(ssl, r);
        short ev = (short)(e == SSL_ERROR_WANT_READ    ? POLLIN
                           : e == SSL_ERROR_WANT_WRITE ? POLLOUT
                                                       : 0);
        if (!ev) {
            long vr = SSL_get_verify_result(ssl);
            if (c && c->psk && SSL_get_ex_data(ssl, unknown_id_index))
                snprintf(why, cap,
                         "TLS handshake failed: the peer named another pre-shared key identity");
            else if (c && c->psk && vr != X509_V_OK)
                snprintf(why, cap,
                         "TLS handshake failed: the peer sent a certificate; pre-shared key "
                         "mode accepts none");
            else if (c && c->psk && server &&
                     ERR_GET_REASON(ERR_peek_error()) == SSL_R_BINDER_DOES_NOT_VERIFY)
                ssl_why(why, cap, "TLS handshake failed: the peer's pre-shared key is not ours");
            else if (c && c->psk)
                ssl_why(why, cap,
                        server ? "TLS handshake failed (pre-shared key mode)"
                               : "TLS handshake failed (pre-shared key mode: the worker refuses "
                                 "another key or identity)");
            else if (vr != X509_V_OK)
                snprintf(why, cap,
                         "TLS handshake failed: the peer's certificate does not match "
                         "the pinned SHA-256");
            else
                ssl_why(why, cap, "TLS handshake failed");
            return -1;
        }
        int64_t left = end - now_ms();
        if (left <= 0 || wait_fd(SSL_get_fd(ssl), ev, stopfd, (int)left) <= 0) {
            snprintf(why, cap, "TLS handshake did not finish within %d s", HANDSHAKE_MS / 1000);
            return -1;
        }
    }
}

/*
 * Moves bytes both ways between net (through ssl, or plain when ssl is NULL) and local until
 * either side ends or stopfd is signalled. Both descriptors are non-blocking. An SSL_write that
 * wants to be retried is retried with the same buffer, as OpenSSL requires.
 */
static void pump(SSL *ssl, int net, int local, int stopfd, char *why, size_t cap)
{
    char *out = malloc(PUMP_BUF), *in = malloc(PUMP_BUF);
    size_t out_n = 0, in_n = 0, in_off = 0;
    if (!out || !in) {
        snprintf(why, cap, "out of memory");
        goto end;
    }
    for (;;) {
        bool progress = false, net_wants_write = false, local_wants_write = false;
        /* local -> net */
        if (out_n == 0) {
            ssize_t n = read(local, out, PUMP_BUF);
            if (n > 0) {
                out_n = (size_t)n;
                progress = true;
            } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
                break; /* the loop closed its end: the link is over */
            }
        }
        if (out_n > 0) {
            if (ssl) {
                ERR_clear_error();
                int r = SSL_write(ssl, out, (int)out_n);
                if (r > 0) {
                    out_n = 0;
                    progress = true;
                } else {
                    int e = SSL_get_error(ssl, r);
                    if (e == SSL_ERROR_WANT_WRITE)
                        net_wants_write = true;
                    else if (e != SSL_ERROR_WANT_READ) {
                        ssl_why(why, cap, "TLS write failed");
                        goto end;
                    }
                }
            } else {
                ssize_t n = send(net, out, out_n, MSG_NOSIGNAL);
                if (n > 0) {
                    memmove(out, out + n, out_n - (size_t)n);
                    out_n -= (size_t)n;
                    progress = true;
                } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
                    snprintf(why, cap, "send: %s", strerror(errno));
                    goto end;
                }
                if (out_n > 0)
                    net_wants_write = true;
            }
        }
        /* net -> local */
        if (in_n == 0) {
            if (ssl) {
                ERR_clear_error();
                int r = SSL_read(ssl, in, PUMP_BUF);
                if (r > 0) {
                    in_n = (size_t)r;
                    in_off = 0;
                    progress = true;
                } else {
                    int e = SSL_get_error(ssl, r);
                    if (e == SSL_ERROR_ZERO_RETURN) {
                        snprintf(why, cap, "the peer closed the TLS stream");
                        goto end;
                    }
                    if (e == SSL_ERROR_WANT_WRITE)
                        net_wants_write = true;
                    else if (e != SSL_ERROR_WANT_READ) {
                        if (e == SSL_ERROR_SYSCALL && errno)
                            snprintf(why, cap, "TLS read failed: %s", strerror(errno));
                        else if (e == SSL_ERROR_SYSCALL)
                            snprintf(why, cap, "the peer closed the connection");
                        else
                            ssl_why(why, cap, "TLS read failed");
                        goto end;
                    }
                }
            } else {
                ssize_t n = recv(net, in, PUMP_BUF, 0);
                if (n > 0) {
                    in_n = (size_t)n;
                    in_off = 0;
                    progress = true;
                } else if (n == 0) {
                    snprintf(why, cap, "the peer closed the connection");
                    goto end;
                } else if (errno != EAGAIN && errno != EINTR) {
                    snprintf(why, cap, "recv: %s", strerror(errno));
                    goto end;
                }
            }
        }
        if (in_n > 0) {
            ssize_t n = write(local, in + in_off, in_n);
            if (n > 0) {
                in_off += (size_t)n;
                in_n -= (size_t)n;
                progress = true;
            } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
                break; /* the loop's end is gone */
            }
            if (in_n > 0)
                local_wants_write = true;
        }
        if (progress)
            continue;
        struct pollfd p[3] = {
            {.fd = net, .events = (short)(POLLIN | (net_wants_write ? POLLOUT : 0))},
            {.fd = local,
             .events = (short)((out_n == 0 ? POLLIN : 0) | (local_wants_write ? POLLOUT : 0))},
            {.fd = stopfd, .events = POLLIN},
        };
        /* With a full inbound buffer, net readability would spin: wait for local instead. */
        if (in_n > 0)
            p[0].events = net_wants_write ? POLLOUT : 0;
        int n = poll(p, 3, -1);
        if (n < 0 && errno != EINTR) {
            snprintf(why, cap, "poll: %s", strerror(errno));
            goto end;
        }
        if (p[2].revents & POLLIN) {
            snprintf(why, cap, "stopped");
            goto end;
        }
    }
end:
    free(out);
    free(in);
}

static int tcp_connect(const char *host, const char *port, int stopfd, int timeout_ms, char *why,
                       size_t cap)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int e = getaddrinfo(host, port, &hints, &res);
    if (e != 0) {
        snprintf(why, cap, "cannot resolve %s: %s", host, gai_strerror(e));
        return -1;
    }
    int fd = -1;
    snprintf(why, cap, "cannot connect to %s:%s", host, port);
    int64_t end = now_ms() + timeout_ms;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
            continue;
        tune_tcp(fd);
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
            break;
        if (errno == EINPROGRESS) {
            int64_t left = end - now_ms();
            int soerr = 0;
            socklen_t sl = sizeof soerr;
            int w = left > 0 ? wait_fd(fd, POLLOUT, stopfd, (int)left) : 0;
            if (w > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0)
                break;
            snprintf(why, cap, "cannot connect to %s:%s: %s", host, port,
                     w == 0  ? "timed out"
                     : w < 0 ? "stopped"
                             : strerror(soerr));
        } else {
            snprintf(why, cap, "cannot connect to %s:%s: %s", host, port, strerror(errno));
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

/* ---- gateway side ---- */

struct cs_tls_link {
    struct cs_tls_ctx *ctx;
    char host[CS_RUNNER_URL_HOST_MAX], port[CS_RUNNER_URL_PORT_MAX];
    int timeout_ms;
    int local; /* the thread's end */
    int stopfd;
    pthread_t thread;
    pthread_mutex_t mu;
    char why[320];
};

static void *link_main(void *arg)
{
    struct cs_tls_link *l = arg;
    char why[320] = "";
    SSL *ssl = NULL;
    int net = tcp_connect(l->host, l->port, l->stopfd, l->timeout_ms, why, sizeof why);
    if (net < 0)
        goto end;
    if (!l->ctx->plaintext) {
        ssl = SSL_new(l->ctx->ssl);
        if (!ssl || SSL_set_fd(ssl, net) != 1) {
            ssl_why(why, sizeof why, "SSL_new");
            goto end;
        }
        if (handshake(ssl, false, l->stopfd, why, sizeof why) != 0)
            goto end;
    }
    pump(ssl, net, l->local, l->stopfd, why, sizeof why);
end:
    if (ssl) {
        (void)SSL_shutdown(ssl);
        SSL_free(ssl);
    }
    if (net >= 0)
        close(net);
    pthread_mutex_lock(&l->mu);
    snprintf(l->why, sizeof l->why, "%s", why);
    pthread_mutex_unlock(&l->mu);
    /* The loop sees its end of the stream close. */
    shutdown(l->local, SHUT_RDWR);
    return NULL;
}

struct cs_tls_link *cs_tls_link_start(struct cs_tls_ctx *ctx, const char *host, const char *port,
                                      int timeout_ms, int *fd, struct cs_diag *err)
{
    struct cs_tls_link *l = calloc(1, sizeof *l);
    int sp[2] = {-1, -1};
    if (!l) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "out of memory");
        return NULL;
    }
    l->ctx = ctx;
    l->timeout_ms = timeout_ms;
    snprintf(l->host, sizeof l->host, "%s", host);
    snprintf(l->port, sizeof l->port, "%s", port);
    l->stopfd = eventfd(0, EFD_CLOEXEC);
    if (l->stopfd < 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sp) != 0) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "socketpair: %s", strerror(errno));
        goto fail;
    }
    l->local = sp[1];
    pthread_mutex_init(&l->mu, NULL);
    /* The pump thread takes no signal: the loop owns them through signalfd. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int e = pthread_create(&l->thread, NULL, link_main, l);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != 0) {
        pthread_mutex_destroy(&l->mu);
        cs_diag_set(err, CSW_ERROR_INTERNAL, "pthread_create: %s", strerror(e));
        goto fail;
    }
    *fd = sp[0];
    return l;
fail:
    if (sp[0] >= 0)
        close(sp[0]);
    if (sp[1] >= 0)
        close(sp[1]);
    if (l->stopfd >= 0)
        close(l->stopfd);
    free(l);
    return NULL;
}

void cs_tls_link_why(struct cs_tls_link *l, char *buf, size_t cap)
{
    pthread_mutex_lock(&l->mu);
    snprintf(buf, cap, "%s", l->why);
    pthread_mutex_unlock(&l->mu);
}

void cs_tls_link_free(struct cs_tls_link *l)
{
    if (!l)
        return;
    uint64_t one = 1;
    (void)!write(l->stopfd, &one, sizeof one);
    pthread_join(l->thread, NULL);
    pthread_mutex_destroy(&l->mu);
    close(l->stopfd);
    close(l->local);
    free(l);
}

/* ---- worker side ---- */

struct front_conn {
    struct cs_tls_front *f;
    int net;
    int stopfd;
    bool used;
    pthread_t thread;
};

struct cs_tls_front {
    struct cs_tls_ctx *ctx;
    int lfd;
    int port;
    int stopfd;
    char *unix_path;
    pthread_t thread;
    pthread_mutex_t mu;
    struct front_conn conns[MAX_CONNS];
    struct front_conn *current; /* the authenticated connection bridged now */
};

static int unix_connect(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    (void)fcntl(fd, F_SETFL, O_NONBLOCK);
    return fd;
}

static void *conn_main(void *arg)
{
    struct front_conn *c = arg;
    struct cs_tls_front *f = c->f;
    char why[320] = "";
    SSL *ssl = NULL;
    int local = -1;
    if (!f->ctx->plaintext) {
        ssl = SSL_new(f->ctx->ssl);
        if (!ssl || SSL_set_fd(ssl, c->net) != 1) {
            ssl_why(why, sizeof why, "SSL_new");
            goto end;
        }
        if (handshake(ssl, true, c->stopfd, why, sizeof why) != 0) {
            cs_log(CS_LOG_WARNING, "runner connection refused", json_pack("{s:s}", "error", why));
            goto end;
        }
    }
    /* Authenticated (or plaintext by the operator's choice): the newest connection wins. */
    pthread_mutex_lock(&f->mu);
    struct front_conn *old = f->current;
    f->current = c;
    pthread_mutex_unlock(&f->mu);
    if (old) {
        uint64_t one = 1;
        (void)!write(old->stopfd, &one, sizeof one);
    }
    local = unix_connect(f->unix_path);
    if (local < 0) {
        snprintf(why, sizeof why, "cannot reach the worker's socket: %s", strerror(errno));
        goto end;
    }
    cs_log(CS_LOG_INFO, "runner connection accepted",
           json_pack("{s:b,s:s}", "tls", ssl != NULL, "auth", cs_tls_ctx_auth(f->ctx)));
    pump(ssl, c->net, local, c->stopfd, why, sizeof why);
    cs_log(CS_LOG_INFO, "runner connection ended", json_pack("{s:s}", "why", why));
end:
    if (ssl) {
        (void)SSL_shutdown(ssl);
        SSL_free(ssl);
    }
    if (local >= 0)
        close(local);
    close(c->net);
    pthread_mutex_lock(&f->mu);
    if (f->current == c)
        f->current = NULL;
    c->used = false;
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

static void *front_main(void *arg)
{
    struct cs_tls_front *f = arg;
    for (;;) {
        if (wait_fd(f->lfd, POLLIN, f->stopfd, -1) < 0)
            return NULL;
        int fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            continue;
        tune_tcp(fd);
        struct front_conn *c = NULL;
        pthread_mutex_lock(&f->mu);
        for (size_t i = 0; i < MAX_CONNS && !c; i++)
            if (!f->conns[i].used) {
                c = &f->conns[i];
                if (c->stopfd >= 0 && c->thread) {
                    pthread_join(c->thread, NULL); /* finished: used is false */
                    c->thread = 0;
                }
                c->used = true;
            }
        pthread_mutex_unlock(&f->mu);
        if (!c) {
            close(fd); /* too many handshakes at once */
            continue;
        }
        c->f = f;
        c->net = fd;
        uint64_t drain;
        while (read(c->stopfd, &drain, sizeof drain) > 0)
            ;
        if (pthread_create(&c->thread, NULL, conn_main, c) != 0) {
            close(fd);
            c->thread = 0;
            pthread_mutex_lock(&f->mu);
            c->used = false;
            pthread_mutex_unlock(&f->mu);
        }
    }
}

struct cs_tls_front *cs_tls_front_start(struct cs_tls_ctx *ctx, const char *host, const char *port,
                                        const char *unix_path, struct cs_diag *err)
{
    struct cs_tls_front *f = calloc(1, sizeof *f);
    if (!f || !(f->unix_path = strdup(unix_path))) {
        free(f);
        cs_diag_set(err, CSW_ERROR_INTERNAL, "out of memory");
        return NULL;
    }
    f->ctx = ctx;
    f->lfd = -1;
    f->stopfd = eventfd(0, EFD_CLOEXEC);
    pthread_mutex_init(&f->mu, NULL);
    for (size_t i = 0; i < MAX_CONNS; i++)
        f->conns[i].stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
                    *res = NULL;
    int e = getaddrinfo(host, port, &hints, &res);
    if (e != 0) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "cannot resolve %s: %s", host, gai_strerror(e));
        goto fail;
    }
    for (struct addrinfo *a = res; a && f->lfd < 0; a = a->ai_next) {
        int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        if (fd < 0)
            continue;
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 16) == 0) {
            f->lfd = fd;
            struct sockaddr_storage ss;
            socklen_t sl = sizeof ss;
            if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
                f->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                         : ((struct sockaddr_in *)&ss)->sin_port);
        } else {
            cs_diag_set(err, CSW_ERROR_INTERNAL, "cannot listen on %s:%s: %s", host, port,
                        strerror(errno));
            close(fd);
        }
    }
    freeaddrinfo(res);
    if (f->lfd < 0)
        goto fail;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    e = pthread_create(&f->thread, NULL, front_main, f);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != 0) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "pthread_create: %s", strerror(e));
        goto fail;
    }
    return f;
fail:
    if (f->lfd >= 0)
        close(f->lfd);
    close(f->stopfd);
    for (size_t i = 0; i < MAX_CONNS; i++)
        close(f->conns[i].stopfd);
    pthread_mutex_destroy(&f->mu);
    free(f->unix_path);
    free(f);
    return NULL;
}

int cs_tls_front_port(const struct cs_tls_front *f)
{
    return f->port;
}

void cs_tls_front_stop(struct cs_tls_front *f)
{
    if (!f)
        return;
    uint64_t one = 1;
    (void)!write(f->stopfd, &one, sizeof one);
    pthread_join(f->thread, NULL);
    close(f->lfd);
    /* Bridged connections are stopped and left to end with the process. */
    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < MAX_CONNS; i++)
        if (f->conns[i].used)
            (void)!write(f->conns[i].stopfd, &one, sizeof one);
    pthread_mutex_unlock(&f->mu);
}

void cs_tls_front_free(struct cs_tls_front *f)
{
    if (!f)
        return;
    cs_tls_front_stop(f);
    for (size_t i = 0; i < MAX_CONNS; i++) {
        if (f->conns[i].thread)
            pthread_join(f->conns[i].thread, NULL);
        close(f->conns[i].stopfd);
    }
    close(f->stopfd);
    pthread_mutex_destroy(&f->mu);
    free(f->unix_path);
    free(f);
}
