/*
 * secure_env.c — registers FILE with a client of the default socket and
 * sends one hint (run by tests/c_abi.rs, set-user-ID root and not, with
 * $PREDICTIO_HINT_SOCK pointing at a socket of the caller's).
 *
 *     ./secure_env FILE
 */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "predictio.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s FILE\n", argv[0]);
        return 2;
    }
    predictio_client *client = predictio_client_new(NULL);
    int fd = open(argv[1], O_RDONLY | O_CLOEXEC);
    if (client == NULL || fd < 0) {
        perror("setup");
        return 2;
    }
    uint32_t handle = PREDICTIO_NO_HANDLE;
    int registered = predictio_register(client, fd, &handle);
    int hinted = predictio_stream_read(client, handle, 0, 4096);
    printf("register %d stream_read %d euid %d uid %d\n", registered, hinted, (int)geteuid(), (int)getuid());
    predictio_client_free(client);
    return registered < 0 || hinted < 0;
}
