#include "relay.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* How much to read per recv, and how long to wait before retrying a connect a full backlog refused. */
#define READ_CHUNK 65536
#define BACKLOG_RETRY_MS 10

int64_t relay_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void set_outcome(struct relay_result *r, enum relay_outcome o, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void set_outcome(struct relay_result *r, enum relay_outcome o, const char *fmt, ...)
{
	r->outcome = o;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(r->detail, sizeof(r->detail), fmt, ap);
	va_end(ap);
	if (n < 0)
		r->detail[0] = '\0'; /* a truncated detail is still a detail; a failed one is none */
}

/* Waits for `events` on fd until deadline: 1 ready, 0 timed out, -1 error. */
static int wait_for(int fd, short events, int64_t deadline)
{
	for (;;) {
		int64_t left = deadline - relay_now_ms();
		if (left <= 0)
			return 0;
		struct pollfd p = { .fd = fd, .events = events };
		int r = poll(&p, 1, left > 60000 ? 60000 : (int)left);
		if (r > 0)
			return 1;
		if (r < 0 && errno != EINTR)
			return -1;
	}
}

static int connect_socket(int fd, const char *path, int64_t deadline, struct relay_result *r)
{
	struct sockaddr_un addr;
	memset(&addr, 0, sizeof(addr));
	addr.sun_family = AF_UNIX;
	size_t len = strlen(path);
	if (len >= sizeof(addr.sun_path)) {
		set_outcome(r, RELAY_UNREACHABLE, "socket path %s is too long", path);
		return -1;
	}
	memcpy(addr.sun_path, path, len + 1);
	for (;;) {
		if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0)
			return 0;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN) {
			set_outcome(r, RELAY_UNREACHABLE, "cannot reach the tendril agent at %s: connect: %s", path,
				    strerror(errno));
			return -1;
		}
		/* A unix socket's full backlog: no connection is in progress, so try again shortly. */
		if (relay_now_ms() >= deadline) {
			set_outcome(r, RELAY_UNREACHABLE, "cannot reach the tendril agent at %s: connect: timed out", path);
			return -1;
		}
		poll(NULL, 0, BACKLOG_RETRY_MS);
	}
}

/* 0 sent (or the peer stopped reading: its answer may already be there), -1 r is set. */
static int send_request(int fd, const char *req, size_t len, int64_t deadline, struct relay_result *r)
{
	size_t sent = 0;
	while (sent < len) {
		int w = wait_for(fd, POLLOUT, deadline);
		if (w == 0) {
			set_outcome(r, RELAY_TIMEOUT, "sending the request timed out after %zu of %zu bytes", sent, len);
			return -1;
		}
		if (w < 0) {
			set_outcome(r, RELAY_UNREACHABLE, "poll: %s", strerror(errno));
			return -1;
		}
		ssize_t n = send(fd, req + sent, len - sent, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			if (errno == EPIPE || errno == ECONNRESET)
				return 0;
			set_outcome(r, RELAY_UNREACHABLE, "send: %s", strerror(errno));
			return -1;
		}
		sent += (size_t)n;
	}
	return 0;
}

static void receive_answer(int fd, int64_t deadline, size_t max_body, struct relay_result *r)
{
	for (;;) {
		int w = wait_for(fd, POLLIN, deadline);
		if (w == 0) {
			set_outcome(r, RELAY_TIMEOUT, "no complete answer in time (%zu bytes received)", r->response.len);
			return;
		}
		if (w < 0) {
			set_outcome(r, RELAY_BAD_ANSWER, "poll: %s", strerror(errno));
			return;
		}
		size_t room = r->response.limit - r->response.len;
		if (room == 0) {
			set_outcome(r, RELAY_BAD_ANSWER, "answer longer than %zu bytes", r->response.limit);
			return;
		}
		size_t want = room < READ_CHUNK ? room : READ_CHUNK;
		if (buf_reserve(&r->response, want) < 0) {
			set_outcome(r, RELAY_BAD_ANSWER, "out of memory reading the answer");
			return;
		}
		ssize_t n = recv(fd, r->response.data + r->response.len, want, 0);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0 && errno != ECONNRESET) {
			set_outcome(r, RELAY_BAD_ANSWER, "recv: %s", strerror(errno));
			return;
		}
		if (n <= 0) {
			if (r->response.len == 0)
				set_outcome(r, RELAY_UNREACHABLE, "the tendril agent closed the connection without answering");
			else if (http_response_parse(r->response.data, r->response.len, max_body, &r->http) == HTTP_PARSE_ERROR)
				set_outcome(r, RELAY_BAD_ANSWER, "%s", r->http.error);
			else
				set_outcome(r, RELAY_BAD_ANSWER, "answer truncated after %zu bytes", r->response.len);
			return;
		}
		r->response.len += (size_t)n;
		r->response.data[r->response.len] = '\0';
		switch (http_response_parse(r->response.data, r->response.len, max_body, &r->http)) {
		case HTTP_PARSE_COMPLETE:
			set_outcome(r, RELAY_ANSWERED, "HTTP %d", r->http.status);
			return;
		case HTTP_PARSE_ERROR:
			set_outcome(r, RELAY_BAD_ANSWER, "%s", r->http.error);
			return;
		case HTTP_PARSE_INCOMPLETE:
			break;
		}
	}
}

void relay_exchange(const char *socket_path, const char *req, size_t req_len, int64_t connect_deadline, int64_t deadline,
		    size_t max_body, struct relay_result *r)
{
	memset(r, 0, sizeof(*r));
	/* Room for the header section and the largest body; one more byte shows there was more. */
	buf_init(&r->response, HTTP_MAX_HEADER + max_body + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		set_outcome(r, RELAY_UNREACHABLE, "socket: %s", strerror(errno));
		return;
	}
	if (connect_socket(fd, socket_path, connect_deadline < deadline ? connect_deadline : deadline, r) == 0 &&
	    send_request(fd, req, req_len, deadline, r) == 0)
		receive_answer(fd, deadline, max_body, r);
	close(fd);
}
