/*
 * Shared declarations of tendril's kernel addon: the small native part of
 * src/datapath/kernel. It holds no logic: it moves bytes between TypeScript
 * and the kernel (netlink sockets, bpf(), libbpf) and reports errno.
 */
#ifndef TENDRIL_ADDON_H
#define TENDRIL_ADDON_H

#define NAPI_VERSION 8
#include <node_api.h>
#include <stddef.h>
#include <stdint.h>

/* Each concern registers its functions on the exports object. */
napi_status tdl_netlink_register(napi_env env, napi_value exports);
napi_status tdl_bpf_register(napi_env env, napi_value exports);

/*
 * Throws a JS Error whose message names the operation and whose `errno`
 * and `code` (e.g. "ENOENT") properties carry the failure. Returns NULL so
 * callers can `return tdl_throw_errno(...)`.
 */
napi_value tdl_throw_errno(napi_env env, const char *op, int err);
/* Builds (does not throw) the same kind of error object, for async rejections. */
napi_value tdl_errno_error(napi_env env, const char *op, int err);
/*
 * Rejects a promise with `error`; when that is NULL (building it failed),
 * with the pending exception or a plain Error, so the promise never hangs.
 */
void tdl_reject(napi_env env, napi_deferred deferred, napi_value error);
/* Throws a TypeError for a bad argument; returns NULL. */
napi_value tdl_throw_type(napi_env env, const char *msg);

/* Adds a function property to an object. */
napi_status tdl_export_fn(napi_env env, napi_value obj, const char *name, napi_callback cb);

/*
 * Throws an Error with `msg` unless an exception is already pending: for
 * N-API calls that fail without throwing, so JavaScript never gets a silent
 * `undefined` from a call that did nothing. Returns NULL.
 */
napi_value tdl_throw_pending(napi_env env, const char *msg);

/*
 * Reads a string argument into a caller buffer of `cap` bytes (NUL
 * included); fails with a TypeError when it is not a string, does not fit,
 * or holds a NUL (C would see a shorter string than JavaScript checked).
 */
int tdl_get_string(napi_env env, napi_value v, char *buf, size_t cap, const char *what);
/*
 * Reads an int32/uint32 argument; TypeError unless it is an integer in the
 * type's range (no wrapping of 2^32 + 1 to 1, no NaN or fraction to 0).
 */
int tdl_get_int32(napi_env env, napi_value v, int32_t *out, const char *what);
int tdl_get_uint32(napi_env env, napi_value v, uint32_t *out, const char *what);
/*
 * Borrows the bytes of a Buffer/Uint8Array argument; TypeError otherwise.
 * An empty array may have a NULL data pointer: never pass it to memcpy.
 */
int tdl_get_bytes(napi_env env, napi_value v, void **data, size_t *len, const char *what);

/*
 * Creates the promise and the async work for an operation and queues it.
 * Returns 0 when queued; -1 with an exception pending when nothing was
 * queued (the caller still owns `data` and frees it).
 */
int tdl_queue_work(napi_env env, const char *name, napi_async_execute_callback execute,
		   napi_async_complete_callback complete, void *data, napi_async_work *work, napi_deferred *deferred,
		   napi_value *promise);

#endif
