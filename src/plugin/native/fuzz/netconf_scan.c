/* The netconf scanner on arbitrary bytes: it must never read outside its
 * input, must agree with itself when the input is nested in another
 * document, and every string field it reports must decode and re-escape to
 * the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "json.h"

#define CHECK(c) \
	do { \
		if (!(c)) \
			abort(); \
	} while (0)

static const char *const names[] = { "cniVersion", "socket", "message" };
#define NFIELDS (sizeof(names) / sizeof(names[0]))

static enum json_scan_status scan(const char *p, size_t n, struct json_field *f)
{
	for (size_t i = 0; i < NFIELDS; i++)
		f[i].name = names[i];
	struct json_scan_error err = { 0, NULL };
	enum json_scan_status st = json_scan_object(p, n, f, NFIELDS, &err);
	if (st == JSON_SCAN_INVALID)
		CHECK(err.offset <= n && err.reason != NULL);
	return st;
}

/* The document wrapped as prefix + data + suffix, scanned from an exact-size copy. */
static enum json_scan_status scan_wrapped(const char *pre, const uint8_t *data, size_t size, const char *post,
					  struct json_field *f)
{
	struct buf b;
	buf_init(&b, size + 64);
	CHECK(buf_append_str(&b, pre) == 0 && buf_append(&b, data, size) == 0 && buf_append_str(&b, post) == 0);
	char *exact = malloc(b.len ? b.len : 1);
	CHECK(exact);
	memcpy(exact, b.data, b.len);
	enum json_scan_status st = scan(exact, b.len, f);
	free(exact);
	buf_free(&b);
	return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *in = (const char *)data;
	struct json_field f[NFIELDS];
	enum json_scan_status st = scan(in, size, f);
	CHECK(st != JSON_SCAN_NO_MEMORY);
	int valid = st == JSON_SCAN_OK || st == JSON_SCAN_NOT_OBJECT;

	/* A valid value stays valid wherever it sits (the converse fails for "1,2" in "[…]"). */
	size_t k = 0;
	while (k < size && (in[k] == ' ' || in[k] == '\t' || in[k] == '\r' || in[k] == '\n'))
		k++;
	if (valid) {
		CHECK(k < size);
		struct json_field g[NFIELDS];
		CHECK(scan_wrapped("[", data, size, "]", g) == JSON_SCAN_NOT_OBJECT);
		CHECK(scan_wrapped("{\"socket\" :", data, size, "}", g) == JSON_SCAN_OK);
		CHECK(g[1].kind == (in[k] == '"' ? JSON_FIELD_STRING : JSON_FIELD_OTHER));
		CHECK(scan_wrapped("{\"socket\":", data, size, ",\"socket\":null}", g) == JSON_SCAN_OK);
		CHECK(g[1].kind == JSON_FIELD_OTHER); /* the last occurrence wins */
	} else if (k == size) {
		CHECK(st == JSON_SCAN_INVALID); /* blank is not a document */
	}

	for (size_t i = 0; i < NFIELDS; i++) {
		if (st != JSON_SCAN_OK) {
			CHECK(f[i].kind == JSON_FIELD_ABSENT);
			continue;
		}
		if (f[i].kind != JSON_FIELD_STRING)
			continue;
		CHECK(f[i].start >= 1 && f[i].start + f[i].len < size);
		CHECK(in[f[i].start - 1] == '"' && in[f[i].start + f[i].len] == '"');
		char *decoded = malloc(f[i].len ? f[i].len : 1);
		CHECK(decoded);
		size_t n = json_string_decode(in + f[i].start, f[i].len, decoded);
		CHECK(n <= f[i].len);

		/* Escaping the decoded bytes gives a literal that decodes to them again. */
		struct buf doc;
		buf_init(&doc, 6 * n + 64);
		CHECK(buf_append_str(&doc, "{\"message\":") == 0 && json_quote(&doc, decoded, n) == 0 && buf_append_str(&doc, "}") == 0);
		struct json_field h[NFIELDS];
		CHECK(scan(doc.data, doc.len, h) == JSON_SCAN_OK && h[2].kind == JSON_FIELD_STRING);
		char *again = malloc(h[2].len ? h[2].len : 1);
		CHECK(again);
		size_t m = json_string_decode(doc.data + h[2].start, h[2].len, again);
		CHECK(m == n && memcmp(again, decoded, n) == 0);
		free(again);
		buf_free(&doc);
		free(decoded);
	}
	return 0;
}
