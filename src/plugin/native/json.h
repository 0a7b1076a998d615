/* The JSON the relay needs and nothing more: a string escaper, and a strict
 * scanner that validates a whole document as JSON.parse would and reports
 * chosen top-level string fields of an object, skipping every other value. */
#ifndef TENDRIL_CNI_JSON_H
#define TENDRIL_CNI_JSON_H

#include <stddef.h>

#include "buf.h"

/* Appends the bytes as the inside of a JSON string literal, escaped as
 * JSON.stringify does (", \, and control characters; other bytes as is). */
int json_escape(struct buf *out, const char *s, size_t n);

/* Appends "…" (quotes included). */
int json_quote(struct buf *out, const char *s, size_t n);

enum json_field_kind {
	JSON_FIELD_ABSENT,
	JSON_FIELD_STRING, /* start/len give the raw bytes between the quotes */
	JSON_FIELD_OTHER,  /* present, but not a string */
};

struct json_field {
	const char *name; /* set by the caller */
	enum json_field_kind kind;
	size_t start;
	size_t len;
};

enum json_scan_status {
	JSON_SCAN_OK,
	JSON_SCAN_INVALID,    /* not JSON */
	JSON_SCAN_NOT_OBJECT, /* JSON, but not an object */
	JSON_SCAN_NO_MEMORY,
};

struct json_scan_error {
	size_t offset;      /* where the document stopped being JSON */
	const char *reason; /* a static string */
};

/*
 * Validates in[0..n) as one JSON document (RFC 8259, exactly what
 * ECMAScript's JSON.parse accepts) and, when it is an object, fills each
 * field with its last occurrence among the object's own members (keys
 * compared after unescaping, as JSON.parse does).
 */
enum json_scan_status json_scan_object(const char *in, size_t n, struct json_field *fields, size_t nfields,
				       struct json_scan_error *err);

/*
 * Decodes the raw inside of a string literal that json_scan_object accepted
 * into out, which must hold at least n bytes (decoding never grows it).
 * Escaped code points become UTF-8; a lone surrogate becomes U+FFFD, as
 * Node does when it turns such a string into bytes. Returns the length.
 */
size_t json_string_decode(const char *raw, size_t n, char *out);

#endif
