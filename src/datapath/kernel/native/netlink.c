/*
 * Netlink sockets opened in a chosen network namespace, and one
 * request/response exchange on them. Everything runs on libuv's pool
 * threads (napi async work), so the event loop never waits on the kernel.
 * Message encoding and decoding live in TypeScript
 * (src/datapath/kernel/netlink); this file only moves bytes and reports
 * errno.
 */
#define _GNU_SOURCE
#include "addon.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/netlink.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#ifndef NETLINK_EXT_ACK
#define NETLINK_EXT_ACK 11
#endif
#ifndef NETLINK_GET_STRICT_CHK
#define NETLINK_GET_STRICT_CHK 12
#endif

/* Upper bound of one reply (all datagrams of a dump together). */
#define TDL_NL_MAX_REPLY (64u * 1024u * 1024u)
#define TDL_NL_MAX_REQUEST (1u * 1024u * 1024u)

/*
 * A socket as JavaScript holds it (a napi external). `busy` is read and
 * written on the main thread only: a request marks it before queueing its
 * work and clears it in the completion, so one socket never has two
 * exchanges on the pool at once and close() cannot pull the fd away.
 */
struct nl_handle {
	int fd;
	bool busy;
};

/*
 * Tags the externals netlinkOpen hands out: an external from another part of
 * the addon (a bpf handle, a ring buffer reader) is refused instead of being
 * read as an nl_handle, whose `fd` would then be some other field's value.
 */
static const napi_type_tag nl_handle_tag = { 0x74646c6e6c736f63ULL, 0x2b7e151628aed2a6ULL };

static void handle_finalize(napi_env env, void *data, void *hint)
{
	struct nl_handle *h = data;
	if (h->fd >= 0)
		close(h->fd);
	free(h);
}

/* ---- open ------------------------------------------------------------- */

struct open_work {
	napi_async_work work;
	napi_deferred deferred;
	char path[PATH_MAX];
	bool has_path;
	int protocol;
	int timeout_ms;
	int fd;
	int err;
	const char *failed;
};

static int configure_socket(int fd, int timeout_ms, const char **failed)
{
	struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };
	int one = 1;

	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0) {
		*failed = "setsockopt SO_RCVTIMEO";
		return -1;
	}
	if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0) {
		*failed = "setsockopt SO_SNDTIMEO";
		return -1;
	}
	/* Errors come back with the kernel's text and without the request echoed. */
	if (setsockopt(fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof(one)) < 0) {
		*failed = "setsockopt NETLINK_EXT_ACK";
		return -1;
	}
	if (setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof(one)) < 0) {
		*failed = "setsockopt NETLINK_CAP_ACK";
		return -1;
	}
	/* Dumps honour the filters in their request headers (and check them). */
	if (setsockopt(fd, SOL_NETLINK, NETLINK_GET_STRICT_CHK, &one, sizeof(one)) < 0) {
		*failed = "setsockopt NETLINK_GET_STRICT_CHK";
		return -1;
	}
	return 0;
}

static int new_socket(int protocol, const char **failed)
{
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, protocol);
	if (fd < 0)
		*failed = "socket AF_NETLINK";
	return fd;
}

static void open_execute(napi_env env, void *data)
{
	struct open_work *w = data;
	int target = -1, self = -1, fd = -1;

	w->fd = -1;
	w->err = 0;
	if (!w->has_path) {
		fd = new_socket(w->protocol, &w->failed);
		if (fd < 0) {
			w->err = errno;
			return;
		}
	} else {
		/* O_NONBLOCK: a FIFO planted at the path must not hang this thread. */
		target = open(w->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
		if (target < 0) {
			w->err = errno;
			w->failed = "open netns";
			return;
		}
		self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
		if (self < 0) {
			w->err = errno;
			w->failed = "open /proc/thread-self/ns/net";
			close(target);
			return;
		}
		/*
		 * While this thread is in the other namespace nothing but socket()
		 * may run on it, a signal handler included: signals wait until it
		 * is back (a process signal goes to another thread meanwhile).
		 */
		sigset_t all, old;
		sigfillset(&all);
		pthread_sigmask(SIG_BLOCK, &all, &old);
		/* setns() checks that the file is a network namespace (EINVAL otherwise). */
		if (setns(target, CLONE_NEWNET) < 0) {
			w->err = errno;
			w->failed = "setns";
			pthread_sigmask(SIG_SETMASK, &old, NULL);
			close(self);
			close(target);
			return;
		}
		fd = new_socket(w->protocol, &w->failed);
		int socket_err = errno;
		/*
		 * A pool thread left in another namespace would open every later
		 * socket of this process there: no way on is safe.
		 */
		if (setns(self, CLONE_NEWNET) < 0)
			abort();
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		close(self);
		close(target);
		if (fd < 0) {
			w->err = socket_err;
			return;
		}
	}
	if (configure_socket(fd, w->timeout_ms, &w->failed) < 0) {
		w->err = errno;
		close(fd);
		return;
	}
	w->fd = fd;
}

/* Rejects with the pending exception, or with an errno error when there is none. */
static void reject(napi_env env, napi_deferred deferred, const char *op, int err)
{
	bool pending = false;

	if (napi_is_exception_pending(env, &pending) == napi_ok && pending)
		tdl_reject(env, deferred, NULL);
	else
		tdl_reject(env, deferred, tdl_errno_error(env, op, err));
}

static void open_complete(napi_env env, napi_status status, void *data)
{
	struct open_work *w = data;
	napi_value result;

	if (status != napi_ok && w->err == 0) {
		/* Cancelled: the work never ran (w->fd is still -1), or ran and is dropped. */
		if (w->fd >= 0)
			close(w->fd);
		w->fd = -1;
		w->err = ECANCELED;
		w->failed = "netlinkOpen";
	}
	if (w->err != 0) {
		reject(env, w->deferred, w->failed, w->err);
	} else {
		struct nl_handle *h = malloc(sizeof(*h));
		if (h == NULL) {
			close(w->fd);
			reject(env, w->deferred, "netlink handle", ENOMEM);
		} else {
			h->fd = w->fd;
			h->busy = false;
			if (napi_create_external(env, h, handle_finalize, NULL, &result) != napi_ok) {
				handle_finalize(env, h, NULL);
				reject(env, w->deferred, "netlink handle", ENOMEM);
			} else if (napi_type_tag_object(env, result, &nl_handle_tag) != napi_ok) {
				/* The external owns h and closes the fd when collected. */
				reject(env, w->deferred, "netlink handle", ENOMEM);
			} else {
				napi_resolve_deferred(env, w->deferred, result);
			}
		}
	}
	napi_delete_async_work(env, w->work);
	free(w);
}

/* netlinkOpen(netnsPath: string | null, protocol: number, timeoutMs: number): Promise<handle> */
static napi_value js_open(napi_env env, napi_callback_info info)
{
	size_t argc = 3;
	napi_value argv[3], promise;
	napi_valuetype t;
	struct open_work *w;

	if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 3)
		return tdl_throw_type(env, "netlinkOpen(netnsPath, protocol, timeoutMs)");
	if (napi_typeof(env, argv[0], &t) != napi_ok)
		return tdl_throw_pending(env, "netlinkOpen");
	w = calloc(1, sizeof(*w));
	if (w == NULL)
		return tdl_throw_errno(env, "netlinkOpen", ENOMEM);
	w->fd = -1;
	if (t != napi_null) {
		if (tdl_get_string(env, argv[0], w->path, sizeof(w->path), "netnsPath") < 0)
			goto fail;
		if (w->path[0] != '/') {
			tdl_throw_type(env, "netnsPath must be an absolute path");
			goto fail;
		}
		w->has_path = true;
	}
	if (tdl_get_int32(env, argv[1], &w->protocol, "protocol") < 0 ||
	    tdl_get_int32(env, argv[2], &w->timeout_ms, "timeoutMs") < 0)
		goto fail;
	if (w->protocol < 0 || w->protocol > 31 || w->timeout_ms < 1 || w->timeout_ms > 600000) {
		tdl_throw_type(env, "protocol must be 0..31 and timeoutMs 1..600000");
		goto fail;
	}
	if (tdl_queue_work(env, "tendril.netlinkOpen", open_execute, open_complete, w, &w->work, &w->deferred,
			   &promise) != 0)
		goto fail;
	return promise;
fail:
	free(w);
	return NULL;
}

/* ---- request ---------------------------------------------------------- */

struct request_work {
	napi_async_work work;
	napi_deferred deferred;
	napi_ref handle_ref;
	struct nl_handle *handle;
	int fd;
	uint8_t *request;
	size_t request_len;
	uint32_t first_seq;
	uint32_t last_seq;
	uint8_t *reply;
	size_t reply_len;
	int err;
	const char *failed;
};

static int recv_retry(int fd, void *buf, size_t len, int flags, struct sockaddr_nl *from)
{
	for (;;) {
		socklen_t fromlen = sizeof(*from);
		ssize_t n = recvfrom(fd, buf, len, flags, (struct sockaddr *)from, &fromlen);
		if (n >= 0) {
			if (fromlen != sizeof(*from) || from->nl_family != AF_NETLINK) {
				errno = EPROTO;
				return -1;
			}
			if (n > INT_MAX) {
				errno = EMSGSIZE;
				return -1;
			}
			return (int)n;
		}
		if (errno == EINTR)
			continue;
		/* SO_RCVTIMEO expired. */
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			errno = ETIMEDOUT;
		return -1;
	}
}

/*
 * Keeps the messages of one received datagram that belong to this request
 * (sequence numbers first..last; older ones are late answers to a request
 * that timed out) by compacting them to `at`. Returns the bytes kept, or -1
 * with errno EBADMSG when a header does not fit; sets *done when the
 * terminal message (NLMSG_DONE or NLMSG_ERROR of the last sequence) is seen.
 */
static ssize_t keep_messages(struct request_work *w, uint8_t *at, size_t len, bool *done)
{
	size_t off = 0, kept = 0;

	while (off < len) {
		struct nlmsghdr hdr;
		if (len - off < sizeof(hdr)) {
			errno = EBADMSG;
			return -1;
		}
		memcpy(&hdr, at + off, sizeof(hdr));
		if (hdr.nlmsg_len < sizeof(hdr) || hdr.nlmsg_len > len - off) {
			errno = EBADMSG;
			return -1;
		}
		size_t step = NLMSG_ALIGN(hdr.nlmsg_len);
		if (step > len - off)
			step = len - off;
		if (hdr.nlmsg_seq - w->first_seq <= w->last_seq - w->first_seq) {
			if (kept != off)
				memmove(at + kept, at + off, step);
			kept += step;
			if (hdr.nlmsg_seq == w->last_seq && (hdr.nlmsg_type == NLMSG_DONE || hdr.nlmsg_type == NLMSG_ERROR))
				*done = true;
		}
		off += step;
	}
	return (ssize_t)kept;
}

static void request_execute(napi_env env, void *data)
{
	struct request_work *w = data;
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	size_t cap = 0;
	bool done = false;

	for (;;) {
		ssize_t n = sendto(w->fd, w->request, w->request_len, 0, (struct sockaddr *)&kernel, sizeof(kernel));
		if (n >= 0)
			break;
		if (errno == EINTR)
			continue;
		w->err = (errno == EAGAIN) ? ETIMEDOUT : errno;
		w->failed = "sendto netlink";
		return;
	}
	while (!done) {
		struct sockaddr_nl from;
		int size = recv_retry(w->fd, NULL, 0, MSG_PEEK | MSG_TRUNC, &from);
		if (size < 0) {
			w->err = errno;
			w->failed = "recv netlink";
			return;
		}
		if ((size_t)size > TDL_NL_MAX_REPLY - w->reply_len) {
			w->err = EMSGSIZE;
			w->failed = "netlink reply exceeds 64 MiB";
			return;
		}
		if (w->reply_len + (size_t)size > cap) {
			size_t want = cap == 0 ? 65536 : cap;
			while (want < w->reply_len + (size_t)size)
				want *= 2;
			if (want > TDL_NL_MAX_REPLY)
				want = TDL_NL_MAX_REPLY;
			uint8_t *grown = realloc(w->reply, want);
			if (grown == NULL) {
				w->err = ENOMEM;
				w->failed = "netlink reply buffer";
				return;
			}
			w->reply = grown;
			cap = want;
		}
		/* A zero-length datagram still has to be consumed. */
		uint8_t scratch;
		uint8_t *at = size > 0 ? w->reply + w->reply_len : &scratch;
		int got = recv_retry(w->fd, at, size > 0 ? (size_t)size : 1, 0, &from);
		if (got < 0) {
			w->err = errno;
			w->failed = "recv netlink";
			return;
		}
		if (got != size) {
			w->err = EMSGSIZE;
			w->failed = "recv netlink (datagram changed size)";
			return;
		}
		/* Only the kernel (port 0) answers requests; anything else is dropped. */
		if (from.nl_pid != 0 || size == 0)
			continue;
		ssize_t kept = keep_messages(w, at, (size_t)got, &done);
		if (kept < 0) {
			w->err = errno;
			w->failed = "parse netlink reply";
			return;
		}
		w->reply_len += (size_t)kept;
	}
}

static void request_complete(napi_env env, napi_status status, void *data)
{
	struct request_work *w = data;
	napi_value result;
	void *copy;

	w->handle->busy = false;
	if (status != napi_ok && w->err == 0) {
		w->err = ECANCELED;
		w->failed = "netlinkRequest";
	}
	if (w->err != 0) {
		reject(env, w->deferred, w->failed, w->err);
	} else if (napi_create_buffer_copy(env, w->reply_len, w->reply_len > 0 ? w->reply : (const void *)"", &copy, &result) != napi_ok) {
		reject(env, w->deferred, "netlink reply buffer", ENOMEM);
	} else {
		napi_resolve_deferred(env, w->deferred, result);
	}
	napi_delete_reference(env, w->handle_ref);
	napi_delete_async_work(env, w->work);
	free(w->request);
	free(w->reply);
	free(w);
}

static int get_handle(napi_env env, napi_value v, struct nl_handle **out)
{
	napi_valuetype t;
	bool tagged = false;
	void *data = NULL;

	if (napi_typeof(env, v, &t) != napi_ok || t != napi_external ||
	    napi_check_object_type_tag(env, v, &nl_handle_tag, &tagged) != napi_ok || !tagged ||
	    napi_get_value_external(env, v, &data) != napi_ok || data == NULL) {
		tdl_throw_type(env, "handle must be a netlink handle from netlinkOpen");
		return -1;
	}
	*out = data;
	return 0;
}

/*
 * netlinkRequest(handle, bytes: Uint8Array, firstSeq: number, lastSeq: number): Promise<Buffer>
 * Sends `bytes` (one or more messages, sequence numbers firstSeq..lastSeq)
 * and resolves with every reply message of those sequences, up to and
 * including the NLMSG_DONE or NLMSG_ERROR of lastSeq.
 */
static napi_value js_request(napi_env env, napi_callback_info info)
{
	size_t argc = 4, len = 0;
	napi_value argv[4], promise;
	struct nl_handle *h;
	void *bytes = NULL;
	uint32_t first, last;
	struct request_work *w;

	if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 4)
		return tdl_throw_type(env, "netlinkRequest(handle, bytes, firstSeq, lastSeq)");
	if (get_handle(env, argv[0], &h) < 0 || tdl_get_bytes(env, argv[1], &bytes, &len, "bytes") < 0 ||
	    tdl_get_uint32(env, argv[2], &first, "firstSeq") < 0 || tdl_get_uint32(env, argv[3], &last, "lastSeq") < 0)
		return NULL;
	if (len < sizeof(struct nlmsghdr) || len > TDL_NL_MAX_REQUEST)
		return tdl_throw_type(env, "bytes must hold 16 bytes to 1 MiB of netlink messages");
	if (last - first > 0xffffu)
		return tdl_throw_type(env, "lastSeq must follow firstSeq by at most 65535");
	if (h->fd < 0)
		return tdl_throw_errno(env, "netlinkRequest", EBADF);
	if (h->busy)
		return tdl_throw_errno(env, "netlinkRequest", EBUSY);

	w = calloc(1, sizeof(*w));
	if (w == NULL)
		return tdl_throw_errno(env, "netlinkRequest", ENOMEM);
	w->request = malloc(len);
	if (w->request == NULL) {
		free(w);
		return tdl_throw_errno(env, "netlinkRequest", ENOMEM);
	}
	/* A copy: JavaScript may reuse its buffer while the pool thread sends. */
	memcpy(w->request, bytes, len);
	w->request_len = len;
	w->first_seq = first;
	w->last_seq = last;
	w->handle = h;
	/*
	 * Not a dup: `busy` makes close() refuse while this runs, and handle_ref
	 * keeps the external (whose finalizer closes the fd) alive until then.
	 */
	w->fd = h->fd;
	if (napi_create_reference(env, argv[0], 1, &w->handle_ref) != napi_ok) {
		tdl_throw_pending(env, "netlinkRequest");
		goto fail;
	}
	if (tdl_queue_work(env, "tendril.netlinkRequest", request_execute, request_complete, w, &w->work, &w->deferred,
			   &promise) != 0) {
		napi_delete_reference(env, w->handle_ref);
		goto fail;
	}
	h->busy = true;
	return promise;
fail:
	free(w->request);
	free(w);
	return NULL;
}

/* ---- close ------------------------------------------------------------ */

/* netlinkClose(handle): closes the socket now; EBUSY while a request runs. */
static napi_value js_close(napi_env env, napi_callback_info info)
{
	size_t argc = 1;
	napi_value argv[1];
	struct nl_handle *h;

	if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 1)
		return tdl_throw_type(env, "netlinkClose(handle)");
	if (get_handle(env, argv[0], &h) < 0)
		return NULL;
	if (h->busy)
		return tdl_throw_errno(env, "netlinkClose", EBUSY);
	if (h->fd >= 0) {
		close(h->fd);
		h->fd = -1;
	}
	return NULL;
}

napi_status tdl_netlink_register(napi_env env, napi_value exports)
{
	napi_status st;

	if ((st = tdl_export_fn(env, exports, "netlinkOpen", js_open)) != napi_ok)
		return st;
	if ((st = tdl_export_fn(env, exports, "netlinkRequest", js_request)) != napi_ok)
		return st;
	return tdl_export_fn(env, exports, "netlinkClose", js_close);
}
