#include "json.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int json_escape(struct buf *out, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t run = 0; /* start of the bytes not yet appended */
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[6];
		size_t elen = 2;
		esc[0] = '\\';
		switch (c) {
		case '"': esc[1] = '"'; break;
		case '\\': esc[1] = '\\'; break;
		case '\b': esc[1] = 'b'; break;
		case '\f': esc[1] = 'f'; break;
		case '\n': esc[1] = 'n'; break;
		case '\r': esc[1] = 'r'; break;
		case '\t': esc[1] = 't'; break;
		default:
			if (c >= 0x20)
				continue;
			esc[1] = 'u';
			esc[2] = '0';
			esc[3] = '0';
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 0xf];
			elen = 6;
		}
		if (buf_append(out, s + run, i - run) < 0 || buf_append(out, esc, elen) < 0)
			return -1;
		run = i + 1;
	}
	return buf_append(out, s + run, n - run);
}

int json_quote(struct buf *out, const char *s, size_t n)
{
	if (buf_append(out, "\"", 1) < 0 || json_escape(out, s, n) < 0)
		return -1;
	return buf_append(out, "\"", 1);
}

static int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* The 16-bit unit of a \uXXXX whose four hex digits start at p (already validated). */
static unsigned hex4(const char *p)
{
	return (unsigned)(hex_value(p[0]) << 12 | hex_value(p[1]) << 8 | hex_value(p[2]) << 4 | hex_value(p[3]));
}

static size_t utf8_encode(uint32_t cp, char *out)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xc0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xe0 | cp >> 12);
		out[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | cp >> 18);
	out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
	out[2] = (char)(0x80 | (cp >> 6 & 0x3f));
	out[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

size_t json_string_decode(const char *raw, size_t n, char *out)
{
	size_t o = 0;
	size_t i = 0;
	while (i < n) {
		if (raw[i] != '\\') {
			out[o++] = raw[i++];
			continue;
		}
		char e = raw[i + 1];
		i += 2;
		switch (e) {
		case 'b': out[o++] = '\b'; continue;
		case 'f': out[o++] = '\f'; continue;
		case 'n': out[o++] = '\n'; continue;
		case 'r': out[o++] = '\r'; continue;
		case 't': out[o++] = '\t'; continue;
		case 'u': break;
		default: out[o++] = e; continue; /* " \ / */
		}
		uint32_t cp = hex4(raw + i);
		i += 4;
		if (cp >= 0xd800 && cp <= 0xdbff && n - i >= 6 && raw[i] == '\\' && raw[i + 1] == 'u') {
			unsigned lo = hex4(raw + i + 2);
			if (lo >= 0xdc00 && lo <= 0xdfff) {
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				i += 6;
			}
		}
		if (cp >= 0xd800 && cp <= 0xdfff)
			cp = 0xfffd;
		/* Never longer than its escape: 6 raw bytes give at most 3, a pair's 12 give 4. */
		o += utf8_encode(cp, out + o);
	}
	return o;
}

struct scanner {
	const char *p;
	size_t n;
	size_t i;
	struct json_scan_error *err;
};

static int fail(struct scanner *s, const char *reason)
{
	if (s->err) {
		s->err->offset = s->i;
		s->err->reason = reason;
	}
	return -1;
}

static void skip_ws(struct scanner *s)
{
	while (s->i < s->n) {
		char c = s->p[s->i];
		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			return;
		s->i++;
	}
}

/* At an opening quote; leaves i after the closing one. */
static int scan_string(struct scanner *s)
{
	s->i++;
	for (;;) {
		if (s->i >= s->n)
			return fail(s, "unterminated string");
		unsigned char c = (unsigned char)s->p[s->i];
		if (c == '"') {
			s->i++;
			return 0;
		}
		if (c < 0x20)
			return fail(s, "control character in string");
		if (c != '\\') {
			s->i++;
			continue;
		}
		if (s->n - s->i < 2)
			return fail(s, "unterminated string");
		switch (s->p[s->i + 1]) {
		case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
			s->i += 2;
			break;
		case 'u':
			if (s->n - s->i < 6)
				return fail(s, "unterminated string");
			for (size_t k = 2; k < 6; k++)
				if (hex_value(s->p[s->i + k]) < 0)
					return fail(s, "bad \\u escape");
			s->i += 6;
			break;
		default:
			return fail(s, "bad escape");
		}
	}
}

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static int scan_digits(struct scanner *s)
{
	if (s->i >= s->n || !is_digit(s->p[s->i]))
		return fail(s, "expected a digit");
	while (s->i < s->n && is_digit(s->p[s->i]))
		s->i++;
	return 0;
}

static int scan_number(struct scanner *s)
{
	if (s->p[s->i] == '-')
		s->i++;
	if (s->i < s->n && s->p[s->i] == '0')
		s->i++;
	else if (scan_digits(s) < 0)
		return -1;
	if (s->i < s->n && s->p[s->i] == '.') {
		s->i++;
		if (scan_digits(s) < 0)
			return -1;
	}
	if (s->i < s->n && (s->p[s->i] == 'e' || s->p[s->i] == 'E')) {
		s->i++;
		if (s->i < s->n && (s->p[s->i] == '+' || s->p[s->i] == '-'))
			s->i++;
		if (scan_digits(s) < 0)
			return -1;
	}
	return 0;
}

static int scan_literal(struct scanner *s, const char *word)
{
	size_t len = strlen(word);
	if (s->n - s->i < len || memcmp(s->p + s->i, word, len) != 0)
		return fail(s, "unexpected character");
	s->i += len;
	return 0;
}

/* Field names longer than this never match; decoding shrinks at most 6:1. */
#define KEY_DECODE_MAX 128
#define FIELD_NAME_MAX (KEY_DECODE_MAX / 6)

/* The index of the field named by the raw key, or -1. */
static long match_field(const char *raw, size_t n, const struct json_field *fields, size_t nfields)
{
	if (n > KEY_DECODE_MAX)
		return -1;
	char key[KEY_DECODE_MAX];
	size_t klen = json_string_decode(raw, n, key);
	for (size_t f = 0; f < nfields; f++) {
		size_t flen = strlen(fields[f].name);
		if (flen <= FIELD_NAME_MAX && flen == klen && memcmp(fields[f].name, key, klen) == 0)
			return (long)f;
	}
	return -1;
}

enum state { VALUE, KEY, AFTER };

enum json_scan_status json_scan_object(const char *in, size_t n, struct json_field *fields, size_t nfields,
				       struct json_scan_error *err)
{
	struct scanner s = { .p = in, .n = n, .i = 0, .err = err };
	for (size_t f = 0; f < nfields; f++) {
		fields[f].kind = JSON_FIELD_ABSENT;
		fields[f].start = 0;
		fields[f].len = 0;
	}
	/* One bit per open container (1 = object); every level opens with a byte, so depth <= n. */
	unsigned char *objects = calloc(n / 8 + 1, 1);
	if (!objects)
		return JSON_SCAN_NO_MEMORY;
	size_t depth = 0;
	int root_is_object = 0;
	long pending = -1; /* the field whose value comes next */
	enum state st = VALUE;
	int bad = 0;

	skip_ws(&s);
	for (;;) {
		if (st == VALUE) {
			if (s.i >= s.n) {
				bad = fail(&s, "unexpected end of input");
				break;
			}
			char c = s.p[s.i];
			size_t start = s.i;
			if (c == '{' || c == '[') {
				if (depth == 0)
					root_is_object = c == '{';
				if (pending >= 0)
					fields[pending].kind = JSON_FIELD_OTHER;
				pending = -1;
				if (c == '{')
					objects[depth / 8] |= (unsigned char)(1u << (depth % 8));
				else
					objects[depth / 8] &= (unsigned char)~(1u << (depth % 8));
				depth++;
				s.i++;
				skip_ws(&s);
				if (s.i < s.n && s.p[s.i] == (c == '{' ? '}' : ']')) {
					s.i++;
					depth--;
					st = AFTER;
				} else {
					st = c == '{' ? KEY : VALUE;
				}
				continue;
			}
			int r;
			if (c == '"')
				r = scan_string(&s);
			else if (c == '-' || is_digit(c))
				r = scan_number(&s);
			else if (c == 't')
				r = scan_literal(&s, "true");
			else if (c == 'f')
				r = scan_literal(&s, "false");
			else if (c == 'n')
				r = scan_literal(&s, "null");
			else
				r = fail(&s, "unexpected character");
			if (r < 0) {
				bad = -1;
				break;
			}
			if (pending >= 0) {
				if (c == '"') {
					fields[pending].kind = JSON_FIELD_STRING;
					fields[pending].start = start + 1;
					fields[pending].len = s.i - start - 2;
				} else {
					fields[pending].kind = JSON_FIELD_OTHER;
				}
				pending = -1;
			}
			st = AFTER;
		} else if (st == KEY) {
			if (s.i >= s.n || s.p[s.i] != '"') {
				bad = fail(&s, s.i >= s.n ? "unexpected end of input" : "expected a string key");
				break;
			}
			size_t start = s.i;
			if (scan_string(&s) < 0) {
				bad = -1;
				break;
			}
			if (depth == 1)
				pending = match_field(s.p + start + 1, s.i - start - 2, fields, nfields);
			skip_ws(&s);
			if (s.i >= s.n || s.p[s.i] != ':') {
				bad = fail(&s, "expected ':'");
				break;
			}
			s.i++;
			skip_ws(&s);
			st = VALUE;
		} else {
			skip_ws(&s);
			if (depth == 0) {
				if (s.i != s.n)
					bad = fail(&s, "unexpected data after the document");
				break;
			}
			int in_object = (objects[(depth - 1) / 8] >> ((depth - 1) % 8)) & 1;
			if (s.i >= s.n) {
				bad = fail(&s, "unexpected end of input");
				break;
			}
			char c = s.p[s.i];
			if (c == ',') {
				s.i++;
				skip_ws(&s);
				st = in_object ? KEY : VALUE;
			} else if (c == (in_object ? '}' : ']')) {
				s.i++;
				depth--;
			} else {
				bad = fail(&s, in_object ? "expected ',' or '}'" : "expected ',' or ']'");
				break;
			}
		}
	}
	free(objects);
	if (bad < 0) {
		for (size_t f = 0; f < nfields; f++)
			fields[f].kind = JSON_FIELD_ABSENT;
		return JSON_SCAN_INVALID;
	}
	if (!root_is_object) {
		for (size_t f = 0; f < nfields; f++)
			fields[f].kind = JSON_FIELD_ABSENT;
		return JSON_SCAN_NOT_OBJECT;
	}
	return JSON_SCAN_OK;
}
