/*
 * tendril-cni: exec'd by the container runtime once per CNI call. It answers
 * VERSION itself and relays every other verb, with its environment and
 * stdin, to the tendril agent's POST /v1/cni over the agent's unix socket,
 * then prints the agent's answer verbatim and exits with the exit code the
 * agent chose. All CNI logic (validation, version negotiation, result
 * conversion) is the agent's; see api/openapi.yaml (/cni).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "buf.h"
#include "cni.h"
#include "http.h"
#include "io.h"
#include "json.h"
#include "queue.h"
#include "relay.h"

#define ABOUT "tendril-cni: CNI plugin of the tendril node agent"
#define DEFAULT_SOCKET "/var/run/tendril/tendril.sock"
#define SOCKET_ENV "TENDRIL_SOCK"
#define TIMEOUT_ENV "TENDRIL_CNI_TIMEOUT_MS"

/* The API's limit on the relayed config (api/openapi.yaml, CniRequest.config). */
#define STDIN_LIMIT (1024 * 1024)
/* An answer is a CNI result or error: far below this. */
#define ANSWER_BODY_LIMIT (4 * 1024 * 1024)
/* Bounds on the request we build: the escaped config plus the CNI_* variables (each under 128 KiB, MAX_ARG_STRLEN). */
#define REQUEST_LIMIT (6 * STDIN_LIMIT + 6 * 6 * 128 * 1024 + 4096)

/*
 * Time bounds, each for the whole call (reading stdin included). ADD waits
 * for the endpoint to be in force, which can mean the agent waiting on its
 * kvstore, so ADD, CHECK and GC get 5 minutes: the bound is there so a
 * wedged agent cannot keep the plugin forever, and runtimes usually give up
 * sooner. DEL gets 10 s: a DEL the agent does not answer in time is queued
 * (as when it is down) and succeeds, since a failed DEL only makes the
 * runtime retry it against the same stuck agent. STATUS and VERSION are
 * questions and get 30 s. A live agent accepts a connection at once, so
 * connecting gets 5 s, after which the agent counts as unreachable.
 * TENDRIL_CNI_TIMEOUT_MS replaces the call's bound (tests use it; so may an
 * operator).
 */
#define CHANGE_TIMEOUT_MS (300 * 1000)
#define DEL_TIMEOUT_MS (10 * 1000)
#define QUESTION_TIMEOUT_MS (30 * 1000)
#define CONNECT_TIMEOUT_MS (5 * 1000)
#define TIMEOUT_MAX_MS (3600 * 1000)

enum verb { VERB_VERSION, VERB_ADD, VERB_DEL, VERB_CHECK, VERB_GC, VERB_STATUS, VERB_UNKNOWN };

static const char *const verb_names[] = { "VERSION", "ADD", "DEL", "CHECK", "GC", "STATUS" };

static enum verb parse_verb(const char *s)
{
	for (size_t i = 0; i < sizeof(verb_names) / sizeof(verb_names[0]); i++)
		if (strcmp(s, verb_names[i]) == 0)
			return (enum verb)i;
	return VERB_UNKNOWN;
}

/* Prints what the runtime reads on stdout; exit code 1 if even that fails. */
static int print_stdout(const char *p, size_t n, int exit_code)
{
	if (write_all(STDOUT_FILENO, p, n) < 0) {
		fprintf(stderr, "tendril-cni: writing the answer to stdout: %s\n", strerror(errno));
		return 1;
	}
	return exit_code;
}

/* Prints a CNI error; always returns the exit code 1. */
static int cni_fail(int code, const char *msg, const char *details, const char *version)
{
	struct buf out;
	buf_init(&out, 1024 * 1024);
	if (cni_error_json(&out, code, msg, details, version) < 0) {
		buf_free(&out);
		fprintf(stderr, "tendril-cni: cannot format the error %d: %s\n", code, msg);
		return 1;
	}
	print_stdout(out.data, out.len, 1);
	buf_free(&out);
	return 1;
}

enum stdin_status { STDIN_OK, STDIN_TOO_LARGE, STDIN_ERROR, STDIN_TIMEOUT };

/* Reads stdin to its end, at most STDIN_LIMIT bytes (in's limit), until deadline. */
static enum stdin_status read_stdin(struct buf *in, int64_t deadline, int *err)
{
	for (;;) {
		int64_t left = deadline - relay_now_ms();
		if (left <= 0)
			return STDIN_TIMEOUT;
		struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
		int r = poll(&p, 1, left > 60000 ? 60000 : (int)left);
		if (r < 0 && errno != EINTR) {
			*err = errno;
			return STDIN_ERROR;
		}
		if (r <= 0)
			continue;
		if (p.revents & POLLNVAL) {
			*err = EBADF;
			return STDIN_ERROR;
		}
		/* One byte past the limit tells a config that is too large from one that fits exactly. */
		char *dst;
		size_t want;
		char extra;
		if (in->len == in->limit) {
			dst = &extra;
			want = 1;
		} else {
			want = in->limit - in->len < 65536 ? in->limit - in->len : 65536;
			if (buf_reserve(in, want) < 0) {
				*err = ENOMEM;
				return STDIN_ERROR;
			}
			dst = in->data + in->len;
		}
		ssize_t n = read(STDIN_FILENO, dst, want);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			*err = errno;
			return STDIN_ERROR;
		}
		if (n == 0)
			return STDIN_OK;
		if (dst == &extra)
			return STDIN_TOO_LARGE;
		in->len += (size_t)n;
		in->data[in->len] = '\0';
	}
}

/* VERSION: the input's cniVersion when it is one (digits.digits.digits), else the newest. */
static int version_command(const struct buf *in, enum stdin_status st)
{
	char *echoed = NULL;
	const char *answer = cni_newest_version();
	struct json_field f = { .name = "cniVersion" };
	/* A runtime may send no stdin, or none worth reading: then the newest, as the TypeScript skel did. */
	if (st == STDIN_OK && json_scan_object(buf_cstr(in), in->len, &f, 1, NULL) == JSON_SCAN_OK &&
	    f.kind == JSON_FIELD_STRING && (echoed = malloc(f.len + 1)) != NULL) {
		size_t n = json_string_decode(buf_cstr(in) + f.start, f.len, echoed);
		echoed[n] = '\0';
		if (cni_version_shaped(echoed, n))
			answer = echoed;
	}
	struct buf out;
	buf_init(&out, 2 * STDIN_LIMIT);
	int rc = cni_version_answer(&out, answer) < 0 ? cni_fail(CNI_ERR_INTERNAL, "out of memory", NULL, NULL)
						      : print_stdout(out.data, out.len, 0);
	buf_free(&out);
	free(echoed);
	return rc;
}

/* A string for an error's details: NUL bytes (which end C strings) shown as spaces. */
static void excerpt(char *dst, size_t cap, const char *src, size_t n)
{
	size_t k = n < cap - 1 ? n : cap - 1;
	for (size_t i = 0; i < k; i++)
		dst[i] = src[i] ? src[i] : ' ';
	dst[k] = '\0';
}

/* An answer that is not the CNI output: name the status and, when the agent said why, its message. */
static int refused(const struct http_response *h, const char *version)
{
	/* The agent's ErrorResponse names the problem in "message". */
	struct json_field f = { .name = "message" };
	char message[512] = "";
	char details[1024];
	if (json_scan_object(h->body, h->content_length, &f, 1, NULL) == JSON_SCAN_OK && f.kind == JSON_FIELD_STRING) {
		char *decoded = malloc(f.len + 1);
		if (decoded) {
			size_t n = json_string_decode(h->body + f.start, f.len, decoded);
			excerpt(message, sizeof(message), decoded, n);
			free(decoded);
		}
	} else {
		excerpt(message, sizeof(message), h->body, h->content_length < 200 ? h->content_length : 200);
	}
	if (h->status == 200)
		snprintf(details, sizeof(details), "HTTP 200 without a " HTTP_EXIT_CODE_HEADER " header: %s", message);
	else
		snprintf(details, sizeof(details), "HTTP %d: %s", h->status, message);
	return cni_fail(CNI_ERR_INTERNAL, "the tendril agent did not answer with CNI output", details, version);
}

struct call_context {
	enum verb verb;
	const char *socket;
	const char *version; /* for the relay's own errors */
	int timeout_ms;
};

/*
 * DEL must not fail because the agent is down or stuck: it is queued, and the
 * agent drains the queue when it starts. A stuck agent may also still do the
 * DEL it received once it runs again; DEL is idempotent, so the queued copy
 * then finds nothing left to do.
 */
static int queue_deletion(const struct call_context *c, const struct buf *body, const char *why)
{
	struct buf path, qwhy;
	buf_init(&path, 8192);
	buf_init(&qwhy, 8192);
	int rc = 0;
	if (deletion_queue_write(c->socket, body->data, body->len, &path, &qwhy) < 0) {
		char details[2048];
		snprintf(details, sizeof(details), "%s; %s", why, buf_cstr(&qwhy));
		rc = cni_fail(CNI_ERR_IO, "tendril agent unreachable or not answering, and the deletion could not be queued", details, c->version);
	} else {
		fprintf(stderr, "tendril-cni: %s; the deletion is queued in %s\n", why, buf_cstr(&path));
	}
	buf_free(&path);
	buf_free(&qwhy);
	return rc;
}

static int unreachable(const struct call_context *c, const struct buf *body, const char *why)
{
	if (c->verb == VERB_DEL)
		return queue_deletion(c, body, why);
	if (c->verb == VERB_STATUS)
		return cni_fail(CNI_ERR_NOT_AVAILABLE, "tendril agent is not running", why, c->version);
	return cni_fail(CNI_ERR_TRY_AGAIN_LATER, "tendril agent is unreachable; try again later", why, c->version);
}

static int relay(const struct call_context *c, const struct buf *body)
{
	struct buf req;
	buf_init(&req, REQUEST_LIMIT + 1024);
	if (http_post_request(&req, "/v1/cni", body->data, body->len) < 0) {
		buf_free(&req);
		return cni_fail(CNI_ERR_INTERNAL, "cannot build the request to the tendril agent", "out of memory", c->version);
	}
	int64_t now = relay_now_ms();
	struct relay_result r;
	relay_exchange(c->socket, req.data, req.len, now + CONNECT_TIMEOUT_MS, now + c->timeout_ms, ANSWER_BODY_LIMIT, &r);
	buf_free(&req);

	int rc;
	char details[1024];
	switch (r.outcome) {
	case RELAY_ANSWERED:
		if (r.http.status == 200 && r.http.exit_code >= 0)
			rc = print_stdout(r.http.body, r.http.content_length, r.http.exit_code);
		else
			rc = refused(&r.http, c->version);
		break;
	case RELAY_UNREACHABLE:
		rc = unreachable(c, body, r.detail);
		break;
	case RELAY_TIMEOUT:
		snprintf(details, sizeof(details), "%s: %s", c->socket, r.detail);
		if (c->verb == VERB_DEL)
			rc = queue_deletion(c, body, details);
		else if (c->verb == VERB_STATUS)
			rc = cni_fail(CNI_ERR_NOT_AVAILABLE, "tendril agent is not answering", details, c->version);
		else
			rc = cni_fail(CNI_ERR_TRY_AGAIN_LATER, "tendril agent did not answer in time; try again later", details,
				      c->version);
		break;
	default:
		snprintf(details, sizeof(details), "%s: %s", c->socket, r.detail);
		rc = cni_fail(CNI_ERR_INTERNAL, "invalid answer from the tendril agent", details, c->version);
		break;
	}
	buf_free(&r.response);
	return rc;
}

/* The netconf's socket, else TENDRIL_SOCK, else the default; NULL after printing an error. */
static const char *socket_path(const char *config, const struct json_field *f, char *decoded, const char *version)
{
	const char *path = NULL;
	size_t len = 0;
	if (f->kind == JSON_FIELD_OTHER) {
		cni_fail(CNI_ERR_INVALID_CONFIG, "netconf field \"socket\" must be a string", NULL, version);
		return NULL;
	}
	if (f->kind == JSON_FIELD_STRING && f->len > 0) {
		len = json_string_decode(config + f->start, f->len, decoded);
		decoded[len] = '\0';
		path = decoded;
	} else {
		const char *env = getenv(SOCKET_ENV);
		path = env && *env ? env : DEFAULT_SOCKET;
		len = strlen(path);
	}
	int dotdot = 0;
	for (const char *seg = path; seg && *seg;) {
		const char *next = strchr(seg, '/');
		size_t seg_len = next ? (size_t)(next - seg) : strlen(seg);
		if (seg_len == 2 && seg[0] == '.' && seg[1] == '.')
			dotdot = 1;
		seg = next ? next + 1 : NULL;
	}
	if (path[0] != '/' || memchr(path, '\0', len) != NULL || dotdot) {
		char shown[512];
		excerpt(shown, sizeof(shown), path, len);
		cni_fail(CNI_ERR_INVALID_CONFIG, "invalid agent socket path: must be an absolute path without '..'", shown,
			 version);
		return NULL;
	}
	if (len >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		cni_fail(CNI_ERR_INVALID_CONFIG, "invalid agent socket path: longer than a unix socket address allows", path,
			 version);
		return NULL;
	}
	return path;
}

static int timeout_ms(enum verb v, int *out)
{
	const char *s = getenv(TIMEOUT_ENV);
	*out = v == VERB_STATUS || v == VERB_VERSION ? QUESTION_TIMEOUT_MS : v == VERB_DEL ? DEL_TIMEOUT_MS : CHANGE_TIMEOUT_MS;
	if (!s || !*s)
		return 0;
	char *end;
	errno = 0;
	long ms = strtol(s, &end, 10);
	if (errno || *end || end == s || ms < 1 || ms > TIMEOUT_MAX_MS)
		return -1;
	*out = (int)ms;
	return 0;
}

static int relayed_command(enum verb verb, const char *command, const struct buf *in, enum stdin_status st, int err,
			   int timeout)
{
	const char *newest = cni_newest_version();
	if (st == STDIN_TOO_LARGE)
		return cni_fail(CNI_ERR_INVALID_CONFIG, "network config too large",
				"more than 1048576 bytes on stdin, the most the agent's API takes", newest);
	if (st == STDIN_TIMEOUT)
		return cni_fail(CNI_ERR_IO, "error reading from stdin: timed out", NULL, newest);
	if (st == STDIN_ERROR)
		return cni_fail(CNI_ERR_IO, "error reading from stdin", strerror(err), newest);

	const char *config = buf_cstr(in);
	struct json_field f[2] = { { .name = "cniVersion" }, { .name = "socket" } };
	struct json_scan_error jerr = { 0, "" };
	switch (json_scan_object(config, in->len, f, 2, &jerr)) {
	case JSON_SCAN_OK:
		break;
	case JSON_SCAN_NOT_OBJECT:
		return cni_fail(CNI_ERR_DECODING, "error unmarshalling network config: not a JSON object", NULL, newest);
	case JSON_SCAN_INVALID: {
		char details[256];
		snprintf(details, sizeof(details), "%s at byte %zu", jerr.reason, jerr.offset);
		return cni_fail(CNI_ERR_DECODING, "error unmarshalling network config", details, newest);
	}
	default:
		return cni_fail(CNI_ERR_INTERNAL, "out of memory", NULL, newest);
	}

	/* The relay's own errors speak the config's version when tendril supports it. */
	const char *version = newest;
	char version_buf[16];
	if (f[0].kind == JSON_FIELD_STRING && f[0].len < sizeof(version_buf)) {
		size_t n = json_string_decode(config + f[0].start, f[0].len, version_buf);
		if (cni_version_supported(version_buf, n)) {
			version_buf[n] = '\0';
			version = version_buf;
		}
	}

	char *decoded = malloc(f[1].len + 1);
	if (!decoded)
		return cni_fail(CNI_ERR_INTERNAL, "out of memory", NULL, version);
	const char *sock = socket_path(config, &f[1], decoded, version);
	if (!sock) {
		free(decoded);
		return 1;
	}

	struct cni_call call = {
		.command = command,
		.container_id = getenv("CNI_CONTAINERID"),
		.netns = getenv("CNI_NETNS"),
		.ifname = getenv("CNI_IFNAME"),
		.args = getenv("CNI_ARGS"),
		.path = getenv("CNI_PATH"),
		.config = config,
		.config_len = in->len,
	};
	struct buf body;
	buf_init(&body, REQUEST_LIMIT);
	int rc;
	if (cni_request_json(&body, &call) < 0) {
		rc = cni_fail(CNI_ERR_INTERNAL, "cannot build the request to the tendril agent", "out of memory", version);
	} else {
		struct call_context c = { .verb = verb, .socket = sock, .version = version, .timeout_ms = timeout };
		rc = relay(&c, &body);
	}
	buf_free(&body);
	free(decoded);
	return rc;
}

int main(void)
{
	/* A runtime that stops reading our stdout must not kill us mid-write; writes report EPIPE instead. */
	signal(SIGPIPE, SIG_IGN);

	const char *command = getenv("CNI_COMMAND");
	if (!command || !*command) {
		/* Run by hand: say what this is, as CNI plugins do. */
		fprintf(stderr, ABOUT "\nCNI protocol versions supported: ");
		for (size_t i = 0; i < cni_supported_count; i++)
			fprintf(stderr, "%s%s", i ? ", " : "", cni_supported_versions[i]);
		fprintf(stderr, "\n");
		return 0;
	}
	enum verb verb = parse_verb(command);
	if (verb == VERB_UNKNOWN) {
		struct buf msg;
		buf_init(&msg, 256 * 1024);
		int ok = buf_printf(&msg, "unknown CNI_COMMAND: %s", command) == 0;
		int rc = cni_fail(CNI_ERR_INVALID_ENV, ok ? msg.data : "unknown CNI_COMMAND", NULL, cni_newest_version());
		buf_free(&msg);
		return rc;
	}
	int timeout;
	if (timeout_ms(verb, &timeout) < 0 && verb != VERB_VERSION)
		return cni_fail(CNI_ERR_INVALID_ENV, "invalid " TIMEOUT_ENV ": a number of milliseconds from 1 to 3600000",
				getenv(TIMEOUT_ENV), cni_newest_version());

	struct buf in;
	buf_init(&in, STDIN_LIMIT);
	int err = 0;
	enum stdin_status st = read_stdin(&in, relay_now_ms() + timeout, &err);
	int rc = verb == VERB_VERSION ? version_command(&in, st) : relayed_command(verb, command, &in, st, err, timeout);
	buf_free(&in);
	return rc;
}
