/* The HTTP answer parser on arbitrary bytes: it must never read outside its
 * input, a complete answer must account for every byte, and no proper
 * prefix of an acceptable answer may be taken for complete or refused. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"

#define CHECK(c) \
	do { \
		if (!(c)) \
			abort(); \
	} while (0)

#define MAX_BODY 4096

static enum http_parse_status parse_copy(const uint8_t *data, size_t n, struct http_response *r)
{
	char *exact = malloc(n ? n : 1);
	CHECK(exact);
	if (n)
		memcpy(exact, data, n);
	enum http_parse_status st = http_response_parse(exact, n, MAX_BODY, r);
	if (st == HTTP_PARSE_COMPLETE)
		CHECK(r->body == exact + r->header_len);
	free(exact);
	return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_response r;
	enum http_parse_status st = http_response_parse((const char *)data, size, MAX_BODY, &r);
	switch (st) {
	case HTTP_PARSE_COMPLETE:
		CHECK(r.status >= 100 && r.status <= 599);
		CHECK(r.exit_code >= -1 && r.exit_code <= 1);
		CHECK(r.content_length <= MAX_BODY);
		CHECK(r.header_len >= 4 && r.header_len <= HTTP_MAX_HEADER && r.header_len + r.content_length == size);
		CHECK(memcmp(data + r.header_len - 4, "\r\n\r\n", 4) == 0);
		break;
	case HTTP_PARSE_ERROR:
		CHECK(r.error != NULL);
		break;
	case HTTP_PARSE_INCOMPLETE:
		CHECK(size < HTTP_MAX_HEADER + MAX_BODY);
		break;
	}
	if (st == HTTP_PARSE_ERROR || size == 0)
		return 0;
	/* Prefixes of something acceptable are only ever incomplete. */
	size_t cuts[] = { 0, 1, size / 2, size - 1, data[0] % size, data[size - 1] % size };
	for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
		struct http_response p;
		CHECK(parse_copy(data, cuts[i], &p) == HTTP_PARSE_INCOMPLETE);
	}
	struct http_response again;
	CHECK(parse_copy(data, size, &again) == st);
	return 0;
}
