/* The deletion queue (src/api/deletionQueue.ts): DELs the agent could not
 * take, kept beside its socket until the agent drains them on start. */
#ifndef TENDRIL_CNI_QUEUE_H
#define TENDRIL_CNI_QUEUE_H

#include <stddef.h>

#include "buf.h"

/*
 * Writes body to <dirname(socket_path)>/deletion-queue/<ms>-<8 hex>.json.
 * The agent runs what it finds there as root, so the queue is only written
 * where only root can write: the socket's directory must exist (it is never
 * made: a missing one means no agent serves that socket), be owned by root
 * and not be writable by its group or others; the queue directory is made
 * there with mode 0700 when missing, and must be a directory (not a
 * symlink) owned by root with mode 0700. The file is created as
 * .<name>.tmp (O_EXCL|O_NOFOLLOW, mode 0600) and renamed into place without
 * replacing anything. On success *path gets the file's path; on failure
 * *why says what failed.
 */
int deletion_queue_write(const char *socket_path, const char *body, size_t len, struct buf *path, struct buf *why);

#endif
