/*
 * hint_example.c — sends one hint of every kind through libpredictio_client.
 *
 *     cc -I crates/predictio-client/include hint_example.c \
 *        -L target/release -lpredictio_client -o hint_example
 *     ./hint_example [SOCKET_PATH] FILE
 *
 * With no daemon listening every hint is dropped (status PREDICTIO_DROPPED)
 * and the program runs on unharmed: that is the point of the design.
 * Exits 0 when every call returned a non-negative status, 1 otherwise.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "predictio.h"

static int failures = 0;

static void check(const char *what, int status) {
    printf("%-22s %d (%s)\n", what, status, predictio_status_str(status));
    if (status < 0) {
        failures++;
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s [SOCKET_PATH] FILE\n", argv[0]);
        return 2;
    }
    const char *socket_path = argc > 2 ? argv[1] : NULL;
    const char *file_path = argv[argc - 1];

    /* NULL pointers are refused, never dereferenced. */
    if (predictio_stream_read(NULL, 1, 0, 4096) != PREDICTIO_NULL_ARGUMENT) {
        fprintf(stderr, "NULL client was not refused\n");
        return 1;
    }

    predictio_client *client = predictio_client_new(socket_path);
    if (client == NULL) {
        fprintf(stderr, "predictio_client_new failed\n");
        return 1;
    }
    int fd = open(file_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        perror("open");
        return 1;
    }

    uint32_t handle = 0;
    check("register", predictio_register(client, fd, &handle));

    const uint64_t starts[] = {0, 16};
    const uint64_t ends[] = {4, 32};
    check("pages", predictio_pages(client, handle, starts, ends, 2));

    const uint64_t offsets[] = {0, 1 << 20};
    const uint64_t lens[] = {65536, 131072};
    check("read_plan", predictio_read_plan(client, handle, offsets, lens, 2));
    check("stream_read", predictio_stream_read(client, handle, 8192, 4096));

    const uint64_t children[] = {3, 9, 27};
    check("tree_child_enter", predictio_tree_child_enter(client, handle, 1, 1, children, 3));
    check("tensor_layout", predictio_tensor_layout(client, handle, offsets, lens, 2));
    check("layer_start", predictio_layer_start(client, handle, 7));

    /* Mistakes are reported, not crashed on. */
    const uint64_t inverted_end[] = {2};
    if (predictio_pages(client, handle, starts + 1, inverted_end, 1) != PREDICTIO_INVALID_ARGUMENT) {
        fprintf(stderr, "inverted range was not refused\n");
        failures++;
    }
    /* Many hints: buffer them into one datagram, then flush. */
    check("set_buffering(1)", predictio_set_buffering(client, 1));
    for (uint64_t i = 0; i < 100; i++) {
        int status = predictio_stream_read(client, handle, i * 4096, 4096);
        if (status != PREDICTIO_OK) {
            check("buffered stream_read", status);
        }
    }
    check("flush", predictio_flush(client));
    check("set_buffering(0)", predictio_set_buffering(client, 0));

    check("unregister", predictio_unregister(client, handle));

    predictio_stats stats;
    check("stats", predictio_client_stats(client, &stats));
    printf("sent=%llu dropped=%llu invalid=%llu\n", (unsigned long long)stats.sent,
           (unsigned long long)stats.dropped, (unsigned long long)stats.invalid);

    close(fd);
    predictio_client_free(client);
    return failures == 0 ? 0 : 1;
}
