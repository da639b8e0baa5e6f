/*
 * predictio.h — the C ABI of predictio's hint client (libpredictio_client).
 *
 * A program tells the predictio daemon what it will read next; the daemon
 * prefetches it into the page cache. Hints are advisory: a missing, busy or
 * killed daemon costs the program nothing but the hint, and no call ever
 * blocks (every send is MSG_DONTWAIT on a Unix datagram socket).
 *
 * Files are registered once by descriptor (passed to the daemon with
 * SCM_RIGHTS) and then named by the handle predictio_register returns, so the
 * daemon can only prefetch files this program could open itself.
 *
 * Every function checks its pointers for NULL and never lets a Rust panic
 * cross the boundary (it returns PREDICTIO_PANIC instead). A client may be
 * used from several threads at once.
 *
 * This header is written by hand; a test checks that it declares every
 * extern "C" function of the library. Wire format: docs/protocol.md.
 */
#ifndef PREDICTIO_H
#define PREDICTIO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. Negative values are mistakes in the call or failures that
 * had no effect; PREDICTIO_DROPPED is the expected, harmless outcome when no
 * daemon listens or it is busy. New codes are only ever appended. */
typedef enum predictio_status {
    PREDICTIO_OK = 0,                 /* sent */
    PREDICTIO_DROPPED = 1,            /* valid but dropped (no daemon / busy); counted */
    PREDICTIO_NULL_ARGUMENT = -1,     /* a required pointer was NULL */
    PREDICTIO_INVALID_ARGUMENT = -2,  /* inverted range, bad position, too many elements, bad fd */
    PREDICTIO_UNKNOWN_HANDLE = -3,    /* handle never registered with this client, or unregistered */
    PREDICTIO_PANIC = -4,             /* internal bug; the call had no effect */
    PREDICTIO_SYSTEM_ERROR = -5,      /* a system call failed */
    PREDICTIO_TOO_MANY_HANDLES = -6,  /* register: the client holds 4096 files already */
    PREDICTIO_OUT_OF_DESCRIPTORS = -7 /* register: EMFILE/ENFILE, no duplicate could be kept */
} predictio_status;

/* The handle predictio_register writes when it fails; no handle is 0. */
#define PREDICTIO_NO_HANDLE 0u

/* Most files one client keeps registered. */
#define PREDICTIO_MAX_REGISTERED 4096

/* An opaque client. */
typedef struct predictio_client predictio_client;

/* A client's counters. */
typedef struct predictio_stats {
    uint64_t sent;       /* datagrams handed to the kernel */
    uint64_t dropped;    /* datagrams dropped (no daemon, busy) */
    uint64_t invalid;    /* calls refused as invalid */
    uint64_t reconnects; /* reconnections after the daemon was absent */
} predictio_stats;

/* Creates a client of the daemon socket at `path` (NULL: the default,
 * $PREDICTIO_HINT_SOCK if set, else /run/predictio/hint.sock; the variable is
 * ignored in set-user-ID and set-group-ID programs, as secure_getenv(3) would).
 * A missing daemon is not an error: the client drops hints and tries again at
 * most every 2 seconds. Returns NULL only when the client's own socket cannot
 * be created. */
predictio_client *predictio_client_new(const char *path);

/* Frees a client (NULL is ignored). */
void predictio_client_free(predictio_client *client);

/* Registers the open, readable, regular-file descriptor `fd`; writes the
 * handle that names it to `*handle_out`. The descriptor stays the caller's;
 * the library keeps a close-on-exec duplicate until predictio_unregister, at
 * most PREDICTIO_MAX_REGISTERED of them (PREDICTIO_TOO_MANY_HANDLES past it).
 * Out of descriptors: PREDICTIO_OUT_OF_DESCRIPTORS. On any failure
 * `*handle_out` is PREDICTIO_NO_HANDLE. */
int predictio_register(const predictio_client *client, int fd, uint32_t *handle_out);

/* Forgets `handle` here and at the daemon. The hint functions below return
 * PREDICTIO_UNKNOWN_HANDLE, and send nothing, for a handle this client never
 * issued or has unregistered. */
int predictio_unregister(const predictio_client *client, uint32_t handle);

/* Asks for the half-open page ranges [starts[i], ends[i]), i < n
 * (4 KiB pages; at most 4095 ranges). */
int predictio_pages(const predictio_client *client, uint32_t handle, const uint64_t *starts,
                    const uint64_t *ends, size_t n);

/* Reports the byte segments [offsets[i], offsets[i] + lens[i]) the program will
 * read next, in order (at most 4095). */
int predictio_read_plan(const predictio_client *client, uint32_t handle, const uint64_t *offsets,
                        const uint64_t *lens, size_t n);

/* Reports a read of `len` bytes at `offset`. */
int predictio_stream_read(const predictio_client *client, uint32_t handle, uint64_t offset,
                          uint64_t len);

/* Reports a B-tree descent from interior page `parent_page` into
 * children[position]; `children` holds its n child pages in key order
 * (at most 8188). */
int predictio_tree_child_enter(const predictio_client *client, uint32_t handle, uint64_t parent_page,
                               uint32_t position, const uint64_t *children, size_t n);

/* Reports a model's tensor byte ranges [offsets[i], offsets[i] + lens[i]) in
 * load order (at most 4095). */
int predictio_tensor_layout(const predictio_client *client, uint32_t handle, const uint64_t *offsets,
                            const uint64_t *lens, size_t n);

/* Reports that the model loader starts layer `layer`. */
int predictio_layer_start(const predictio_client *client, uint32_t handle, uint32_t layer);

/* Turns buffering on (on != 0) or off. While on, hints are collected into one
 * datagram that is sent when full (about 2300 small hints) or on
 * predictio_flush: one system call for many hints. The hint functions then
 * return PREDICTIO_OK once the hint is buffered. predictio_register always
 * sends at once. Turning buffering off flushes and returns the flush status. */
int predictio_set_buffering(const predictio_client *client, int on);

/* Sends the buffered hints now. */
int predictio_flush(const predictio_client *client);

/* Writes the client's counters to `*out` (datagrams: one per hint unless
 * buffering put several in one). */
int predictio_client_stats(const predictio_client *client, predictio_stats *out);

/* A static description of a status code (never NULL). */
const char *predictio_status_str(int status);

#ifdef __cplusplus
}
#endif

#endif /* PREDICTIO_H */
