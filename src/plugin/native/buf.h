/* A growable byte buffer with a hard size limit: every append checks for
 * overflow and for the limit, so a caller never copies past what it owns. */
#ifndef TENDRIL_CNI_BUF_H
#define TENDRIL_CNI_BUF_H

#include <stddef.h>

struct buf {
	char *data;   /* NUL-terminated when len > 0 or after buf_cstr() */
	size_t len;
	size_t cap;
	size_t limit; /* the most bytes len may ever reach */
};

void buf_init(struct buf *b, size_t limit);
void buf_free(struct buf *b);

/* Makes room for `extra` more bytes (plus a NUL); -1 when over the limit or out of memory. */
int buf_reserve(struct buf *b, size_t extra);
int buf_append(struct buf *b, const void *p, size_t n);
int buf_append_str(struct buf *b, const char *s);
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The contents as a C string ("" for an empty buffer). */
const char *buf_cstr(const struct buf *b);

#endif
