/*
 * limits.c — the C ABI's bounds, from C (run by tests/c_abi.rs):
 *
 *   1. a handle the client never issued, or one it unregistered, is
 *      PREDICTIO_UNKNOWN_HANDLE, and nothing is sent;
 *   2. out of descriptors (EMFILE), predictio_register says so
 *      (PREDICTIO_OUT_OF_DESCRIPTORS) and writes PREDICTIO_NO_HANDLE;
 *   3. a client keeps at most PREDICTIO_MAX_REGISTERED duplicates
 *      (PREDICTIO_TOO_MANY_HANDLES past them, PREDICTIO_NO_HANDLE written).
 *
 *     ./limits SOCKET_PATH FILE
 *
 * No daemon listens at SOCKET_PATH: sends are PREDICTIO_DROPPED. Prints
 * "limits ok" and exits 0 when every check held; prints "skip: WHY" and exits
 * 3 when RLIMIT_NOFILE's hard limit is too low for check 3; exits 1 otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "predictio.h"

static int failures = 0;

#define EXPECT(cond, ...)                          \
    do {                                           \
        if (!(cond)) {                             \
            fprintf(stderr, "FAILED %s: ", #cond); \
            fprintf(stderr, __VA_ARGS__);          \
            fprintf(stderr, "\n");                 \
            failures++;                            \
        }                                          \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s SOCKET_PATH FILE\n", argv[0]);
        return 2;
    }
    predictio_client *client = predictio_client_new(argv[1]);
    int fd = open(argv[2], O_RDONLY | O_CLOEXEC);
    if (client == NULL || fd < 0) {
        perror("setup");
        return 2;
    }

    /* 1. Unknown handles. */
    int status = predictio_stream_read(client, 1, 0, 4096);
    EXPECT(status == PREDICTIO_UNKNOWN_HANDLE, "never issued: %d", status);
    uint32_t handle = 12345;
    status = predictio_register(client, fd, &handle);
    EXPECT(status == PREDICTIO_OK && handle == 1, "register: %d, handle %u", status, handle);
    status = predictio_layer_start(client, handle, 0);
    EXPECT(status == PREDICTIO_DROPPED, "registered, no daemon: %d", status);
    status = predictio_unregister(client, handle);
    EXPECT(status == PREDICTIO_DROPPED, "unregister, no daemon: %d", status);
    status = predictio_stream_read(client, handle, 0, 4096);
    EXPECT(status == PREDICTIO_UNKNOWN_HANDLE, "unregistered: %d", status);
    status = predictio_unregister(client, handle);
    EXPECT(status == PREDICTIO_UNKNOWN_HANDLE, "unregistered twice: %d", status);
    status = predictio_layer_start(client, PREDICTIO_NO_HANDLE, 0);
    EXPECT(status == PREDICTIO_UNKNOWN_HANDLE, "handle 0: %d", status);

    /* 2. Out of descriptors: fill the table under a low soft limit. */
    struct rlimit saved;
    if (getrlimit(RLIMIT_NOFILE, &saved) != 0) {
        perror("getrlimit");
        return 2;
    }
    struct rlimit low = saved;
    low.rlim_cur = 64;
    if (setrlimit(RLIMIT_NOFILE, &low) != 0) {
        perror("setrlimit");
        return 2;
    }
    int fillers[64];
    int filled = 0;
    while (filled < 64) {
        int extra = dup(fd);
        if (extra < 0) {
            break;
        }
        fillers[filled++] = extra;
    }
    EXPECT(errno == EMFILE, "the table did not fill: errno %d", errno);
    handle = 12345;
    status = predictio_register(client, fd, &handle);
    EXPECT(status == PREDICTIO_OUT_OF_DESCRIPTORS, "EMFILE: %d", status);
    EXPECT(handle == PREDICTIO_NO_HANDLE, "EMFILE wrote handle %u", handle);
    for (int i = 0; i < filled; i++) {
        close(fillers[i]);
    }
    if (setrlimit(RLIMIT_NOFILE, &saved) != 0) {
        perror("setrlimit");
        return 2;
    }

    /* 3. The cap on kept duplicates. */
    const rlim_t need = PREDICTIO_MAX_REGISTERED + 64;
    if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max < need) {
        printf("skip: RLIMIT_NOFILE hard limit %llu < %llu\n", (unsigned long long)saved.rlim_max,
               (unsigned long long)need);
        return failures ? 1 : 3;
    }
    struct rlimit high = saved;
    if (high.rlim_cur != RLIM_INFINITY && high.rlim_cur < need) {
        high.rlim_cur = need;
    }
    if (setrlimit(RLIMIT_NOFILE, &high) != 0) {
        perror("setrlimit");
        return 2;
    }
    int registered = 0;
    for (int i = 0; i < PREDICTIO_MAX_REGISTERED; i++) {
        status = predictio_register(client, fd, &handle);
        if (status != PREDICTIO_OK) {
            break;
        }
        registered++;
    }
    EXPECT(registered == PREDICTIO_MAX_REGISTERED, "registered only %d: %d", registered, status);
    handle = 12345;
    status = predictio_register(client, fd, &handle);
    EXPECT(status == PREDICTIO_TOO_MANY_HANDLES, "one past the cap: %d", status);
    EXPECT(handle == PREDICTIO_NO_HANDLE, "past the cap wrote handle %u", handle);
    EXPECT(predictio_unregister(client, 2) == PREDICTIO_DROPPED, "unregister one");
    status = predictio_register(client, fd, &handle);
    EXPECT(status == PREDICTIO_OK && handle != PREDICTIO_NO_HANDLE, "room again: %d, %u", status, handle);

    predictio_client_free(client);
    close(fd);
    if (failures) {
        return 1;
    }
    printf("limits ok\n");
    return 0;
}
