/*
 * http_mhd: libmicrohttpd, loaded with dlopen when the HTTP transport starts (see http_mhd.c).
 * src/http calls MHD through cs_mhd.<function> with the library's own names and types.
 */
#ifndef CS_HTTP_MHD_H
#define CS_HTTP_MHD_H

#include <stddef.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "base_diag.h"

/* Every MHD function src/http uses. */
#define CS_MHD_FUNCTIONS(X)                                                                        \
    X(MHD_add_response_header)                                                                     \
    X(MHD_create_response_from_buffer)                                                             \
    X(MHD_create_response_from_callback)                                                           \
    X(MHD_create_response_from_buffer_with_free_callback)                                          \
    X(MHD_destroy_response)                                                                        \
    X(MHD_get_connection_info)                                                                     \
    X(MHD_get_connection_values_n)                                                                 \
    X(MHD_get_daemon_info)                                                                         \
    X(MHD_get_timeout)                                                                             \
    X(MHD_is_feature_supported)                                                                    \
    X(MHD_queue_response)                                                                          \
    X(MHD_resume_connection)                                                                       \
    X(MHD_run)                                                                                     \
    X(MHD_start_daemon)                                                                            \
    X(MHD_stop_daemon)                                                                             \
    X(MHD_suspend_connection)

struct cs_mhd_api {
/* NOLINTNEXTLINE(bugprone-macro-parentheses): f is a declarator, not an expression */
#define CS_MHD_POINTER(f) __typeof__(f) *f;
    CS_MHD_FUNCTIONS(CS_MHD_POINTER)
#undef CS_MHD_POINTER
};

/* The loaded functions; valid after cs_mhd_load returned 0. */
extern struct cs_mhd_api cs_mhd;

/* Loads the library once (later calls return at once). Returns 0, or -1 with err (may be NULL)
 * naming the library and dlerror's reason, or the missing symbol. */
int cs_mhd_load(struct cs_diag *err);

#endif
