#define _GNU_SOURCE /* memmem */
#include "http.h"

#include <string.h>

static int is_tchar(unsigned char c)
{
	if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
		return 1;
	return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* Field values and reason phrases: HTAB, SP, visible ASCII, and obs-text. */
static int is_text(unsigned char c)
{
	return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static int name_is(const char *name, size_t n, const char *want)
{
	return strlen(want) == n && strncasecmp(name, want, n) == 0;
}

static enum http_parse_status fail(struct http_response *out, const char *why)
{
	out->error = why;
	return HTTP_PARSE_ERROR;
}

enum http_parse_status http_response_parse(const char *data, size_t len, size_t max_body, struct http_response *out)
{
	static const char proto[] = "HTTP/1.";
	memset(out, 0, sizeof(*out));
	out->exit_code = -1;

	if (len == 0)
		return HTTP_PARSE_INCOMPLETE;
	/* Garbage is refused from its first bytes, not after waiting for a header that never ends. */
	size_t k = len < sizeof(proto) - 1 ? len : sizeof(proto) - 1;
	if (memcmp(data, proto, k) != 0)
		return fail(out, "not an HTTP response");
	if (len > 7 && data[7] != '0' && data[7] != '1')
		return fail(out, "not HTTP/1.0 or HTTP/1.1");

	size_t window = len < HTTP_MAX_HEADER ? len : HTTP_MAX_HEADER;
	const char *end = memmem(data, window, "\r\n\r\n", 4);
	if (!end)
		return len >= HTTP_MAX_HEADER ? fail(out, "header section too large") : HTTP_PARSE_INCOMPLETE;
	size_t header_len = (size_t)(end - data) + 4;

	/* Status line: HTTP/1.x SP 3DIGIT [SP reason] CRLF */
	const char *line_end = memmem(data, header_len, "\r\n", 2);
	size_t line_len = (size_t)(line_end - data);
	if (line_len < 12 || data[8] != ' ')
		return fail(out, "malformed status line");
	int status = 0;
	for (size_t i = 9; i < 12; i++) {
		if (data[i] < '0' || data[i] > '9')
			return fail(out, "malformed status code");
		status = status * 10 + (data[i] - '0');
	}
	if (status < 100 || status > 599)
		return fail(out, "status code out of range");
	if (line_len > 12) {
		if (data[12] != ' ')
			return fail(out, "malformed status line");
		for (size_t i = 13; i < line_len; i++)
			if (!is_text((unsigned char)data[i]))
				return fail(out, "control character in status line");
	}

	int have_length = 0;
	size_t content_length = 0;
	size_t pos = line_len + 2;
	for (;;) {
		line_end = memmem(data + pos, header_len - pos, "\r\n", 2);
		line_len = (size_t)(line_end - (data + pos));
		if (line_len == 0)
			break; /* the blank line ending the header section */
		const char *line = data + pos;
		if (line[0] == ' ' || line[0] == '\t')
			return fail(out, "folded header line");
		const char *colon = memchr(line, ':', line_len);
		if (!colon || colon == line)
			return fail(out, "malformed header line");
		size_t name_len = (size_t)(colon - line);
		for (size_t i = 0; i < name_len; i++)
			if (!is_tchar((unsigned char)line[i]))
				return fail(out, "malformed header name");
		const char *v = colon + 1;
		const char *v_end = line + line_len;
		for (const char *q = v; q < v_end; q++)
			if (!is_text((unsigned char)*q))
				return fail(out, "control character in header value");
		while (v < v_end && (*v == ' ' || *v == '\t'))
			v++;
		while (v_end > v && (v_end[-1] == ' ' || v_end[-1] == '\t'))
			v_end--;
		size_t v_len = (size_t)(v_end - v);

		if (name_is(line, name_len, "Content-Length")) {
			if (have_length)
				return fail(out, "repeated Content-Length");
			if (v_len == 0)
				return fail(out, "malformed Content-Length");
			for (size_t i = 0; i < v_len; i++) {
				if (v[i] < '0' || v[i] > '9')
					return fail(out, "malformed Content-Length");
				size_t digit = (size_t)(v[i] - '0');
				if (digit > max_body || content_length > (max_body - digit) / 10)
					return fail(out, "body too large");
				content_length = content_length * 10 + digit;
			}
			have_length = 1;
		} else if (name_is(line, name_len, "Transfer-Encoding")) {
			return fail(out, "Transfer-Encoding is not supported");
		} else if (name_is(line, name_len, HTTP_EXIT_CODE_HEADER)) {
			if (out->exit_code != -1)
				return fail(out, "repeated " HTTP_EXIT_CODE_HEADER);
			if (v_len != 1 || (v[0] != '0' && v[0] != '1'))
				return fail(out, "malformed " HTTP_EXIT_CODE_HEADER);
			out->exit_code = v[0] - '0';
		}
		pos += line_len + 2;
	}
	if (!have_length)
		return fail(out, "no Content-Length");

	out->status = status;
	out->header_len = header_len;
	out->content_length = content_length;
	if (len - header_len < content_length)
		return HTTP_PARSE_INCOMPLETE;
	if (len - header_len > content_length)
		return fail(out, "bytes after the body");
	out->body = data + header_len;
	return HTTP_PARSE_COMPLETE;
}

int http_post_request(struct buf *out, const char *path, const char *body, size_t body_len)
{
	if (buf_printf(out,
		       "POST %s HTTP/1.1\r\n"
		       "Host: localhost\r\n"
		       "Content-Type: application/json\r\n"
		       "Content-Length: %zu\r\n"
		       "Connection: close\r\n"
		       "\r\n",
		       path, body_len) < 0)
		return -1;
	return buf_append(out, body, body_len);
}
