/*
 * runner_tls: TCP and TLS 1.3 under the framed wire code, through pump threads. See
 * runner_tls.h for the design; docs/scale-out.md for why a pump and not the loop.
 */
#include "runner_tls.h"

#include "base_diag.h"

#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
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
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "base_log.h"

#define HANDSHAKE_MS 10000 /* the gateway's side */
#define PUMP_BUF     65536

/* The worker before authentication (docs/contract/runtime.md, "The remote worker before
 * authentication"; docs/scale-out.md). */
#define HS_SLOTS       16   /* handshakes at once, the reserved one included */
#define HS_PER_ADDR    4    /* unauthenticated connections of one source address at once */
#define FIRST_BYTES_MS 2000 /* to send the first bytes */
#define HS_MS          5000 /* to finish the handshake, from the accept */
#define PENDING_MAX    256  /* connections waiting for their first flight */
#define BRIDGE_MAX     8    /* authenticated connections bridged at once (one per gateway) */
#define CONNS_MAX      (HS_SLOTS + BRIDGE_MAX)
#define ACCEPT_BURST   64
#define REFUSAL_LOGS   10 /* refusal lines a second at most; the rest are counted */

/* ---- contexts ---- */

#define PSK_FILE_MAX  4096
#define KEYS_FILE_MAX 65536

/* TLS_AES_128_GCM_SHA256, the one suite of PSK mode (its hash is the PSK's). */
static const unsigned char psk_suite[2] = {0x13, 0x01};

struct psk_entry {
    char id[CS_TLS_PSK_ID_MAX + 1];
    unsigned char key[CS_TLS_PSK_MAX];
    size_t key_len;
};

struct psk_set {
    size_t n;
    struct psk_entry e[CS_TLS_PSK_KEYS_MAX];
};

struct cs_tls_ctx {
    bool plaintext;
    bool psk; /* PSK mode, else certificate mode */
    SSL_CTX *ssl;
    unsigned char pins[CS_TLS_PINS_MAX][CS_TLS_PIN_SIZE];
    size_t n_pins;
    /* PSK mode: the identities and keys (one for a gateway), replaced whole by a reload. */
    pthread_mutex_t mu;
    struct psk_set *keys;
    char *psk_file, *psk_id, *keys_file; /* where they come from, for a reload */
};

/* The SSL_CTX's ex_data slot holding its cs_tls_ctx; an SSL's, set by the server's PSK lookup
 * when the peer named another identity; an SSL's buffer (CS_TLS_PSK_ID_MAX + 1 bytes) that the
 * lookup fills with the identity it found. */
static int ctx_index = -1, unknown_id_index = -1, found_id_index = -1;
static pthread_once_t index_once = PTHREAD_ONCE_INIT;

static void index_init(void)
{
    ctx_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, NULL);
    unknown_id_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
    found_id_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

static struct cs_tls_ctx *ctx_of(SSL *ssl)
{
    return ssl ? SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), ctx_index) : NULL;
}

/* The pin is the trust: the leaf certificate's SHA-256 must equal one of the pins; the chain
 * (self-signed, usually) is not consulted. Runs inside the handshake, so a wrong peer fails the
 * handshake itself. */
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
    bool ok = false;
    if (c && cert && X509_digest(cert, EVP_sha256(), md, &mdn) == 1 && mdn == CS_TLS_PIN_SIZE)
        for (size_t i = 0; i < c->n_pins; i++)
            ok |= CRYPTO_memcmp(md, c->pins[i], CS_TLS_PIN_SIZE) == 0;
    if (!ok) {
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

/* A session carrying an external PSK, for TLS_AES_128_GCM_SHA256 in TLS 1.3. */
static SSL_SESSION *psk_session(SSL *ssl, const unsigned char *key, size_t key_len)
{
    const SSL_CIPHER *suite = SSL_CIPHER_find(ssl, psk_suite);
    SSL_SESSION *s = suite ? SSL_SESSION_new() : NULL;
    if (s && SSL_SESSION_set1_master_key(s, key, key_len) == 1 &&
        SSL_SESSION_set_cipher(s, suite) == 1 &&
        SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION) == 1)
        return s;
    SSL_SESSION_free(s);
    return NULL;
}

/* The entry of identity id (n bytes) in set, or NULL. Identities are not secret. */
static const struct psk_entry *psk_lookup(const struct psk_set *set, const unsigned char *id,
                                          size_t n)
{
    for (size_t i = 0; set && i < set->n; i++)
        if (strlen(set->e[i].id) == n && memcmp(set->e[i].id, id, n) == 0)
            return &set->e[i];
    return NULL;
}

/* The gateway offers its identity and key. md is the hash already chosen (after a retry), or
 * NULL: with another hash than SHA-256 no PSK is offered (and the handshake then fails). */
static int psk_use(SSL *ssl, const EVP_MD *md, const unsigned char **id, size_t *idlen,
                   SSL_SESSION **sess)
{
    const struct cs_tls_ctx *c = ctx_of(ssl);
    *sess = NULL;
    if (!c || !c->keys || c->keys->n == 0)
        return 0;
    if (md && EVP_MD_get_type(md) != NID_sha256)
        return 1;
    /* A gateway's set is never reloaded: it holds its one identity for the context's life. */
    const struct psk_entry *e = &c->keys->e[0];
    *sess = psk_session(ssl, e->key, e->key_len);
    if (!*sess)
        return 0;
    *id = (const unsigned char *)e->id;
    *idlen = strlen(e->id);
    return 1;
}

/* The worker knows its list of identities; any other finds no key (and, with no certificate to
 * fall back on, the handshake fails). The identity found is copied for the connection. */
static int psk_find(SSL *ssl, const unsigned char *id, size_t idlen, SSL_SESSION **sess)
{
    struct cs_tls_ctx *c = ctx_of(ssl);
    *sess = NULL;
    if (!c)
        return 0;
    pthread_mutex_lock(&c->mu);
    const struct psk_entry *e = psk_lookup(c->keys, id, idlen);
    if (!e) {
        pthread_mutex_unlock(&c->mu);
        SSL_set_ex_data(ssl, unknown_id_index, (void *)1);
        return 1;
    }
    *sess = psk_session(ssl, e->key, e->key_len);
    char *found = SSL_get_ex_data(ssl, found_id_index);
    if (found)
        snprintf(found, CS_TLS_PSK_ID_MAX + 1, "%s", e->id);
    pthread_mutex_unlock(&c->mu);
    return *sess ? 1 : 0;
}

/* Reads a key file (regular, at most max bytes, no permission for others) into buf (max + 1
 * bytes). what names it in errors. Returns the byte count, or -1 with err set. */
static ssize_t read_key_file(const char *path, const char *what, char *buf, size_t max,
                             struct cs_diag *err)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "cannot open the %s %s: %s", what, path,
                    strerror(errno));
        return -1;
    }
    ssize_t n = -1;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "the %s %s is not a regular file", what, path);
    } else if (st.st_mode & (S_IROTH | S_IWOTH)) {
        cs_diag_set(err, CSW_ERROR_INTERNAL,
                    "the %s %s is readable or writable by others (mode %03o; chmod o-rw it)", what,
                    path, (unsigned)(st.st_mode & 0777));
    } else if ((n = read(fd, buf, max + 1)) < 0 || (size_t)n > max) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "cannot read the %s %s: %s", what, path,
                    n < 0                ? strerror(errno)
                    : max > PSK_FILE_MAX ? "larger than 64 KiB"
                                         : "larger than 4 KiB");
        n = -1;
    }
    close(fd);
    return n;
}

static const char *psk_fault(int p)
{
    return p == -2   ? "holds less than 32 bytes of key (make one with `openssl rand -hex 32`)"
           : p == -3 ? "holds more than 64 bytes of key"
                     : "is not hex digits (make one with `openssl rand -hex 32`)";
}

int cs_tls_psk_load(const char *path, unsigned char out[CS_TLS_PSK_MAX], size_t *len,
                    struct cs_diag *err)
{
    char buf[PSK_FILE_MAX + 1];
    int rc = -1;
    ssize_t n = read_key_file(path, "pre-shared key file", buf, PSK_FILE_MAX, err);
    if (n >= 0) {
        int p = cs_tls_psk_parse(buf, (size_t)n, out, len);
        if (p == 0)
            rc = 0;
        else
            cs_diag_set(err, CSW_ERROR_INTERNAL, "the pre-shared key file %s %s", path,
                        psk_fault(p));
    }
    OPENSSL_cleanse(buf, sizeof buf);
    return rc;
}

/* Adds identity id with the key text hex (n bytes) to set. what/line name the place in errors
 * (never the key). Returns 0 or -1 with err set. */
static int psk_add(struct psk_set *set, const char *id, size_t idn, const char *hex, size_t n,
                   const char *what, size_t line, struct cs_diag *err)
{
    char name[CS_TLS_PSK_ID_MAX + 2];
    char where[64] = "";
    if (line)
        snprintf(where, sizeof where, " line %zu", line);
    if (idn == 0 || idn > CS_TLS_PSK_ID_MAX) {
        cs_diag_set(err, CSW_ERROR_INTERNAL,
                    "%s%s: the identity must be 1..128 bytes of [A-Za-z0-9._:@-]", what, where);
        return -1;
    }
    memcpy(name, id, idn);
    name[idn] = '\0';
    if (!cs_tls_psk_identity_ok(name)) {
        cs_diag_set(err, CSW_ERROR_INTERNAL,
                    "%s%s: the identity must be 1..128 bytes of [A-Za-z0-9._:@-]", what, where);
        return -1;
    }
    if (psk_lookup(set, (const unsigned char *)name, idn)) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "%s%s: the identity %s is given twice", what, where,
                    name);
        return -1;
    }
    if (set->n >= CS_TLS_PSK_KEYS_MAX) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "%s%s: more than %d identities", what, where,
                    CS_TLS_PSK_KEYS_MAX);
        return -1;
    }
    struct psk_entry *e = &set->e[set->n];
    int p = cs_tls_psk_parse(hex, n, e->key, &e->key_len);
    if (p != 0) {
        OPENSSL_cleanse(e, sizeof *e);
        cs_diag_set(err, CSW_ERROR_INTERNAL, "%s%s (identity %s) %s", what, where, name,
                    psk_fault(p));
        return -1;
    }
    memcpy(e->id, name, idn + 1); /* idn <= CS_TLS_PSK_ID_MAX, checked above */
    set->n++;
    return 0;
}

/* The keys file: one `IDENTITY:HEXKEY` a line; blank lines and lines starting with '#' are
 * skipped. The identity may hold ':' (the key never does): it ends at the last one. */
static int keys_file_load(struct psk_set *set, const char *path, struct cs_diag *err)
{
    char *buf = malloc(KEYS_FILE_MAX + 1);
    char what[320];
    int rc = -1;
    if (!buf) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "out of memory");
        return -1;
    }
    snprintf(what, sizeof what, "the pre-shared keys file %s", path);
    ssize_t n = read_key_file(path, "pre-shared keys file", buf, KEYS_FILE_MAX, err);
    if (n < 0)
        goto out;
    size_t line = 0;
    for (size_t at = 0; at < (size_t)n;) {
        const char *s = buf + at;
        const char *nl = memchr(s, '\n', (size_t)n - at);
        size_t len = nl ? (size_t)(nl - s) : (size_t)n - at;
        at += len + 1;
        line++;
        while (len > 0 && (s[len - 1] == '\r' || s[len - 1] == ' ' || s[len - 1] == '\t'))
            len--;
        while (len > 0 && (*s == ' ' || *s == '\t')) {
            s++;
            len--;
        }
        if (len == 0 || *s == '#')
            continue;
        const char *colon = NULL;
        for (size_t i = 0; i < len; i++)
            if (s[i] == ':')
                colon = s + i;
        if (!colon) {
            cs_diag_set(err, CSW_ERROR_INTERNAL,
                        "%s line %zu: not IDENTITY:HEXKEY (make a key with `openssl rand -hex "
                        "32`)",
                        what, line);
            goto out;
        }
        if (psk_add(set, s, (size_t)(colon - s), colon + 1, len - (size_t)(colon - s) - 1, what,
                    line, err) != 0)
            goto out;
    }
    if (set->n == 0) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "%s holds no IDENTITY:HEXKEY line", what);
        goto out;
    }
    rc = 0;
out:
    OPENSSL_cleanse(buf, KEYS_FILE_MAX + 1);
    free(buf);
    return rc;
}

/* A new set from the context's sources: the key file with its identity, then the keys file. */
static struct psk_set *keys_load(const struct cs_tls_ctx *c, struct cs_diag *err)
{
    struct psk_set *set = calloc(1, sizeof *set);
    if (!set) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "out of memory");
        return NULL;
    }
    if (c->psk_file) {
        struct psk_entry *e = &set->e[0];
        if (cs_tls_psk_load(c->psk_file, e->key, &e->key_len, err) != 0)
            goto fail;
        snprintf(e->id, sizeof e->id, "%s", c->psk_id);
        set->n = 1;
    }
    if (c->keys_file && keys_file_load(set, c->keys_file, err) != 0)
        goto fail;
    return set;
fail:
    OPENSSL_cleanse(set, sizeof *set);
    free(set);
    return NULL;
}

static void keys_free(struct psk_set *set)
{
    if (!set)
        return;
    OPENSSL_cleanse(set, sizeof *set);
    free(set);
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
    pthread_mutex_init(&c->mu, NULL);
    c->plaintext = cfg->plaintext;
    if (c->plaintext)
        return c;
    pthread_once(&index_once, index_init);
    memcpy(c->pins[0], cfg->peer_pin, CS_TLS_PIN_SIZE);
    c->n_pins = 1;
    if (cfg->n_more_pins > CS_TLS_PINS_MAX - 1 || (!server && cfg->n_more_pins)) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "at most %d certificate pins (a gateway: one)",
                    CS_TLS_PINS_MAX);
        goto fail;
    }
    for (size_t i = 0; i < cfg->n_more_pins; i++)
        memcpy(c->pins[c->n_pins++], cfg->more_pins[i], CS_TLS_PIN_SIZE);
    c->psk = cfg->psk_file != NULL || cfg->psk_keys_file != NULL;
    if (c->psk && (cfg->cert || cfg->key)) {
        cs_diag_set(err, CSW_ERROR_INTERNAL,
                    "a pre-shared key and a certificate are two modes: give one of them");
        goto fail;
    }
    if (c->psk && cfg->psk_file && !cs_tls_psk_identity_ok(cfg->psk_identity)) {
        cs_diag_set(err, CSW_ERROR_INTERNAL,
                    "a pre-shared key needs its identity: 1..128 bytes of [A-Za-z0-9._:@-]");
        goto fail;
    }
    if (c->psk && !server && (cfg->psk_keys_file || !cfg->psk_file)) {
        cs_diag_set(err, CSW_ERROR_INTERNAL,
                    "a gateway holds one pre-shared key and its identity, not a keys file");
        goto fail;
    }
    if (c->psk) {
        if ((cfg->psk_file && (!(c->psk_file = strdup(cfg->psk_file)) ||
                               !(c->psk_id = strdup(cfg->psk_identity)))) ||
            (cfg->psk_keys_file && !(c->keys_file = strdup(cfg->psk_keys_file)))) {
            cs_diag_set(err, CSW_ERROR_INTERNAL, "out of memory");
            goto fail;
        }
        if (!(c->keys = keys_load(c, err)))
            goto fail;
    }
    c->ssl = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    if (!c->ssl || ctx_index < 0 || unknown_id_index < 0 || found_id_index < 0) {
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

int cs_tls_ctx_reload(struct cs_tls_ctx *c, size_t *n, struct cs_diag *err)
{
    if (!c->psk) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "only pre-shared keys are reloaded");
        return -1;
    }
    struct psk_set *set = keys_load(c, err);
    if (!set)
        return -1;
    pthread_mutex_lock(&c->mu);
    struct psk_set *old = c->keys;
    c->keys = set;
    *n = set->n;
    pthread_mutex_unlock(&c->mu);
    keys_free(old);
    return 0;
}

/* Whether identity id is in the worker's set now. */
static bool ctx_knows(struct cs_tls_ctx *c, const char *id)
{
    pthread_mutex_lock(&c->mu);
    bool known = psk_lookup(c->keys, (const unsigned char *)id, strlen(id)) != NULL;
    pthread_mutex_unlock(&c->mu);
    return known;
}

void cs_tls_ctx_free(struct cs_tls_ctx *c)
{
    if (!c)
        return;
    SSL_CTX_free(c->ssl);
    keys_free(c->keys);
    free(c->psk_file);
    free(c->psk_id);
    free(c->keys_file);
    pthread_mutex_destroy(&c->mu);
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

/* The TLS handshake on the non-blocking fd, until end (now_ms; limit_ms is what the message
 * says). Returns 0 or -1 (why set). */
static int handshake(SSL *ssl, bool server, int stopfd, int64_t end, int limit_ms, char *why,
                     size_t cap)
{
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
            snprintf(why, cap, "TLS handshake did not finish within %d s", limit_ms / 1000);
            return -1;
        }
    }
}

/*
 * Moves bytes both ways between net (through ssl, or plain when ssl is NULL) and local until
 * either side ends or stopfd is signalled. Both descriptors are non-blocking. An SSL_write that
 * wants to be retried is retried with the same buffer, as OpenSSL requires.
 *
 * A side is read again only once poll says it is readable, or (net) OpenSSL holds bytes of it
 * already: a read that came back short drained it, and poll is level-triggered, so nothing
 * waiting is missed. Each message then costs a poll, one read and one write; retrying both
 * reads until EAGAIN cost four more system calls a message, each 1.4 us on a paravirtualized
 * guest (issue 33).
 */
static void pump(SSL *ssl, int net, int local, int stopfd, char *why, size_t cap)
{
    char *out = malloc(PUMP_BUF), *in = malloc(PUMP_BUF);
    size_t out_n = 0, in_n = 0, in_off = 0;
    bool net_readable = true, local_readable = true, write_wants_read = false;
    if (!out || !in) {
        snprintf(why, cap, "out of memory");
        goto end;
    }
    if (ssl)
        SSL_set_read_ahead(ssl, 1); /* a record's header and body in one read */
    for (;;) {
        bool progress = false, net_wants_write = false, local_wants_write = false;
        /* local -> net */
        if (out_n == 0 && local_readable) {
            ssize_t n = read(local, out, PUMP_BUF);
            if (n > 0) {
                out_n = (size_t)n;
                progress = true;
                local_readable = (size_t)n == PUMP_BUF;
            } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
                break; /* the loop closed its end: the link is over */
            } else if (errno == EAGAIN) {
                local_readable = false;
            }
        }
        if (out_n > 0) {
            if (ssl) {
                ERR_clear_error();
                int r = SSL_write(ssl, out, (int)out_n);
                write_wants_read = false;
                if (r > 0) {
                    out_n = 0;
                    progress = true;
                } else {
                    int e = SSL_get_error(ssl, r);
                    if (e == SSL_ERROR_WANT_WRITE)
                        net_wants_write = true;
                    else if (e == SSL_ERROR_WANT_READ)
                        write_wants_read = true;
                    else {
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
        if (in_n == 0 && (net_readable || (ssl && SSL_has_pending(ssl)))) {
            if (ssl) {
                ERR_clear_error();
                int r = SSL_read(ssl, in, PUMP_BUF);
                if (r > 0) {
                    in_n = (size_t)r;
                    in_off = 0;
                    progress = true;
                    net_readable = false; /* poll tells when the socket has more */
                } else {
                    int e = SSL_get_error(ssl, r);
                    if (e == SSL_ERROR_ZERO_RETURN) {
                        snprintf(why, cap, "the peer closed the TLS stream");
                        goto end;
                    }
                    if (e == SSL_ERROR_WANT_WRITE)
                        net_wants_write = true;
                    else if (e == SSL_ERROR_WANT_READ)
                        net_readable = false;
                    else {
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
                    net_readable = (size_t)n == PUMP_BUF;
                } else if (n == 0) {
                    snprintf(why, cap, "the peer closed the connection");
                    goto end;
                } else if (errno == EAGAIN) {
                    net_readable = false;
                } else if (errno != EINTR) {
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
        short net_events =
            (short)((in_n == 0 || write_wants_read ? POLLIN : 0) | (net_wants_write ? POLLOUT : 0));
        short local_events = (short)((out_n == 0 ? POLLIN : 0) | (local_wants_write ? POLLOUT : 0));
        /* A side nothing is asked of is left out: poll reports a hang-up or an error whatever
         * it was asked, and a side that hung up while the other cannot take its bytes would
         * wake this loop at once, every time (a spinning thread). It is read again, and its
         * end seen, once the bytes it is waiting behind have moved. */
        struct pollfd p[3] = {
            {.fd = net_events ? net : -1, .events = net_events},
            {.fd = local_events ? local : -1, .events = local_events},
            {.fd = stopfd, .events = POLLIN},
        };
        int n = poll(p, 3, -1);
        if (n < 0 && errno != EINTR) {
            snprintf(why, cap, "poll: %s", strerror(errno));
            goto end;
        }
        if (p[2].revents & POLLIN) {
            snprintf(why, cap, "stopped");
            goto end;
        }
        /* An error or hang-up is read as such by the next read. */
        if (p[0].revents & (POLLIN | POLLHUP | POLLERR))
            net_readable = true;
        if (p[1].revents & (POLLIN | POLLHUP | POLLERR))
            local_readable = true;
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
        if (handshake(ssl, false, l->stopfd, now_ms() + HANDSHAKE_MS, HANDSHAKE_MS, why,
                      sizeof why) != 0)
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

/*
 * Before authentication (docs/scale-out.md, "Before authentication"). The accept thread holds
 * every new connection itself, without a thread, until its first flight is in: it peeks
 * (MSG_PEEK, with SO_RCVLOWAT set to the bytes still missing, so a partial record never wakes
 * it) and reads the ClientHello far enough to judge it. Garbage, another identity or no
 * pre-shared key is closed at once; silence for FIRST_BYTES_MS, or no whole ClientHello within
 * HS_MS, too. A judged connection gets a handshake thread: HS_SLOTS - 1 general slots, at most
 * HS_PER_ADDR unauthenticated connections from one source address (waiting or in a general
 * slot), and one reserved slot only a valid ClientHello (our identity; a well-formed TLS 1.3
 * one in certificate mode) may take. The handshake must end HS_MS after the accept.
 */

#define FLIGHT_MORE     CS_TLS_FLIGHT_MORE
#define FLIGHT_VALID    CS_TLS_FLIGHT_VALID
#define FLIGHT_ORDINARY CS_TLS_FLIGHT_ORDINARY
#define FLIGHT_REFUSE   CS_TLS_FLIGHT_REFUSE

static bool ctx_knows_n(void *arg, const unsigned char *id, size_t n)
{
    struct cs_tls_ctx *c = arg;
    pthread_mutex_lock(&c->mu);
    bool known = psk_lookup(c->keys, id, n) != NULL;
    pthread_mutex_unlock(&c->mu);
    return known;
}

struct front_conn {
    struct cs_tls_front *f;
    int net;
    int stopfd;
    bool used;        /* its thread runs (or ended and is not joined yet) */
    bool joinable;    /* a thread was started on it */
    bool handshaking; /* holds a handshake slot */
    bool reserved;    /* ... the reserved one */
    bool revoked;     /* its identity was removed by a reload */
    unsigned char addr[16];
    int64_t deadline;
    char identity[CS_TLS_PSK_ID_MAX + 1];
    pthread_t thread;
};

/* A connection waiting for its first flight (the accept thread's own). */
struct pending {
    int fd;
    unsigned char addr[16];
    int64_t t0; /* accepted */
    bool bytes; /* sent something */
    int cls;    /* enum flight: FLIGHT_MORE until judged */
};

struct cs_tls_front {
    struct cs_tls_ctx *ctx;
    int lfd;
    int port;
    int stopfd;
    int wakefd;  /* a handshake slot came free */
    int handoff; /* ours: each bridged connection's loop end goes to the worker's loop on it */
    pthread_t thread;
    pthread_mutex_t mu; /* conns, the slot counts, the refusal log */
    struct front_conn conns[CONNS_MAX];
    size_t hs_general;
    bool hs_reserved;
    int64_t log_sec;
    int log_n;
    unsigned long log_unlogged;
    /* the accept thread's */
    struct pending pend[PENDING_MAX];
    size_t npend;
    unsigned char peek[5 + 16384];
};

/* A source address as 16 bytes (IPv4 as IPv4-mapped IPv6). */
static void addr_key(const struct sockaddr_storage *ss, unsigned char out[16])
{
    memset(out, 0, 16);
    if (ss->ss_family == AF_INET6) {
        memcpy(out, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
    } else if (ss->ss_family == AF_INET) {
        out[10] = out[11] = 0xff;
        memcpy(out + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
    }
}

static void addr_text(const unsigned char a[16], char buf[static INET6_ADDRSTRLEN])
{
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(a, mapped, 12) == 0)
        inet_ntop(AF_INET, a + 12, buf, INET6_ADDRSTRLEN);
    else
        inet_ntop(AF_INET6, a, buf, INET6_ADDRSTRLEN);
}

/* Logs a refused connection, at most REFUSAL_LOGS lines a second; the next line logged counts
 * the ones that were not. */
static void refusal(struct cs_tls_front *f, const unsigned char addr[16], const char *why)
{
    int64_t sec = now_ms() / 1000;
    unsigned long unlogged = 0;
    pthread_mutex_lock(&f->mu);
    if (sec != f->log_sec) {
        f->log_sec = sec;
        f->log_n = 0;
    }
    bool log = f->log_n < REFUSAL_LOGS;
    if (log) {
        f->log_n++;
        unlogged = f->log_unlogged;
        f->log_unlogged = 0;
    } else {
        f->log_unlogged++;
    }
    pthread_mutex_unlock(&f->mu);
    if (!log)
        return;
    char peer[INET6_ADDRSTRLEN];
    addr_text(addr, peer);
    cs_log(CS_LOG_WARNING, "runner connection refused",
           json_pack("{s:s,s:s,s:I}", "error", why, "peer", peer, "unlogged_refusals",
                     (json_int_t)unlogged));
}

static void wake(struct cs_tls_front *f)
{
    uint64_t one = 1;
    (void)!write(f->wakefd, &one, sizeof one);
}

/* The connection leaves its handshake slot (under f->mu). */
static void slot_release(struct cs_tls_front *f, struct front_conn *c)
{
    if (!c->handshaking)
        return;
    c->handshaking = false;
    if (c->reserved)
        f->hs_reserved = false;
    else
        f->hs_general--;
    c->reserved = false;
}

/* One descriptor as SCM_RIGHTS with one byte of data (a message of its own on SEQPACKET). */
union one_fd {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
};

/* A new connection to the worker's loop: one end of a fresh socketpair (ours, non-blocking),
 * the other sent over the handoff. Returns the descriptor or -1 with errno set. */
static int worker_connect(struct cs_tls_front *f)
{
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0)
        return -1;
    char byte = 0;
    union one_fd ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &sp[1], sizeof(int));
    ssize_t r;
    do
        r = sendmsg(f->handoff, &msg, MSG_NOSIGNAL); /* a loop that is gone: EPIPE */
    while (r < 0 && errno == EINTR);
    int e = r == 1 ? 0 : r < 0 ? errno : EPIPE;
    close(sp[1]);
    if (e) {
        close(sp[0]);
        errno = e;
        return -1;
    }
    (void)fcntl(sp[0], F_SETFL, O_NONBLOCK);
    return sp[0];
}

int cs_tls_front_accept(int fd)
{
    char byte;
    union one_fd ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    ssize_t r;
    do
        r = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    while (r < 0 && errno == EINTR);
    if (r < 0)
        return -1;
    if (r == 0) {
        errno = EPIPE;
        return -1;
    }
    /* Every descriptor received is ours to close unless it is the one and only. (Two ints fit
     * the space one takes, aligned: they arrive, and must not stay open.) */
    int got = -1;
    size_t n = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        for (size_t k = 0; k < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); k++, n++) {
            int fd1;
            memcpy(&fd1, CMSG_DATA(c) + k * sizeof(int), sizeof fd1);
            if (n == 0)
                got = fd1;
            else
                close(fd1);
        }
    }
    if (n == 1 && !(msg.msg_flags & (MSG_CTRUNC | MSG_TRUNC)))
        return got;
    if (got >= 0)
        close(got);
    errno = EPROTO;
    return -1;
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
        if (!ssl || SSL_set_fd(ssl, c->net) != 1 ||
            SSL_set_ex_data(ssl, found_id_index, c->identity) != 1) {
            ssl_why(why, sizeof why, "SSL_new");
            goto end;
        }
        if (handshake(ssl, true, c->stopfd, c->deadline, HS_MS, why, sizeof why) != 0) {
            refusal(f, c->addr, why);
            goto end;
        }
        /* Removed by a reload while its handshake ran. */
        if (f->ctx->psk && !ctx_knows(f->ctx, c->identity)) {
            refusal(f, c->addr,
                    "TLS handshake failed: the peer named another pre-shared key "
                    "identity");
            goto end;
        }
    }
    /* Authenticated (or plaintext by the operator's choice): bridged beside the others, each to
     * its own connection to the worker (one per gateway; none is ended for a newer one). */
    pthread_mutex_lock(&f->mu);
    slot_release(f, c);
    size_t bridged = 0;
    for (size_t k = 0; k < CONNS_MAX; k++)
        bridged += f->conns[k].used && !f->conns[k].handshaking && &f->conns[k] != c;
    pthread_mutex_unlock(&f->mu);
    wake(f);
    if (bridged >= BRIDGE_MAX) {
        snprintf(why, sizeof why,
                 "the worker already serves %d gateway connections, its most at once", BRIDGE_MAX);
        refusal(f, c->addr, why);
        goto end;
    }
    local = worker_connect(f);
    if (local < 0) {
        snprintf(why, sizeof why, "cannot reach the worker's loop: %s", strerror(errno));
        goto end;
    }
    char peer[INET6_ADDRSTRLEN];
    addr_text(c->addr, peer);
    if (f->ctx->psk)
        cs_log(CS_LOG_INFO, "runner connection accepted",
               json_pack("{s:b,s:s,s:s,s:s}", "tls", true, "auth", "psk", "psk_identity",
                         c->identity, "peer", peer));
    else
        cs_log(CS_LOG_INFO, "runner connection accepted",
               json_pack("{s:b,s:s,s:s}", "tls", ssl != NULL, "auth", cs_tls_ctx_auth(f->ctx),
                         "peer", peer));
    pump(ssl, c->net, local, c->stopfd, why, sizeof why);
    pthread_mutex_lock(&f->mu);
    if (c->revoked)
        snprintf(why, sizeof why, "its pre-shared key identity was removed");
    pthread_mutex_unlock(&f->mu);
    /* The same names as its accepted line, so an operator can tell whose link ended (which
     * gateway, when several share this worker). */
    if (f->ctx->psk)
        cs_log(CS_LOG_INFO, "runner connection ended",
               json_pack("{s:s,s:s,s:s}", "why", why, "psk_identity", c->identity, "peer", peer));
    else
        cs_log(CS_LOG_INFO, "runner connection ended",
               json_pack("{s:s,s:s}", "why", why, "peer", peer));
end:
    if (ssl) {
        (void)SSL_shutdown(ssl);
        SSL_free(ssl);
    }
    if (local >= 0)
        close(local);
    close(c->net);
    pthread_mutex_lock(&f->mu);
    bool freed = c->handshaking;
    slot_release(f, c);
    c->used = false;
    pthread_mutex_unlock(&f->mu);
    if (freed)
        wake(f);
    return NULL;
}

/* ---- the accept thread ---- */

/* Removes pending entry i; closes it, logging why when given. */
static void pend_drop(struct cs_tls_front *f, size_t i, const char *why)
{
    if (why)
        refusal(f, f->pend[i].addr, why);
    close(f->pend[i].fd);
    f->pend[i] = f->pend[--f->npend];
}

/* The oldest pending entry (of address addr when given), or -1. */
static ssize_t pend_oldest(const struct cs_tls_front *f, const unsigned char *addr)
{
    ssize_t best = -1;
    for (size_t i = 0; i < f->npend; i++)
        if ((!addr || memcmp(f->pend[i].addr, addr, 16) == 0) &&
            (best < 0 || f->pend[i].t0 < f->pend[(size_t)best].t0))
            best = (ssize_t)i;
    return best;
}

/* Unauthenticated connections of addr: waiting, or in a general handshake slot. */
static size_t addr_count(struct cs_tls_front *f, const unsigned char addr[16])
{
    size_t n = 0;
    for (size_t i = 0; i < f->npend; i++)
        n += memcmp(f->pend[i].addr, addr, 16) == 0;
    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < CONNS_MAX; i++)
        n += f->conns[i].handshaking && !f->conns[i].reserved &&
             memcmp(f->conns[i].addr, addr, 16) == 0;
    pthread_mutex_unlock(&f->mu);
    return n;
}

static void set_lowat(int fd, size_t n)
{
    int v = (int)n;
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof v);
}

/* Peeks at pending entry i and judges what it sent. Returns false when it was dropped. */
static bool pend_examine(struct cs_tls_front *f, size_t i)
{
    struct pending *p = &f->pend[i];
    if (p->cls != FLIGHT_MORE)
        return true;
    if (f->ctx->plaintext) {
        p->cls = FLIGHT_ORDINARY; /* no handshake to judge */
        return true;
    }
    ssize_t n = recv(p->fd, f->peek, sizeof f->peek, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return true;
    if (n <= 0) {
        pend_drop(f, i, NULL); /* closed before a byte: a probe, not worth a line */
        return false;
    }
    p->bytes = true;
    size_t need = 0;
    const char *why = NULL;
    enum cs_tls_flight fl =
        cs_tls_first_flight(f->peek, (size_t)n, f->ctx->psk, ctx_knows_n, f->ctx, &need, &why);
    if (fl == FLIGHT_REFUSE) {
        /* What it sent is read, so the close is a FIN, not a reset that would discard the
         * alert; a TLS peer learns why from the alert, as OpenSSL would have told it. */
        static const unsigned char alert[7] = {21, 3, 3, 0, 2, 2, 40}; /* handshake_failure */
        bool tls = f->peek[0] == 22;
        (void)!recv(p->fd, f->peek, (size_t)n, MSG_DONTWAIT);
        if (tls)
            (void)!send(p->fd, alert, sizeof alert, MSG_DONTWAIT | MSG_NOSIGNAL);
        pend_drop(f, i, why);
        return false;
    }
    if (fl == FLIGHT_MORE) {
        set_lowat(p->fd, need); /* no wake-up before the rest is in */
        return true;
    }
    set_lowat(p->fd, 1); /* OpenSSL reads it from here */
    p->cls = (int)fl;
    return true;
}

/* Starts the handshake of judged pending entry i if a slot allows. Returns true when started
 * (the entry is gone then). */
static bool pend_admit(struct cs_tls_front *f, size_t i)
{
    struct pending *p = &f->pend[i];
    if (p->cls == FLIGHT_MORE)
        return false;
    struct front_conn *c = NULL;
    pthread_mutex_lock(&f->mu);
    size_t per = 0;
    for (size_t k = 0; k < CONNS_MAX; k++)
        per += f->conns[k].handshaking && !f->conns[k].reserved &&
               memcmp(f->conns[k].addr, p->addr, 16) == 0;
    bool general = f->hs_general < HS_SLOTS - 1 && per < HS_PER_ADDR;
    bool reserved = !general && p->cls == FLIGHT_VALID && !f->hs_reserved;
    for (size_t k = 0; k < CONNS_MAX && !c && (general || reserved); k++)
        if (!f->conns[k].used)
            c = &f->conns[k];
    if (c) {
        if (c->joinable) {
            pthread_join(c->thread, NULL); /* finished: used is false */
            c->joinable = false;
        }
        c->used = true;
        c->handshaking = true;
        c->reserved = reserved;
        c->revoked = false;
        if (reserved)
            f->hs_reserved = true;
        else
            f->hs_general++;
        memcpy(c->addr, p->addr, 16);
    }
    pthread_mutex_unlock(&f->mu);
    if (!c)
        return false;
    c->f = f;
    c->net = p->fd;
    c->deadline = p->t0 + HS_MS;
    c->identity[0] = '\0';
    uint64_t drain;
    while (read(c->stopfd, &drain, sizeof drain) > 0)
        ;
    f->pend[i] = f->pend[--f->npend];
    if (pthread_create(&c->thread, NULL, conn_main, c) != 0) {
        close(c->net);
        pthread_mutex_lock(&f->mu);
        slot_release(f, c);
        c->used = false;
        pthread_mutex_unlock(&f->mu);
        return true;
    }
    c->joinable = true;
    return true;
}

/* Admits every judged entry a slot allows (one that finds no general slot may still take the
 * reserved one, so each is tried). */
static void pend_admit_all(struct cs_tls_front *f)
{
    for (size_t i = 0; i < f->npend;)
        if (!pend_admit(f, i))
            i++; /* admitted: entry i is another one now */
}

/* Accepts what is queued (at most ACCEPT_BURST). Returns false when out of descriptors with
 * nothing to give back. */
static bool accept_some(struct cs_tls_front *f)
{
    for (int k = 0; k < ACCEPT_BURST; k++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        memset(&ss, 0, sizeof ss);
        int fd = accept4(f->lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                ssize_t old = pend_oldest(f, NULL);
                if (old < 0)
                    return false;
                pend_drop(f, (size_t)old,
                          "TLS handshake failed: out of descriptors, the "
                          "oldest waiting connection is closed");
                continue;
            }
            return true; /* EAGAIN, or the peer already gone */
        }
        tune_tcp(fd);
        unsigned char addr[16];
        addr_key(&ss, addr);
        if (f->npend == PENDING_MAX)
            pend_drop(f, (size_t)pend_oldest(f, NULL),
                      "TLS handshake failed: too many connections waiting for their first "
                      "flight; the oldest is closed");
        /* Per address: the oldest waiting one makes room for the newest. */
        ssize_t old;
        while (addr_count(f, addr) >= HS_PER_ADDR && (old = pend_oldest(f, addr)) >= 0)
            pend_drop(f, (size_t)old,
                      "TLS handshake failed: more than 4 unauthenticated connections from "
                      "this address; the oldest is closed");
        size_t i = f->npend++;
        f->pend[i] = (struct pending){.fd = fd, .t0 = now_ms(), .cls = FLIGHT_MORE};
        memcpy(f->pend[i].addr, addr, 16);
        /* Its ClientHello is usually in already: judged and started at once. */
        if (!pend_examine(f, i) || pend_admit(f, i))
            continue;
        /* Over the address's bound (4 in general handshake slots): only the reserved slot
         * could have taken it. */
        if (addr_count(f, addr) > HS_PER_ADDR)
            pend_drop(f, i,
                      "TLS handshake failed: more than 4 unauthenticated connections from "
                      "this address");
    }
    return true;
}

/* Closes waiting connections past their time; returns the ms until the next deadline (-1:
 * none). */
static int pend_expire(struct cs_tls_front *f)
{
    int64_t now = now_ms(), next = -1;
    for (size_t i = f->npend; i-- > 0;) {
        struct pending *p = &f->pend[i];
        if (!p->bytes && now >= p->t0 + FIRST_BYTES_MS) {
            int avail = 0;
            if (ioctl(p->fd, FIONREAD, &avail) == 0 && avail > 0) {
                p->bytes = true;
            } else {
                pend_drop(f, i, "TLS handshake failed: the peer sent nothing within 2 s");
                continue;
            }
        }
        if (now >= p->t0 + HS_MS) {
            pend_drop(f, i,
                      p->cls == FLIGHT_MORE
                          ? "TLS handshake did not finish within 5 s: no whole ClientHello"
                          : "TLS handshake did not finish within 5 s: every handshake slot "
                            "was taken");
            continue;
        }
        int64_t at = p->bytes ? p->t0 + HS_MS : p->t0 + FIRST_BYTES_MS;
        if (next < 0 || at < next)
            next = at;
    }
    return next < 0 ? -1 : (int)(next > now ? next - now : 0);
}

static void *front_main(void *arg)
{
    struct cs_tls_front *f = arg;
    struct pollfd *p = calloc(3 + PENDING_MAX, sizeof *p);
    int64_t starved_until = 0;
    if (!p)
        return NULL;
    for (;;) {
        int timeout = pend_expire(f);
        bool starved = now_ms() < starved_until;
        if (starved && (timeout < 0 || timeout > 100))
            timeout = 100;
        p[0] = (struct pollfd){.fd = f->stopfd, .events = POLLIN};
        p[1] = (struct pollfd){.fd = f->wakefd, .events = POLLIN};
        p[2] = (struct pollfd){.fd = starved ? -1 : f->lfd, .events = POLLIN};
        size_t n = f->npend;
        for (size_t i = 0; i < n; i++)
            /* A judged one waits for a slot: its unread bytes must not wake us. */
            p[3 + i] = (struct pollfd){.fd = f->pend[i].fd,
                                       .events = f->pend[i].cls == FLIGHT_MORE ? POLLIN : 0};
        int r = poll(p, 3 + n, timeout);
        if (r < 0 && errno != EINTR)
            break;
        if (r <= 0)
            continue;
        if (p[0].revents & POLLIN)
            break;
        if (p[1].revents & POLLIN) {
            uint64_t drain;
            (void)!read(f->wakefd, &drain, sizeof drain);
        }
        /* Back to front: a drop moves the last entry into the hole, already looked at. */
        for (size_t i = n; i-- > 0;) {
            if (!p[3 + i].revents)
                continue;
            if (p[3 + i].revents & (POLLERR | POLLNVAL) ||
                (p[3 + i].revents & POLLHUP && !(p[3 + i].revents & POLLIN)))
                pend_drop(f, i, NULL);
            else
                (void)pend_examine(f, i);
        }
        pend_admit_all(f);
        if (p[2].revents & POLLIN && !accept_some(f))
            starved_until = now_ms() + 100;
    }
    for (size_t i = 0; i < f->npend; i++)
        close(f->pend[i].fd);
    f->npend = 0;
    free(p);
    return NULL;
}

int cs_tls_front_reload(struct cs_tls_front *f, size_t *n, struct cs_diag *err)
{
    if (cs_tls_ctx_reload(f->ctx, n, err) != 0)
        return -1;
    /* A removed identity's connection ends now, not at its next reconnection. */
    uint64_t one = 1;
    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < CONNS_MAX; i++) {
        struct front_conn *c = &f->conns[i];
        if (c->used && !c->handshaking && c->identity[0] && !ctx_knows(f->ctx, c->identity)) {
            c->revoked = true;
            (void)!write(c->stopfd, &one, sizeof one);
        }
    }
    pthread_mutex_unlock(&f->mu);
    return 0;
}

struct cs_tls_front *cs_tls_front_start(struct cs_tls_ctx *ctx, const char *host, const char *port,
                                        int handoff, struct cs_diag *err)
{
    struct cs_tls_front *f = calloc(1, sizeof *f);
    if (!f) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "out of memory");
        return NULL;
    }
    f->ctx = ctx;
    f->lfd = -1;
    f->handoff = fcntl(handoff, F_DUPFD_CLOEXEC, 3);
    if (f->handoff < 0) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "the loop's handoff: %s", strerror(errno));
        free(f);
        return NULL;
    }
    f->stopfd = eventfd(0, EFD_CLOEXEC);
    f->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pthread_mutex_init(&f->mu, NULL);
    for (size_t i = 0; i < CONNS_MAX; i++)
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
        int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        int one = 1;
        if (fd < 0)
            continue;
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 1024) == 0) {
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
    close(f->wakefd);
    for (size_t i = 0; i < CONNS_MAX; i++)
        close(f->conns[i].stopfd);
    pthread_mutex_destroy(&f->mu);
    close(f->handoff);
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
    for (size_t i = 0; i < CONNS_MAX; i++)
        if (f->conns[i].used)
            (void)!write(f->conns[i].stopfd, &one, sizeof one);
    pthread_mutex_unlock(&f->mu);
}

void cs_tls_front_free(struct cs_tls_front *f)
{
    if (!f)
        return;
    cs_tls_front_stop(f);
    for (size_t i = 0; i < CONNS_MAX; i++) {
        if (f->conns[i].joinable)
            pthread_join(f->conns[i].thread, NULL);
        close(f->conns[i].stopfd);
    }
    close(f->stopfd);
    close(f->wakefd);
    pthread_mutex_destroy(&f->mu);
    close(f->handoff);
    free(f);
}
