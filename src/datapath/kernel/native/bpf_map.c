/*
 * BPF maps: create, info, element operations, batch update and chunked dumps.
 * Element operations are one bpf() call each and run on the calling (main)
 * thread; batch updates and dumps can touch thousands of entries and run on
 * libuv's pool. Every key and value length is checked against the sizes the
 * kernel reported for the map.
 */
#include "bpf_internal.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Upper bounds for one native call; TypeScript splits larger requests. */
#define MAX_BATCH_ENTRIES (1u << 20)
#define MAX_BATCH_BYTES (64u << 20)

static void op_name(char *buf, size_t cap, const char *op, const struct tdl_bpf_handle *h)
{
	snprintf(buf, cap, "%s %s", op, h->name[0] ? h->name : "(unnamed map)");
}

static int check_len(napi_env env, const struct tdl_bpf_handle *h, size_t got, uint32_t want, const char *what)
{
	char msg[160];
	if (got == want)
		return 0;
	snprintf(msg, sizeof(msg), "%s of map %s must be %u bytes, got %zu", what, h->name, want, got);
	napi_throw_range_error(env, "ERR_BPF_SIZE", msg);
	return -1;
}

static napi_value map_info_object(napi_env env, const struct tdl_bpf_handle *h)
{
	napi_value o;
	if (napi_create_object(env, &o) != napi_ok)
		return tdl_throw_pending(env, "mapInfo");
	tdl_set_str(env, o, "name", h->name);
	tdl_set_u32(env, o, "id", h->id);
	tdl_set_u32(env, o, "type", h->map_type);
	tdl_set_u32(env, o, "keySize", h->key_size);
	tdl_set_u32(env, o, "valueSize", h->value_size);
	tdl_set_u32(env, o, "valueBufferSize", h->value_buf_size);
	tdl_set_u32(env, o, "maxEntries", h->max_entries);
	tdl_set_u32(env, o, "flags", h->map_flags);
	return o;
}

/*
 * mapCreate({type, name, keySize, valueSize, maxEntries, flags?, innerMap?})
 * → handle. The name is the kernel's (15 bytes at most).
 */
static napi_value js_map_create(napi_env env, napi_callback_info info)
{
	size_t argc = 1;
	napi_value argv[1], v;
	char name[BPF_OBJ_NAME_LEN], op[64];
	uint32_t type, key_size, value_size, max_entries, flags = 0;
	struct tdl_bpf_handle h;
	LIBBPF_OPTS(bpf_map_create_opts, opts);
	int fd, err;

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	if (napi_get_named_property(env, argv[0], "name", &v) != napi_ok ||
	    tdl_get_string(env, v, name, sizeof(name), "name") != 0)
		return NULL;
	if (napi_get_named_property(env, argv[0], "type", &v) != napi_ok || tdl_get_uint32(env, v, &type, "type") != 0 ||
	    napi_get_named_property(env, argv[0], "keySize", &v) != napi_ok ||
	    tdl_get_uint32(env, v, &key_size, "keySize") != 0 ||
	    napi_get_named_property(env, argv[0], "valueSize", &v) != napi_ok ||
	    tdl_get_uint32(env, v, &value_size, "valueSize") != 0 ||
	    napi_get_named_property(env, argv[0], "maxEntries", &v) != napi_ok ||
	    tdl_get_uint32(env, v, &max_entries, "maxEntries") != 0 ||
	    tdl_opt_uint32(env, argv[0], "flags", &flags, NULL) != 0)
		return NULL;
	if (tdl_opt_value(env, argv[0], "innerMap", &v) != 0)
		return NULL;
	if (v != NULL) {
		struct tdl_bpf_handle *inner = tdl_bpf_unwrap(env, v, TDL_BPF_MAP, "innerMap");
		if (inner == NULL)
			return NULL;
		opts.inner_map_fd = (uint32_t)inner->fd;
	}
	opts.map_flags = flags;
	snprintf(op, sizeof(op), "BPF_MAP_CREATE %s", name);
	fd = bpf_map_create((enum bpf_map_type)type, name, key_size, value_size, max_entries, &opts);
	if (fd < 0)
		return tdl_throw_errno(env, op, errno);
	err = tdl_bpf_handle_fill(&h, TDL_BPF_MAP, fd);
	if (err != 0)
		return tdl_throw_errno(env, op, err);
	return tdl_bpf_wrap(env, &h);
}

/* mapInfo(handle) → {name, id, type, keySize, valueSize, valueBufferSize, maxEntries, flags} */
static napi_value js_map_info(napi_env env, napi_callback_info info)
{
	size_t argc = 1;
	napi_value argv[1];
	struct tdl_bpf_handle *h;

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	h = tdl_bpf_unwrap(env, argv[0], TDL_BPF_MAP, "map");
	if (h == NULL)
		return NULL;
	return map_info_object(env, h);
}

/* mapLookup(handle, key, flags) → Buffer, or undefined when the key is absent. */
static napi_value js_map_lookup(napi_env env, napi_callback_info info)
{
	size_t argc = 3, klen;
	napi_value argv[3], out;
	struct tdl_bpf_handle *h;
	void *key, *value;
	uint32_t flags = 0;
	char op[64];

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	h = tdl_bpf_unwrap(env, argv[0], TDL_BPF_MAP, "map");
	if (h == NULL || tdl_get_bytes(env, argv[1], &key, &klen, "key") != 0 ||
	    (argc > 2 && !tdl_is_nullish(env, argv[2]) && tdl_get_uint32(env, argv[2], &flags, "flags") != 0) ||
	    check_len(env, h, klen, h->key_size, "key") != 0)
		return NULL;
	if (napi_create_buffer(env, h->value_buf_size, &value, &out) != napi_ok)
		return tdl_throw_pending(env, "mapLookup");
	/* Node's buffer is uninitialized heap: no byte the kernel did not write may reach JavaScript. */
	if (h->value_buf_size > 0)
		memset(value, 0, h->value_buf_size);
	if (bpf_map_lookup_elem_flags(h->fd, key, value, flags) != 0) {
		int err = errno;
		if (err == ENOENT) {
			napi_get_undefined(env, &out);
			return out;
		}
		op_name(op, sizeof(op), "BPF_MAP_LOOKUP_ELEM", h);
		return tdl_throw_errno(env, op, err);
	}
	return out;
}

/* mapUpdate(handle, key, value, flags) */
static napi_value js_map_update(napi_env env, napi_callback_info info)
{
	size_t argc = 4, klen, vlen;
	napi_value argv[4];
	struct tdl_bpf_handle *h;
	void *key, *value;
	uint32_t flags = 0;
	char op[64];

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	h = tdl_bpf_unwrap(env, argv[0], TDL_BPF_MAP, "map");
	if (h == NULL || tdl_get_bytes(env, argv[1], &key, &klen, "key") != 0 ||
	    tdl_get_bytes(env, argv[2], &value, &vlen, "value") != 0 ||
	    (argc > 3 && !tdl_is_nullish(env, argv[3]) && tdl_get_uint32(env, argv[3], &flags, "flags") != 0) ||
	    check_len(env, h, klen, h->key_size, "key") != 0 || check_len(env, h, vlen, h->value_buf_size, "value") != 0)
		return NULL;
	if (bpf_map_update_elem(h->fd, key, value, flags) != 0) {
		int err = errno;
		op_name(op, sizeof(op), "BPF_MAP_UPDATE_ELEM", h);
		return tdl_throw_errno(env, op, err);
	}
	return NULL;
}

/* mapDelete(handle, key) → true, or false when the key was absent. */
static napi_value js_map_delete(napi_env env, napi_callback_info info)
{
	size_t argc = 2, klen;
	napi_value argv[2], out;
	struct tdl_bpf_handle *h;
	void *key;
	char op[64];

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	h = tdl_bpf_unwrap(env, argv[0], TDL_BPF_MAP, "map");
	if (h == NULL || tdl_get_bytes(env, argv[1], &key, &klen, "key") != 0 ||
	    check_len(env, h, klen, h->key_size, "key") != 0)
		return NULL;
	if (bpf_map_delete_elem(h->fd, key) != 0) {
		int err = errno;
		if (err == ENOENT) {
			napi_get_boolean(env, false, &out);
			return out;
		}
		op_name(op, sizeof(op), "BPF_MAP_DELETE_ELEM", h);
		return tdl_throw_errno(env, op, err);
	}
	napi_get_boolean(env, true, &out);
	return out;
}

/* mapNextKey(handle, key | null) → the key after `key` (the first for null), or undefined at the end. */
static napi_value js_map_next_key(napi_env env, napi_callback_info info)
{
	size_t argc = 2, klen = 0;
	napi_value argv[2], out;
	struct tdl_bpf_handle *h;
	void *key = NULL, *next;
	char op[64];

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	h = tdl_bpf_unwrap(env, argv[0], TDL_BPF_MAP, "map");
	if (h == NULL)
		return NULL;
	if (argc > 1 && !tdl_is_nullish(env, argv[1]) &&
	    (tdl_get_bytes(env, argv[1], &key, &klen, "key") != 0 || check_len(env, h, klen, h->key_size, "key") != 0))
		return NULL;
	if (napi_create_buffer(env, h->key_size, &next, &out) != napi_ok)
		return tdl_throw_pending(env, "mapNextKey");
	if (h->key_size > 0)
		memset(next, 0, h->key_size);
	if (bpf_map_get_next_key(h->fd, key, next) != 0) {
		int err = errno;
		if (err == ENOENT) {
			napi_get_undefined(env, &out);
			return out;
		}
		op_name(op, sizeof(op), "BPF_MAP_GET_NEXT_KEY", h);
		return tdl_throw_errno(env, op, err);
	}
	return out;
}

/* ---- batch update (libuv pool) --------------------------------------------- */

struct batch_work {
	napi_async_work work;
	napi_deferred deferred;
	napi_ref handle_ref; /* keeps the handle alive to record batch support */
	struct tdl_bpf_handle *h;
	int fd; /* a dup, so closing the handle meanwhile cannot reuse the number */
	char name[BPF_OBJ_NAME_LEN];
	bool try_batch;
	void *keys, *values;
	uint32_t count, key_size, value_size;
	uint32_t flags;
	/* results */
	uint32_t done;
	bool batched, unsupported;
	int err;
	const char *failed_op;
};

static void batch_execute(napi_env env, void *data)
{
	struct batch_work *w = data;
	(void)env;

	if (w->try_batch) {
		LIBBPF_OPTS(bpf_map_batch_opts, opts, .elem_flags = w->flags);
		uint32_t n = w->count;
		if (bpf_map_update_batch(w->fd, w->keys, w->values, &n, &opts) == 0) {
			w->done = w->count;
			w->batched = true;
			return;
		}
		if (errno != TDL_ENOTSUPP && errno != EOPNOTSUPP) {
			w->err = errno;
			w->done = n;
			w->batched = true;
			w->failed_op = "BPF_MAP_UPDATE_BATCH";
			return;
		}
		/* This map type has no batch operations: one update per entry. */
		w->unsupported = true;
	}
	for (uint32_t i = 0; i < w->count; i++) {
		const char *k = (const char *)w->keys + (size_t)i * w->key_size;
		const char *v = (const char *)w->values + (size_t)i * w->value_size;
		if (bpf_map_update_elem(w->fd, k, v, w->flags) != 0) {
			w->err = errno;
			w->failed_op = "BPF_MAP_UPDATE_ELEM";
			return;
		}
		w->done = i + 1;
	}
}

static void batch_complete(napi_env env, napi_status status, void *data)
{
	struct batch_work *w = data;
	napi_value result;
	char op[128];

	/* handle_ref kept the handle (and so w->h) alive until now. */
	if (w->unsupported)
		w->h->batch_unsupported = true;
	if (status != napi_ok && w->err == 0)
		w->err = ECANCELED;
	if (w->err != 0) {
		napi_value error, done;
		snprintf(op, sizeof(op), "%s %s (after %u of %u entries)", w->failed_op ? w->failed_op : "BPF_MAP_UPDATE_BATCH",
			 w->name, w->done, w->count);
		error = tdl_errno_error(env, op, w->err);
		if (error != NULL && napi_create_uint32(env, w->done, &done) == napi_ok)
			napi_set_named_property(env, error, "processed", done);
		tdl_reject(env, w->deferred, error);
	} else if (napi_create_object(env, &result) != napi_ok) {
		tdl_reject(env, w->deferred, NULL);
	} else {
		tdl_set_u32(env, result, "count", w->done);
		tdl_set_bool(env, result, "batched", w->batched);
		napi_resolve_deferred(env, w->deferred, result);
	}
	napi_delete_reference(env, w->handle_ref);
	napi_delete_async_work(env, w->work);
	close(w->fd);
	free(w->keys);
	free(w->values);
	free(w);
}

/*
 * mapUpdateBatch(handle, keys, values, count, flags) → Promise<{count, batched}>.
 * `keys` and `values` hold `count` keys and values back to back. Uses
 * BPF_MAP_UPDATE_BATCH and falls back to one update per entry for map types
 * without batch support and for NOEXIST/EXIST, which batch updates refuse. A failure rejects with `processed` = entries written.
 */
static napi_value js_map_update_batch(napi_env env, napi_callback_info info)
{
	size_t argc = 5, klen, vlen;
	napi_value argv[5], promise;
	struct tdl_bpf_handle *h;
	struct batch_work *w;
	void *keys, *values;
	uint32_t count, flags = 0;
	char msg[160];

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	h = tdl_bpf_unwrap(env, argv[0], TDL_BPF_MAP, "map");
	if (h == NULL || tdl_get_bytes(env, argv[1], &keys, &klen, "keys") != 0 ||
	    tdl_get_bytes(env, argv[2], &values, &vlen, "values") != 0 ||
	    tdl_get_uint32(env, argv[3], &count, "count") != 0 ||
	    (argc > 4 && !tdl_is_nullish(env, argv[4]) && tdl_get_uint32(env, argv[4], &flags, "flags") != 0))
		return NULL;
	if (count > MAX_BATCH_ENTRIES || (uint64_t)count * h->key_size > MAX_BATCH_BYTES ||
	    (uint64_t)count * h->value_buf_size > MAX_BATCH_BYTES) {
		snprintf(msg, sizeof(msg), "batch of %u entries for map %s is too large for one call", count, h->name);
		napi_throw_range_error(env, "ERR_BPF_SIZE", msg);
		return NULL;
	}
	if ((uint64_t)klen != (uint64_t)count * h->key_size || (uint64_t)vlen != (uint64_t)count * h->value_buf_size) {
		snprintf(msg, sizeof(msg), "batch for map %s: %u entries need %u key and %u value bytes each", h->name,
			 count, h->key_size, h->value_buf_size);
		napi_throw_range_error(env, "ERR_BPF_SIZE", msg);
		return NULL;
	}
	w = calloc(1, sizeof(*w));
	if (w == NULL)
		return tdl_throw_errno(env, "BPF_MAP_UPDATE_BATCH", ENOMEM);
	w->h = h;
	w->count = count;
	w->key_size = h->key_size;
	w->value_size = h->value_buf_size;
	w->flags = flags;
	/* The kernel's batch update takes no NOEXIST/EXIST: those go one by one. */
	w->try_batch = !h->batch_unsupported && (flags & ~(uint32_t)BPF_F_LOCK) == 0;
	memcpy(w->name, h->name, sizeof(w->name));
	/* Copies: the caller's buffers may change while the pool thread works. */
	w->keys = malloc(klen ? klen : 1);
	w->values = malloc(vlen ? vlen : 1);
	w->fd = dup(h->fd);
	if (w->keys == NULL || w->values == NULL || w->fd < 0) {
		int err = w->fd < 0 ? errno : ENOMEM;
		if (w->fd >= 0)
			close(w->fd);
		free(w->keys);
		free(w->values);
		free(w);
		return tdl_throw_errno(env, "BPF_MAP_UPDATE_BATCH", err);
	}
	/* An empty Uint8Array may have no data pointer at all. */
	if (klen > 0)
		memcpy(w->keys, keys, klen);
	if (vlen > 0)
		memcpy(w->values, values, vlen);
	/* Without the reference batch_complete would write into a handle GC may have freed. */
	if (napi_create_reference(env, argv[0], 1, &w->handle_ref) != napi_ok) {
		tdl_throw_pending(env, "BPF_MAP_UPDATE_BATCH");
		goto fail;
	}
	if (tdl_queue_work(env, "tendril:bpf-map-update-batch", batch_execute, batch_complete, w, &w->work,
			   &w->deferred, &promise) != 0) {
		napi_delete_reference(env, w->handle_ref);
		goto fail;
	}
	return promise;
fail:
	close(w->fd);
	free(w->keys);
	free(w->values);
	free(w);
	return NULL;
}

/* ---- chunked dump (libuv pool) ---------------------------------------------- */

struct dump_work {
	napi_async_work work;
	napi_deferred deferred;
	int fd;
	char name[BPF_OBJ_NAME_LEN];
	uint32_t key_size, value_size, max;
	bool has_start, with_values;
	void *start;
	void *keys, *values;
	uint32_t count;
	bool more;
	int err;
	const char *failed_op;
};

static void dump_execute(napi_env env, void *data)
{
	struct dump_work *w = data;
	const void *cur = w->has_start ? w->start : NULL;
	(void)env;

	while (w->count < w->max) {
		char *next = (char *)w->keys + (size_t)w->count * w->key_size;
		if (bpf_map_get_next_key(w->fd, cur, next) != 0) {
			if (errno != ENOENT) {
				w->err = errno;
				w->failed_op = "BPF_MAP_GET_NEXT_KEY";
			}
			return;
		}
		if (w->with_values) {
			char *value = (char *)w->values + (size_t)w->count * w->value_size;
			if (bpf_map_lookup_elem(w->fd, next, value) != 0) {
				if (errno != ENOENT) {
					w->err = errno;
					w->failed_op = "BPF_MAP_LOOKUP_ELEM";
					return;
				}
				/* Deleted since get_next_key: continue from it without keeping it. */
				memcpy(w->start, next, w->key_size);
				cur = w->start;
				continue;
			}
		}
		cur = next;
		w->count++;
	}
	w->more = true;
}

static void dump_complete(napi_env env, napi_status status, void *data)
{
	struct dump_work *w = data;
	napi_value result, v;
	char op[96];

	if (status != napi_ok && w->err == 0)
		w->err = ECANCELED;
	if (w->err != 0) {
		snprintf(op, sizeof(op), "%s %s", w->failed_op ? w->failed_op : "BPF_MAP_GET_NEXT_KEY", w->name);
		tdl_reject(env, w->deferred, tdl_errno_error(env, op, w->err));
	} else if (napi_create_object(env, &result) != napi_ok) {
		tdl_reject(env, w->deferred, NULL);
	} else {
		tdl_set_u32(env, result, "count", w->count);
		tdl_set_bool(env, result, "more", w->more);
		v = tdl_buffer_copy(env, w->keys, (size_t)w->count * w->key_size);
		napi_set_named_property(env, result, "keys", v);
		if (w->with_values) {
			v = tdl_buffer_copy(env, w->values, (size_t)w->count * w->value_size);
			napi_set_named_property(env, result, "values", v);
		}
		napi_resolve_deferred(env, w->deferred, result);
	}
	napi_delete_async_work(env, w->work);
	close(w->fd);
	free(w->start);
	free(w->keys);
	free(w->values);
	free(w);
}

/*
 * mapDump(handle, afterKey | null, max, withValues) → Promise<{count, more,
 * keys, values?}>: up to `max` entries following `afterKey` (from the start
 * for null), keys and values back to back. Entries deleted while the walk
 * runs are skipped; a hash map whose `afterKey` was deleted restarts from its
 * first bucket (the kernel's get_next_key semantics).
 */
static napi_value js_map_dump(napi_env env, napi_callback_info info)
{
	size_t argc = 4, klen = 0;
	napi_value argv[4], promise;
	struct tdl_bpf_handle *h;
	struct dump_work *w;
	void *start = NULL;
	uint32_t max;
	bool with_values = false;
	char msg[128];

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	h = tdl_bpf_unwrap(env, argv[0], TDL_BPF_MAP, "map");
	if (h == NULL)
		return NULL;
	if (!tdl_is_nullish(env, argv[1]) &&
	    (tdl_get_bytes(env, argv[1], &start, &klen, "afterKey") != 0 ||
	     check_len(env, h, klen, h->key_size, "key") != 0))
		return NULL;
	if (tdl_get_uint32(env, argv[2], &max, "max") != 0)
		return NULL;
	if (napi_get_value_bool(env, argv[3], &with_values) != napi_ok)
		return tdl_throw_type(env, "withValues must be a boolean");
	if (max == 0 || max > MAX_BATCH_ENTRIES || (uint64_t)max * h->key_size > MAX_BATCH_BYTES ||
	    (uint64_t)max * h->value_buf_size > MAX_BATCH_BYTES) {
		snprintf(msg, sizeof(msg), "dump chunk of %u entries for map %s is out of range", max, h->name);
		napi_throw_range_error(env, "ERR_BPF_SIZE", msg);
		return NULL;
	}
	w = calloc(1, sizeof(*w));
	if (w == NULL)
		return tdl_throw_errno(env, "BPF_MAP_GET_NEXT_KEY", ENOMEM);
	w->key_size = h->key_size;
	w->value_size = h->value_buf_size;
	w->max = max;
	w->with_values = with_values;
	w->has_start = start != NULL;
	memcpy(w->name, h->name, sizeof(w->name));
	w->start = malloc(h->key_size ? h->key_size : 1);
	w->keys = malloc((size_t)max * h->key_size + 1);
	w->values = with_values ? malloc((size_t)max * h->value_buf_size + 1) : NULL;
	w->fd = dup(h->fd);
	if (w->start == NULL || w->keys == NULL || (with_values && w->values == NULL) || w->fd < 0) {
		int err = w->fd < 0 ? errno : ENOMEM;
		if (w->fd >= 0)
			close(w->fd);
		free(w->start);
		free(w->keys);
		free(w->values);
		free(w);
		return tdl_throw_errno(env, "BPF_MAP_GET_NEXT_KEY", err);
	}
	if (start != NULL && h->key_size > 0)
		memcpy(w->start, start, h->key_size);
	if (tdl_queue_work(env, "tendril:bpf-map-dump", dump_execute, dump_complete, w, &w->work, &w->deferred,
			   &promise) != 0) {
		close(w->fd);
		free(w->start);
		free(w->keys);
		free(w->values);
		free(w);
		return NULL;
	}
	return promise;
}

napi_status tdl_bpf_map_register(napi_env env, napi_value exports)
{
	napi_status st;
	if ((st = tdl_export_fn(env, exports, "mapCreate", js_map_create)) != napi_ok ||
	    (st = tdl_export_fn(env, exports, "mapInfo", js_map_info)) != napi_ok ||
	    (st = tdl_export_fn(env, exports, "mapLookup", js_map_lookup)) != napi_ok ||
	    (st = tdl_export_fn(env, exports, "mapUpdate", js_map_update)) != napi_ok ||
	    (st = tdl_export_fn(env, exports, "mapDelete", js_map_delete)) != napi_ok ||
	    (st = tdl_export_fn(env, exports, "mapNextKey", js_map_next_key)) != napi_ok ||
	    (st = tdl_export_fn(env, exports, "mapUpdateBatch", js_map_update_batch)) != napi_ok ||
	    (st = tdl_export_fn(env, exports, "mapDump", js_map_dump)) != napi_ok)
		return st;
	return napi_ok;
}
