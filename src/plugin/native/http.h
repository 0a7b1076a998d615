/* The one HTTP exchange the relay makes: building the request, and a strict
 * parser for the agent's answer that can be fed a growing prefix of it. */
#ifndef TENDRIL_CNI_HTTP_H
#define TENDRIL_CNI_HTTP_H

#include <stddef.h>

#include "buf.h"

/* The answer's header section may not be longer than this. */
#define HTTP_MAX_HEADER 16384

/* The response header that carries the exit code tendril-cni must exit with. */
#define HTTP_EXIT_CODE_HEADER "Tendril-Cni-Exit-Code"

enum http_parse_status {
	HTTP_PARSE_INCOMPLETE, /* a valid prefix: read more */
	HTTP_PARSE_COMPLETE,
	HTTP_PARSE_ERROR,
};

struct http_response {
	int status;             /* 100..599 */
	int exit_code;          /* 0 or 1 from HTTP_EXIT_CODE_HEADER; -1 when absent */
	size_t header_len;      /* up to and including the blank line */
	size_t content_length;
	const char *body;       /* points into the parsed bytes; content_length long */
	const char *error;      /* why, on HTTP_PARSE_ERROR (a static string) */
};

/*
 * Parses data[0..len) as one complete HTTP/1.x response with a
 * Content-Length no larger than max_body and nothing after the body.
 * Anything else (chunked coding, folded or malformed header lines, a
 * second Content-Length, bytes past the body) is an error.
 */
enum http_parse_status http_response_parse(const char *data, size_t len, size_t max_body, struct http_response *out);

/* POST `path` with a JSON body over a connection the server is asked to close. */
int http_post_request(struct buf *out, const char *path, const char *body, size_t body_len);

#endif
