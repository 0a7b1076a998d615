/* The deletion queue (src/api/deletionQueue.ts): DELs the agent could not
 * take, kept beside its socket until the agent drains them on start. */
#ifndef TENDRIL_CNI_QUEUE_H
#define TENDRIL_CNI_QUEUE_H

#include <stddef.h>

#include "buf.h"

/*
 * Writes body to <dirname(socket_path)>/deletion-queue/<ms>-<8 hex>.json:
 * the directory made with mode 0700 (parents too), the file written as
 * .<name>.tmp with mode 0600 and renamed into place. On success *path gets
 * the file's path; on failure *why says what failed.
 */
int deletion_queue_write(const char *socket_path, const char *body, size_t len, struct buf *path, struct buf *why);

#endif
