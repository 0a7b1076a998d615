/* Small I/O helpers shared by the relay's parts. */
#ifndef TENDRIL_CNI_IO_H
#define TENDRIL_CNI_IO_H

#include <stddef.h>

/* Writes all n bytes, across short writes and EINTR; -1 with errno on failure. */
int write_all(int fd, const char *p, size_t n);

#endif
