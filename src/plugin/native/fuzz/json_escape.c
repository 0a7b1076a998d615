/* Escaping round trip: any bytes, escaped into a string literal, scan as
 * valid JSON and decode to exactly those bytes; and a CniRequest built with
 * them as its config carries them unchanged. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "cni.h"
#include "json.h"

#define CHECK(c) \
	do { \
		if (!(c)) \
			abort(); \
	} while (0)

/* Decodes field f of doc and compares it with want. */
static void expect_string(const struct buf *doc, const struct json_field *f, const void *want, size_t n)
{
	CHECK(f->kind == JSON_FIELD_STRING);
	char *decoded = malloc(f->len ? f->len : 1);
	CHECK(decoded);
	size_t m = json_string_decode(doc->data + f->start, f->len, decoded);
	CHECK(m == n && (n == 0 || memcmp(decoded, want, n) == 0));
	free(decoded);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct buf esc;
	buf_init(&esc, 6 * size + 16);
	CHECK(json_escape(&esc, (const char *)data, size) == 0);
	for (size_t i = 0; i < esc.len; i++)
		CHECK((unsigned char)esc.data[i] >= 0x20);

	struct buf doc;
	buf_init(&doc, esc.len + 64);
	CHECK(buf_append_str(&doc, "{\"cniVersion\":\"") == 0 && buf_append(&doc, esc.data, esc.len) == 0 &&
	      buf_append_str(&doc, "\"}") == 0);
	struct json_field f = { .name = "cniVersion" };
	CHECK(json_scan_object(doc.data, doc.len, &f, 1, NULL) == JSON_SCAN_OK);
	expect_string(&doc, &f, data, size);
	buf_free(&doc);
	buf_free(&esc);

	/* The same bytes as a relayed config; a NUL ends the C strings of the CNI_* variables. */
	char *env = malloc(size + 1);
	CHECK(env);
	memcpy(env, data, size);
	env[size] = '\0';
	struct cni_call call = { .command = "ADD", .container_id = env, .config = (const char *)data, .config_len = size };
	struct buf req;
	buf_init(&req, 12 * size + 256);
	CHECK(cni_request_json(&req, &call) == 0);
	struct json_field g[4] = { { .name = "command" }, { .name = "containerId" }, { .name = "config" }, { .name = "netns" } };
	CHECK(json_scan_object(req.data, req.len, g, 4, NULL) == JSON_SCAN_OK);
	expect_string(&req, &g[0], "ADD", 3);
	expect_string(&req, &g[1], env, strlen(env));
	expect_string(&req, &g[2], data, size);
	CHECK(g[3].kind == JSON_FIELD_ABSENT);
	buf_free(&req);
	free(env);
	return 0;
}
