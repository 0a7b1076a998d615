/* One request/answer exchange with the agent over its unix socket, bounded
 * in time and size. */
#ifndef TENDRIL_CNI_RELAY_H
#define TENDRIL_CNI_RELAY_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "http.h"

enum relay_outcome {
	RELAY_ANSWERED,    /* a complete, well-formed HTTP answer is in `http` */
	RELAY_UNREACHABLE, /* no connection, or it closed before a byte of answer came */
	RELAY_TIMEOUT,     /* connected, but the answer did not come in time */
	RELAY_BAD_ANSWER,  /* what came is not an answer the relay can read */
};

struct relay_result {
	enum relay_outcome outcome;
	struct buf response; /* the bytes received; `http` points into them */
	struct http_response http;
	char detail[512];    /* what went wrong, for a CNI error's details */
};

/* CLOCK_MONOTONIC in milliseconds. */
int64_t relay_now_ms(void);

/*
 * Sends req to the socket and reads the answer. Connecting may take until
 * connect_deadline (a live agent accepts at once; a full backlog is waited
 * out), everything until deadline (both relay_now_ms() values). Answers
 * longer than max_body after their header are refused. Free r->response
 * with buf_free.
 */
void relay_exchange(const char *socket_path, const char *req, size_t req_len, int64_t connect_deadline, int64_t deadline,
		    size_t max_body, struct relay_result *r);

#endif
