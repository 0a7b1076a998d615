/*
 * BPF maps: create, info, element operations, batch update and chunked dumps.
 * Element operations on ordinary maps are one quick bpf() call each and run
 * on the calling (main) thread. Everything that can take milliseconds runs
 * on libuv's pool: creating a map (a preallocated hash allocates and links
 * every element up front: tens to hundreds of ms for a million entries),
 * writing and deleting elements of maps of maps (the kernel waits for an RCU
 * grace period after each, 4 to 40 ms), batch updates and dumps. Every key
 * and value length is checked against the sizes the kernel reported for the
 * map.
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

static bool is_map_of_maps(const struct tdl_bpf_handle *h)
{
	return h->map_type == BPF_MAP_TYPE_ARRAY_OF_MAPS || h->map_type == BPF_MAP_TYPE_HASH_OF_MAPS;
}

/*
 * The synchronous element calls refuse maps of maps: the kernel ends each
 * write to one with synchronize_rcu(), which must not run on the event loop.
 */
static int refuse_map_of_maps(napi_env env, const struct tdl_bpf_handle *h, const char *call, const char *instead)
{
	char msg[192];
	if (!is_map_of_maps(h))
		return 0;
	snprintf(msg, sizeof(msg), "map %s is a map of maps: %s waits for an RCU grace period, use %s (off the event loop)",
		 h->name, call, instead);
	tdl_throw_type(env, msg);
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
	tdl_set_u32(env, o, "btfId", h->btf_id);
	tdl_set_u32(env, o, "btfKeyTypeId", h->btf_key_type_id);
	tdl_set_u32(env, o, "btfValueTypeId", h->btf_value_type_id);
	return o;
}

/* ---- create (libuv pool) ----------------------------------------------------- */

struct create_work {
	napi_async_work work;
	napi_deferred deferred;
	char name[BPF_OBJ_NAME_LEN];
	uint32_t type, key_size, value_size, max_entries, flags;
	int inner_fd; /* a dup of the inner map's fd, or -1 */
	struct tdl_bpf_handle map; /* fd -1 until created */
	int err;
	char op[64];
};

static void create_execute(napi_env env, void *data)
{
	struct create_work *w = data;
	LIBBPF_OPTS(bpf_map_create_opts, opts);
	int fd;
	(void)env;

	opts.map_flags = w->flags;
	if (w->inner_fd >= 0)
		opts.inner_map_fd = (uint32_t)w->inner_fd;
	fd = bpf_map_create((enum bpf_map_type)w->type, w->name, w->key_size, w->value_size, w->max_entries, &opts);
	if (fd < 0) {
		w->err = errno;
		return;
	}
	/* Closes the fd and leaves map.fd at -1 on failure. */
	w->err = tdl_bpf_handle_fill(&w->map, TDL_BPF_MAP, fd);
}

static void create_complete(napi_env env, napi_status status, void *data)
{
	struct create_work *w = data;
	napi_value handle;

	if (status != napi_ok && w->err == 0) {
		if (w->map.fd >= 0)
			close(w->map.fd);
		w->map.fd = -1;
		w->err = ECANCELED;
	}
	if (w->err != 0) {
		tdl_reject(env, w->deferred, tdl_errno_error(env, w->op, w->err));
	} else {
		/* tdl_bpf_wrap owns the fd from here, also when it fails (its exception is pending then). */
		handle = tdl_bpf_wrap(env, &w->map);
		if (handle == NULL)
			tdl_reject(env, w->deferred, NULL);
		else
			napi_resolve_deferred(env, w->deferred, handle);
	}
	napi_delete_async_work(env, w->work);
	if (w->inner_fd >= 0)
		close(w->inner_fd);
	free(w);
}

/*
 * mapCreate({type, name, keySize, valueSize, maxEntries, flags?, innerMap?})
 * → Promise<handle>. The name is the kernel's (15 bytes at most). Bad
 * arguments throw at once; the kernel's refusal rejects.
 */
static napi_value js_map_create(napi_env env, napi_callback_info info)
{
	size_t argc = 1;
	napi_value argv[1], v, promise;
	char name[BPF_OBJ_NAME_LEN];
	uint32_t type, key_size, value_size, max_entries, flags = 0;
	struct tdl_bpf_handle *inner = NULL;
	struct create_work *w;

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
		inner = tdl_bpf_unwrap(env, v, TDL_BPF_MAP, "innerMap");
		if (inner == NULL)
			return NULL;
	}
	w = calloc(1, sizeof(*w));
	if (w == NULL)
		return tdl_throw_errno(env, "BPF_MAP_CREATE", ENOMEM);
	memcpy(w->name, name, sizeof(w->name));
	snprintf(w->op, sizeof(w->op), "BPF_MAP_CREATE %s", name);
	w->type = type;
	w->key_size = key_size;
	w->value_size = value_size;
	w->max_entries = max_entries;
	w->flags = flags;
	w->map.fd = -1;
	w->inner_fd = -1;
	/* A dup: JavaScript may close the inner map before the pool thread runs. */
	if (inner != NULL) {
		w->inner_fd = dup(inner->fd);
		if (w->inner_fd < 0) {
			int err = errno;
			free(w);
			return tdl_throw_errno(env, "BPF_MAP_CREATE", err);
		}
	}
	if (tdl_queue_work(env, "tendril:bpf-map-create", create_execute, create_complete, w, &w->work, &w->deferred,
			   &promise) != 0) {
		if (w->inner_fd >= 0)
			close(w->inner_fd);
		free(w);
		return NULL;
	}
	return promise;
}

/* mapInfo(handle) → {name, id, type, keySize, valueSize, valueBufferSize, maxEntries, flags, btfId, btfKeyTypeId, btfValueTypeId} */
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
	    check_len(env, h, klen, h->key_size, "key") != 0 || check_len(env, h, vlen, h->value_buf_size, "value") != 0 ||
	    refuse_map_of_maps(env, h, "an update", "MapOfMaps.set") != 0)
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
	    check_len(env, h, klen, h->key_size, "key") != 0 || refuse_map_of_maps(env, h, "a delete", "MapOfMaps.delete") != 0)
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

/* ---- elements of maps of maps (libuv pool) ---------------------------------- */

struct elem_work {
	napi_async_work work;
	napi_deferred deferred;
	int fd; /* a dup of the map's fd, so closing the handle meanwhile cannot reuse the number */
	int inner_fd; /* updates: a dup of the inner map's fd, which is the value the kernel takes; -1 for deletes */
	uint32_t flags;
	void *key;
	bool absent; /* deletes: the key was not there */
	int err;
	char op[64];
};

static void elem_execute(napi_env env, void *data)
{
	struct elem_work *w = data;
	int ret;
	(void)env;

	if (w->inner_fd >= 0) {
		uint32_t value = (uint32_t)w->inner_fd;
		ret = bpf_map_update_elem(w->fd, w->key, &value, w->flags);
	} else {
		ret = bpf_map_delete_elem(w->fd, w->key);
	}
	if (ret != 0) {
		if (w->inner_fd < 0 && errno == ENOENT)
			w->absent = true;
		else
			w->err = errno;
	}
}

static void elem_complete(napi_env env, napi_status status, void *data)
{
	struct elem_work *w = data;
	napi_value result;

	if (status != napi_ok && w->err == 0)
		w->err = ECANCELED;
	if (w->err != 0) {
		tdl_reject(env, w->deferred, tdl_errno_error(env, w->op, w->err));
	} else if (w->inner_fd >= 0) {
		napi_get_undefined(env, &result);
		napi_resolve_deferred(env, w->deferred, result);
	} else if (napi_get_boolean(env, !w->absent, &result) != napi_ok) {
		tdl_reject(env, w->deferred, NULL);
	} else {
		napi_resolve_deferred(env, w->deferred, result);
	}
	napi_delete_async_work(env, w->work);
	close(w->fd);
	if (w->inner_fd >= 0)
		close(w->inner_fd);
	free(w->key);
	free(w);
}

/* Copies the key and dups the fds, then queues the work; frees everything when nothing was queued. */
static napi_value queue_elem_work(napi_env env, const struct tdl_bpf_handle *h, const void *key,
				  const struct tdl_bpf_handle *inner, uint32_t flags, const char *opname)
{
	struct elem_work *w;
	napi_value promise;
	int err = 0;

	w = calloc(1, sizeof(*w));
	if (w == NULL)
		return tdl_throw_errno(env, opname, ENOMEM);
	op_name(w->op, sizeof(w->op), opname, h);
	w->flags = flags;
	w->inner_fd = -1;
	w->key = malloc(h->key_size ? h->key_size : 1);
	w->fd = dup(h->fd);
	if (w->fd < 0)
		err = errno;
	if (err == 0 && inner != NULL) {
		w->inner_fd = dup(inner->fd);
		if (w->inner_fd < 0)
			err = errno;
	}
	if (err == 0 && w->key == NULL)
		err = ENOMEM;
	if (err == 0) {
		if (h->key_size > 0)
			memcpy(w->key, key, h->key_size);
		if (tdl_queue_work(env, "tendril:bpf-map-elem", elem_execute, elem_complete, w, &w->work, &w->deferred,
				   &promise) == 0)
			return promise;
	}
	if (w->fd >= 0)
		close(w->fd);
	if (w->inner_fd >= 0)
		close(w->inner_fd);
	free(w->key);
	free(w);
	/* tdl_queue_work left its exception pending; the others have an errno. */
	return err != 0 ? tdl_throw_errno(env, opname, err) : NULL;
}

static int require_map_of_maps(napi_env env, const struct tdl_bpf_handle *h)
{
	char msg[128];
	if (is_map_of_maps(h))
		return 0;
	snprintf(msg, sizeof(msg), "map %s is not a map of maps (ARRAY_OF_MAPS or HASH_OF_MAPS)", h->name);
	tdl_throw_type(env, msg);
	return -1;
}

/*
 * mapSetInner(outer, key, inner, flags) → Promise<void>: makes `inner` the
 * map at `key` of an ARRAY_OF_MAPS or HASH_OF_MAPS. The kernel takes the
 * inner map's fd as the value; a dup of it is passed, so closing `inner`
 * before the pool thread runs changes nothing.
 */
static napi_value js_map_set_inner(napi_env env, napi_callback_info info)
{
	size_t argc = 4, klen;
	napi_value argv[4];
	struct tdl_bpf_handle *h, *inner;
	void *key;
	uint32_t flags = 0;

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	h = tdl_bpf_unwrap(env, argv[0], TDL_BPF_MAP, "map");
	if (h == NULL || require_map_of_maps(env, h) != 0 || tdl_get_bytes(env, argv[1], &key, &klen, "key") != 0 ||
	    check_len(env, h, klen, h->key_size, "key") != 0 ||
	    (argc > 3 && !tdl_is_nullish(env, argv[3]) && tdl_get_uint32(env, argv[3], &flags, "flags") != 0))
		return NULL;
	inner = tdl_bpf_unwrap(env, argv[2], TDL_BPF_MAP, "inner map");
	if (inner == NULL)
		return NULL;
	return queue_elem_work(env, h, key, inner, flags, "BPF_MAP_UPDATE_ELEM");
}

/* mapDeleteInner(outer, key) → Promise<boolean>: false when the key was absent. */
static napi_value js_map_delete_inner(napi_env env, napi_callback_info info)
{
	size_t argc = 2, klen;
	napi_value argv[2];
	struct tdl_bpf_handle *h;
	void *key;

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	h = tdl_bpf_unwrap(env, argv[0], TDL_BPF_MAP, "map");
	if (h == NULL || require_map_of_maps(env, h) != 0 || tdl_get_bytes(env, argv[1], &key, &klen, "key") != 0 ||
	    check_len(env, h, klen, h->key_size, "key") != 0)
		return NULL;
	return queue_elem_work(env, h, key, NULL, 0, "BPF_MAP_DELETE_ELEM");
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
	/* Its values would be fd numbers JavaScript may close and reuse before the pool thread reads them. */
	if (is_map_of_maps(h)) {
		snprintf(msg, sizeof(msg), "map %s is a map of maps: set its inner maps one at a time (MapOfMaps.set)", h->name);
		return tdl_throw_type(env, msg);
	}
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

/* ---- batch lookup (libuv pool) --------------------------------------------- */

/* The kernel's batch cursor: a bucket index for hash maps (a __u32), room to spare. */
#define LOOKUP_BATCH_TOKEN 8

struct lookup_batch_work {
	napi_async_work work;
	napi_deferred deferred;
	int fd;
	char name[BPF_OBJ_NAME_LEN];
	uint32_t key_size, value_size, max;
	bool has_cursor;
	unsigned char in_token[LOOKUP_BATCH_TOKEN], out_token[LOOKUP_BATCH_TOKEN];
	void *keys, *values;
	uint32_t count;
	bool more;
	int err;
};

static void lookup_batch_execute(napi_env env, void *data)
{
	struct lookup_batch_work *w = data;
	LIBBPF_OPTS(bpf_map_batch_opts, opts);
	uint32_t n = w->max;
	(void)env;

	if (bpf_map_lookup_batch(w->fd, w->has_cursor ? w->in_token : NULL, w->out_token, w->keys, w->values, &n, &opts) == 0) {
		w->count = n;
		w->more = true;
		return;
	}
	/* ENOENT: the walk is over, with the last entries in this batch. */
	if (errno == ENOENT) {
		w->count = n;
		return;
	}
	w->err = errno;
}

static void lookup_batch_complete(napi_env env, napi_status status, void *data)
{
	struct lookup_batch_work *w = data;
	napi_value result, v;
	char op[96];

	if (status != napi_ok && w->err == 0)
		w->err = ECANCELED;
	if (w->err != 0) {
		snprintf(op, sizeof(op), "BPF_MAP_LOOKUP_BATCH %s", w->name);
		tdl_reject(env, w->deferred, tdl_errno_error(env, op, w->err));
	} else if (napi_create_object(env, &result) != napi_ok) {
		tdl_reject(env, w->deferred, NULL);
	} else {
		tdl_set_u32(env, result, "count", w->count);
		v = tdl_buffer_copy(env, w->keys, (size_t)w->count * w->key_size);
		napi_set_named_property(env, result, "keys", v);
		if (w->more) {
			v = tdl_buffer_copy(env, w->out_token, LOOKUP_BATCH_TOKEN);
		} else if (napi_get_null(env, &v) != napi_ok) {
			v = NULL;
		}
		if (v != NULL)
			napi_set_named_property(env, result, "cursor", v);
		napi_resolve_deferred(env, w->deferred, result);
	}
	napi_delete_async_work(env, w->work);
	close(w->fd);
	free(w->keys);
	free(w->values);
	free(w);
}

/*
 * mapLookupBatch(handle, cursor | null, max) → Promise<{count, keys, cursor}>:
 * up to `max` keys of a hash map from BPF_MAP_LOOKUP_BATCH, back to back,
 * and the cursor to go on from (null when the walk is over). The cursor is
 * a bucket, not a key: the caller may delete what it was given.
 */
static napi_value js_map_lookup_batch(napi_env env, napi_callback_info info)
{
	size_t argc = 3, clen = 0;
	napi_value argv[3], promise;
	struct tdl_bpf_handle *h;
	struct lookup_batch_work *w;
	void *cursor = NULL;
	uint32_t max;
	char msg[128];

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	h = tdl_bpf_unwrap(env, argv[0], TDL_BPF_MAP, "map");
	if (h == NULL)
		return NULL;
	if (!tdl_is_nullish(env, argv[1]) && tdl_get_bytes(env, argv[1], &cursor, &clen, "cursor") != 0)
		return NULL;
	if (cursor != NULL && clen != LOOKUP_BATCH_TOKEN) {
		napi_throw_range_error(env, "ERR_BPF_SIZE", "a batch cursor is 8 bytes");
		return NULL;
	}
	if (tdl_get_uint32(env, argv[2], &max, "max") != 0)
		return NULL;
	if (max == 0 || max > MAX_BATCH_ENTRIES || (uint64_t)max * h->key_size > MAX_BATCH_BYTES ||
	    (uint64_t)max * h->value_buf_size > MAX_BATCH_BYTES) {
		snprintf(msg, sizeof(msg), "lookup batch of %u entries for map %s is out of range", max, h->name);
		napi_throw_range_error(env, "ERR_BPF_SIZE", msg);
		return NULL;
	}
	w = calloc(1, sizeof(*w));
	if (w == NULL)
		return tdl_throw_errno(env, "BPF_MAP_LOOKUP_BATCH", ENOMEM);
	w->key_size = h->key_size;
	w->value_size = h->value_buf_size;
	w->max = max;
	w->has_cursor = cursor != NULL;
	if (cursor != NULL)
		memcpy(w->in_token, cursor, LOOKUP_BATCH_TOKEN);
	memcpy(w->name, h->name, sizeof(w->name));
	w->keys = malloc((size_t)max * h->key_size + 1);
	w->values = malloc((size_t)max * h->value_buf_size + 1);
	w->fd = dup(h->fd);
	if (w->keys == NULL || w->values == NULL || w->fd < 0) {
		int err = w->fd < 0 ? errno : ENOMEM;
		if (w->fd >= 0)
			close(w->fd);
		free(w->keys);
		free(w->values);
		free(w);
		return tdl_throw_errno(env, "BPF_MAP_LOOKUP_BATCH", err);
	}
	if (tdl_queue_work(env, "tendril:bpf-map-lookup-batch", lookup_batch_execute, lookup_batch_complete, w, &w->work,
			   &w->deferred, &promise) != 0) {
		close(w->fd);
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
	    (st = tdl_export_fn(env, exports, "mapSetInner", js_map_set_inner)) != napi_ok ||
	    (st = tdl_export_fn(env, exports, "mapDeleteInner", js_map_delete_inner)) != napi_ok ||
	    (st = tdl_export_fn(env, exports, "mapUpdateBatch", js_map_update_batch)) != napi_ok ||
	    (st = tdl_export_fn(env, exports, "mapDump", js_map_dump)) != napi_ok ||
	    (st = tdl_export_fn(env, exports, "mapLookupBatch", js_map_lookup_batch)) != napi_ok)
		return st;
	return napi_ok;
}
