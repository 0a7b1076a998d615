/*
 * Ring buffer consumption off the event loop: one native thread per reader
 * waits (epoll) on libbpf's ring buffer and on an eventfd that stops it,
 * copies records (each at most max_record bytes; longer ones are counted and
 * dropped) into batches, and hands the batches to JavaScript through a
 * thread-safe function. A full queue blocks the thread, not Node: records
 * then wait in the kernel's ring, which drops new ones when it is full.
 */
#include "bpf_internal.h"

#include <bpf/libbpf.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define BATCH_RECORDS 256
#define BATCH_BYTES (256u << 10)
#define MAX_RECORD_LIMIT (1u << 20)
#define MAX_COALESCE_MS 1000u
#define DEFAULT_MAX_RECORD 4096
#define QUEUE_BATCHES 64
/* Signals "batch full" from the sample callback; the record was kept. */
#define BATCH_FULL (-ENOBUFS)

static const napi_type_tag reader_tag = { 0x74646c7262726472ULL, 0x51f0a3c6d2b84e19ULL };

struct rb_batch {
	uint32_t count;
	size_t bytes;
	uint32_t lens[BATCH_RECORDS];
	unsigned char data[]; /* BATCH_BYTES + max_record */
};

/* What the thread sends: a batch of records, or the error that stopped it. */
struct rb_message {
	struct rb_batch *batch;
	int err;
};

struct rb_reader {
	int refs; /* the JS external and the thread-safe function; main thread only */
	napi_threadsafe_function tsfn;
	bool tsfn_alive;
	struct ring_buffer *rb;
	int map_fd, stop_fd, epoll_fd;
	pthread_t thread;
	bool thread_started;
	uint32_t max_record;
	/*
	 * After each drain the thread waits this long (or for stop) before it
	 * waits on the ring again: records arriving meanwhile wake nobody (the
	 * kernel signals only a ring its reader has caught up with) and go in
	 * one batch, one thread wakeup and one call into JavaScript for many
	 * records instead of one each.
	 */
	uint32_t coalesce_ms;
	char name[BPF_OBJ_NAME_LEN];
	struct rb_batch *batch; /* filled by the thread */
	bool stop_requested; /* main thread only */
	/*
	 * Set with the eventfd write: the thread reads it between batches, so a
	 * ring that never drains (a producer faster than JavaScript) still
	 * cannot keep it from seeing stop().
	 */
	atomic_bool stopping;
	napi_deferred stopped; /* settled once the thread is gone */
	_Atomic uint64_t records, batches, oversized;
};

static struct rb_batch *batch_new(uint32_t max_record)
{
	struct rb_batch *b = malloc(sizeof(*b) + BATCH_BYTES + max_record);
	if (b != NULL) {
		b->count = 0;
		b->bytes = 0;
	}
	return b;
}

static void reader_unref(struct rb_reader *r)
{
	if (--r->refs > 0)
		return;
	if (r->rb != NULL)
		ring_buffer__free(r->rb);
	if (r->epoll_fd >= 0)
		close(r->epoll_fd);
	if (r->stop_fd >= 0)
		close(r->stop_fd);
	if (r->map_fd >= 0)
		close(r->map_fd);
	free(r->batch);
	free(r);
}

static int on_sample(void *ctx, void *data, size_t len)
{
	struct rb_reader *r = ctx;
	struct rb_batch *b = r->batch;

	if (len > r->max_record) {
		atomic_fetch_add(&r->oversized, 1);
		return 0;
	}
	/* The batch always has room for one more record of max_record bytes. */
	memcpy(b->data + b->bytes, data, len);
	b->lens[b->count++] = (uint32_t)len;
	b->bytes += len;
	atomic_fetch_add(&r->records, 1);
	return (b->count == BATCH_RECORDS || b->bytes >= BATCH_BYTES) ? BATCH_FULL : 0;
}

/*
 * Hands the current batch to JavaScript. Returns 0, -1 when JavaScript no
 * longer listens (the thread-safe function is closing), or ENOMEM.
 */
static int deliver(struct rb_reader *r)
{
	struct rb_message *msg;
	struct rb_batch *next;

	if (r->batch->count == 0)
		return 0;
	msg = malloc(sizeof(*msg));
	next = batch_new(r->max_record);
	if (msg == NULL || next == NULL) {
		/* The records stay in this batch; the thread stops and says why. */
		free(msg);
		free(next);
		return ENOMEM;
	}
	msg->batch = r->batch;
	msg->err = 0;
	r->batch = next;
	if (napi_call_threadsafe_function(r->tsfn, msg, napi_tsfn_blocking) != napi_ok) {
		free(msg->batch);
		free(msg);
		return -1;
	}
	atomic_fetch_add(&r->batches, 1);
	return 0;
}

static void report_error(struct rb_reader *r, int err)
{
	struct rb_message *msg = malloc(sizeof(*msg));
	if (msg == NULL)
		return;
	msg->batch = NULL;
	msg->err = err;
	if (napi_call_threadsafe_function(r->tsfn, msg, napi_tsfn_blocking) != napi_ok)
		free(msg);
}

static void *reader_thread(void *arg)
{
	struct rb_reader *r = arg;
	struct epoll_event events[2];
	int err = 0;

	for (;;) {
		int n = epoll_wait(r->epoll_fd, events, 2, -1), c, d;
		bool stop = false;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			err = errno;
			break;
		}
		for (int i = 0; i < n; i++)
			if (events[i].data.fd == r->stop_fd)
				stop = true;
		if (stop)
			break;
		do {
			c = ring_buffer__consume(r->rb);
			d = deliver(r);
			if (d != 0 || atomic_load(&r->stopping)) {
				if (d > 0)
					err = d;
				c = 0;
				stop = true;
			}
		} while (c == BATCH_FULL);
		if (stop)
			break;
		if (c < 0) {
			err = -c;
			break;
		}
		if (r->coalesce_ms > 0) {
			struct pollfd p = { .fd = r->stop_fd, .events = POLLIN };
			int pr = poll(&p, 1, (int)r->coalesce_ms);

			if (pr > 0)
				break;
			if (pr < 0 && errno != EINTR) {
				err = errno;
				break;
			}
		}
	}
	if (err != 0)
		report_error(r, err);
	napi_release_threadsafe_function(r->tsfn, napi_tsfn_release);
	return NULL;
}

/* Runs on the main thread for each message: onRecords(records[] | null, error?). */
static void call_js(napi_env env, napi_value js_cb, void *context, void *data)
{
	struct rb_reader *r = context;
	struct rb_message *msg = data;
	napi_value undefined, argv[2], arr;

	if (env == NULL || js_cb == NULL) {
		if (msg->batch)
			free(msg->batch);
		free(msg);
		return;
	}
	napi_get_undefined(env, &undefined);
	argv[0] = undefined;
	argv[1] = undefined;
	if (msg->batch != NULL) {
		struct rb_batch *b = msg->batch;
		size_t off = 0;
		bool ok = napi_create_array_with_length(env, b->count, &arr) == napi_ok;
		for (uint32_t i = 0; ok && i < b->count; i++) {
			napi_value buf = tdl_buffer_copy(env, b->data + off, b->lens[i]);
			off += b->lens[i];
			ok = buf != NULL && napi_set_element(env, arr, i, buf) == napi_ok;
		}
		free(b);
		if (ok) {
			argv[0] = arr;
		} else {
			/* Never a batch with holes: the listener hears that records were lost. */
			bool pending = false;
			if (napi_is_exception_pending(env, &pending) == napi_ok && pending)
				napi_get_and_clear_last_exception(env, &arr);
			msg->err = ENOMEM;
		}
	}
	if (msg->batch == NULL || msg->err != 0) {
		char op[64];
		snprintf(op, sizeof(op), "ring_buffer__consume %s", r->name);
		napi_get_null(env, &argv[0]);
		argv[1] = tdl_errno_error(env, op, msg->err);
		if (argv[1] == NULL)
			argv[1] = undefined;
	}
	free(msg);
	/* An exception here is the listener's; N-API reports it as uncaught. */
	napi_call_function(env, undefined, js_cb, 2, argv, NULL);
}

static void request_stop(struct rb_reader *r)
{
	uint64_t one = 1;
	if (r->stop_requested)
		return;
	r->stop_requested = true;
	atomic_store(&r->stopping, true);
	if (write(r->stop_fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
		abort(); /* an eventfd write of 1 cannot fail short of a bug */
}

/* The thread is gone and every message was delivered. */
static void tsfn_finalize(napi_env env, void *data, void *hint)
{
	struct rb_reader *r = data;
	napi_value undefined;
	(void)hint;

	/*
	 * Normally the thread has already returned. When Node tears the
	 * environment down under a running reader, wake it so the join ends.
	 */
	if (r->thread_started) {
		request_stop(r);
		pthread_join(r->thread, NULL);
	}
	r->tsfn_alive = false;
	if (r->stopped != NULL) {
		napi_get_undefined(env, &undefined);
		napi_resolve_deferred(env, r->stopped, undefined);
		r->stopped = NULL;
	}
	reader_unref(r);
}

static void external_finalize(napi_env env, void *data, void *hint)
{
	struct rb_reader *r = data;
	(void)env;
	(void)hint;
	/* Unreachable from JavaScript: nobody can stop it later, so stop it now. */
	if (r->tsfn_alive)
		request_stop(r);
	reader_unref(r);
}

static struct rb_reader *unwrap_reader(napi_env env, napi_value v)
{
	bool tagged = false;
	void *data = NULL;
	if (napi_check_object_type_tag(env, v, &reader_tag, &tagged) != napi_ok || !tagged ||
	    napi_get_value_external(env, v, &data) != napi_ok || data == NULL) {
		tdl_throw_type(env, "reader must be a ring buffer reader");
		return NULL;
	}
	return data;
}

/*
 * ringbufOpen(map, onRecords, {maxRecordSize?, coalesceMs?}) → reader. onRecords(records,
 * error) gets arrays of Buffers, or (null, error) once when the thread stops
 * on a failure, and when a batch could not be made into Buffers (ENOMEM:
 * those records are lost).
 */
static napi_value js_ringbuf_open(napi_env env, napi_callback_info info)
{
	size_t argc = 3;
	napi_value argv[3], rname, ext;
	napi_valuetype cb_type;
	struct tdl_bpf_handle *map;
	struct rb_reader *r;
	struct epoll_event ev;
	uint32_t max_record = DEFAULT_MAX_RECORD, coalesce_ms = 0;
	char op[64];
	int err;

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	map = tdl_bpf_unwrap(env, argv[0], TDL_BPF_MAP, "map");
	if (map == NULL || (argc > 2 && (tdl_opt_uint32(env, argv[2], "maxRecordSize", &max_record, NULL) != 0 ||
					  tdl_opt_uint32(env, argv[2], "coalesceMs", &coalesce_ms, NULL) != 0)))
		return NULL;
	if (map->map_type != BPF_MAP_TYPE_RINGBUF)
		return tdl_throw_type(env, "map must be a BPF_MAP_TYPE_RINGBUF map");
	if (max_record == 0 || max_record > MAX_RECORD_LIMIT)
		return tdl_throw_type(env, "maxRecordSize must be between 1 and 1048576");
	if (coalesce_ms > MAX_COALESCE_MS)
		return tdl_throw_type(env, "coalesceMs must be at most 1000");
	snprintf(op, sizeof(op), "ring_buffer__new %s", map->name);

	r = calloc(1, sizeof(*r));
	if (r == NULL)
		return tdl_throw_errno(env, op, ENOMEM);
	r->refs = 1;
	r->map_fd = r->stop_fd = r->epoll_fd = -1;
	r->max_record = max_record;
	r->coalesce_ms = coalesce_ms;
	memcpy(r->name, map->name, sizeof(r->name));
	atomic_init(&r->stopping, false);
	/* Each errno is taken right after its call: a later success may overwrite it. */
	r->batch = batch_new(max_record);
	err = r->batch == NULL ? ENOMEM : 0;
	if (err == 0 && (r->map_fd = dup(map->fd)) < 0)
		err = errno;
	if (err == 0 && (r->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
		err = errno;
	if (err == 0 && (r->epoll_fd = epoll_create1(EPOLL_CLOEXEC)) < 0)
		err = errno;
	if (err != 0) {
		reader_unref(r);
		return tdl_throw_errno(env, op, err);
	}
	tdl_log_begin();
	r->rb = ring_buffer__new(r->map_fd, on_sample, r, NULL);
	if (r->rb == NULL) {
		char *log;
		err = errno;
		log = tdl_log_end();
		napi_throw(env, tdl_bpf_error(env, op, err, log));
		free(log);
		reader_unref(r);
		return NULL;
	}
	free(tdl_log_end());
	memset(&ev, 0, sizeof(ev));
	ev.events = EPOLLIN;
	ev.data.fd = ring_buffer__epoll_fd(r->rb);
	if (epoll_ctl(r->epoll_fd, EPOLL_CTL_ADD, ev.data.fd, &ev) != 0) {
		err = errno;
		reader_unref(r);
		return tdl_throw_errno(env, "epoll_ctl ring buffer", err);
	}
	ev.data.fd = r->stop_fd;
	if (epoll_ctl(r->epoll_fd, EPOLL_CTL_ADD, r->stop_fd, &ev) != 0) {
		err = errno;
		reader_unref(r);
		return tdl_throw_errno(env, "epoll_ctl eventfd", err);
	}

	if (napi_typeof(env, argv[1], &cb_type) != napi_ok || cb_type != napi_function) {
		reader_unref(r);
		return tdl_throw_type(env, "onRecords must be a function");
	}
	if (napi_create_string_utf8(env, "tendril:bpf-ringbuf", NAPI_AUTO_LENGTH, &rname) != napi_ok ||
	    napi_create_threadsafe_function(env, argv[1], NULL, rname, QUEUE_BATCHES, 1, r, tsfn_finalize, r, call_js,
					    &r->tsfn) != napi_ok) {
		reader_unref(r);
		return tdl_throw_pending(env, "napi_create_threadsafe_function ring buffer reader");
	}
	r->tsfn_alive = true;
	r->refs++; /* the thread-safe function's, dropped in tsfn_finalize */
	err = pthread_create(&r->thread, NULL, reader_thread, r);
	if (err != 0) {
		/* No thread will release its share: abort, and finalize frees. */
		napi_release_threadsafe_function(r->tsfn, napi_tsfn_abort);
		reader_unref(r);
		return tdl_throw_errno(env, "pthread_create ring buffer reader", err);
	}
	r->thread_started = true;
	if (napi_create_external(env, r, external_finalize, NULL, &ext) != napi_ok) {
		/* No external: drop its share here; the thread's goes in tsfn_finalize. */
		request_stop(r);
		reader_unref(r);
		return tdl_throw_pending(env, "ring buffer reader");
	}
	/*
	 * From here the external owns its share: external_finalize stops the
	 * thread and drops it, so this path must not drop it a second time.
	 */
	if (napi_type_tag_object(env, ext, &reader_tag) != napi_ok) {
		request_stop(r);
		return tdl_throw_pending(env, "ring buffer reader");
	}
	return ext;
}

/* ringbufStop(reader) → Promise<void>, settled when the thread has exited. */
static napi_value js_ringbuf_stop(napi_env env, napi_callback_info info)
{
	size_t argc = 1;
	napi_value argv[1], promise;
	struct rb_reader *r;

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	r = unwrap_reader(env, argv[0]);
	if (r == NULL)
		return NULL;
	if (r->stopped != NULL) {
		napi_throw_error(env, "ERR_BPF_RINGBUF_STOPPING", "ring buffer reader is already stopping");
		return NULL;
	}
	if (napi_create_promise(env, &r->stopped, &promise) != napi_ok) {
		r->stopped = NULL;
		return tdl_throw_pending(env, "ringbufStop");
	}
	/*
	 * A thread that stopped by itself (a failure it reported) has already
	 * asked itself to stop: what matters is whether it is gone yet.
	 */
	if (!r->tsfn_alive) {
		napi_value undefined;
		napi_get_undefined(env, &undefined);
		napi_resolve_deferred(env, r->stopped, undefined);
		r->stopped = NULL;
		return promise;
	}
	request_stop(r);
	return promise;
}

/* ringbufStats(reader) → {records, batches, oversized} (numbers). */
static napi_value js_ringbuf_stats(napi_env env, napi_callback_info info)
{
	size_t argc = 1;
	napi_value argv[1], out, v;
	struct rb_reader *r;

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	r = unwrap_reader(env, argv[0]);
	if (r == NULL)
		return NULL;
	if (napi_create_object(env, &out) != napi_ok)
		return tdl_throw_pending(env, "ringbufStats");
	if (napi_create_double(env, (double)atomic_load(&r->records), &v) == napi_ok)
		napi_set_named_property(env, out, "records", v);
	if (napi_create_double(env, (double)atomic_load(&r->batches), &v) == napi_ok)
		napi_set_named_property(env, out, "batches", v);
	if (napi_create_double(env, (double)atomic_load(&r->oversized), &v) == napi_ok)
		napi_set_named_property(env, out, "oversized", v);
	return out;
}

/* ringbufRef(reader, keepAlive): whether a running reader keeps Node's event loop alive. */
static napi_value js_ringbuf_ref(napi_env env, napi_callback_info info)
{
	size_t argc = 2;
	napi_value argv[2];
	struct rb_reader *r;
	bool keep = true;

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	r = unwrap_reader(env, argv[0]);
	if (r == NULL || napi_get_value_bool(env, argv[1], &keep) != napi_ok)
		return NULL;
	if (r->tsfn_alive) {
		if (keep)
			napi_ref_threadsafe_function(env, r->tsfn);
		else
			napi_unref_threadsafe_function(env, r->tsfn);
	}
	return NULL;
}

napi_status tdl_bpf_ringbuf_register(napi_env env, napi_value exports)
{
	napi_status st;
	if ((st = tdl_export_fn(env, exports, "ringbufOpen", js_ringbuf_open)) != napi_ok ||
	    (st = tdl_export_fn(env, exports, "ringbufStop", js_ringbuf_stop)) != napi_ok ||
	    (st = tdl_export_fn(env, exports, "ringbufStats", js_ringbuf_stats)) != napi_ok ||
	    (st = tdl_export_fn(env, exports, "ringbufRef", js_ringbuf_ref)) != napi_ok)
		return st;
	return napi_ok;
}
