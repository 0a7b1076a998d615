/* Entry point of tendril's kernel addon and the helpers every part shares. */
#include "addon.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char *errno_name(int err)
{
	switch (err) {
	case EPERM: return "EPERM";
	case ENOENT: return "ENOENT";
	case ESRCH: return "ESRCH";
	case EINTR: return "EINTR";
	case EIO: return "EIO";
	case ENXIO: return "ENXIO";
	case E2BIG: return "E2BIG";
	case EBADF: return "EBADF";
	case EAGAIN: return "EAGAIN";
	case ENOMEM: return "ENOMEM";
	case EACCES: return "EACCES";
	case EFAULT: return "EFAULT";
	case EBUSY: return "EBUSY";
	case EEXIST: return "EEXIST";
	case ENODEV: return "ENODEV";
	case ENOTDIR: return "ENOTDIR";
	case EINVAL: return "EINVAL";
	case ENOSPC: return "ENOSPC";
	case ERANGE: return "ERANGE";
	case ENAMETOOLONG: return "ENAMETOOLONG";
	case ENOSYS: return "ENOSYS";
	case EADDRINUSE: return "EADDRINUSE";
	case EADDRNOTAVAIL: return "EADDRNOTAVAIL";
	case ENETDOWN: return "ENETDOWN";
	case ENETUNREACH: return "ENETUNREACH";
	case ENOBUFS: return "ENOBUFS";
	case ETIMEDOUT: return "ETIMEDOUT";
	case EPROTONOSUPPORT: return "EPROTONOSUPPORT";
	case EAFNOSUPPORT: return "EAFNOSUPPORT";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case ENOTEMPTY: return "ENOTEMPTY";
	case ELOOP: return "ELOOP";
	case ENOMSG: return "ENOMSG";
	case ENOTCONN: return "ENOTCONN";
	case EMSGSIZE: return "EMSGSIZE";
	case EPROTO: return "EPROTO";
	case EBADMSG: return "EBADMSG";
	case ECANCELED: return "ECANCELED";
	case EOVERFLOW: return "EOVERFLOW";
	case ENOTSOCK: return "ENOTSOCK";
	case EMFILE: return "EMFILE";
	case ENFILE: return "ENFILE";
	case EXDEV: return "EXDEV";
	default: return "EUNKNOWN";
	}
}

napi_value tdl_errno_error(napi_env env, const char *op, int err)
{
	char msg[256];
	napi_value jsmsg, code, error = NULL, errnum, jsop;

	snprintf(msg, sizeof(msg), "%s: %s", op, strerror(err));
	if (napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &jsmsg) != napi_ok ||
	    napi_create_string_utf8(env, errno_name(err), NAPI_AUTO_LENGTH, &code) != napi_ok ||
	    napi_create_error(env, code, jsmsg, &error) != napi_ok)
		return NULL;
	/* Without these the error is still an error: carry on with what there is. */
	if (napi_create_int32(env, err, &errnum) == napi_ok)
		napi_set_named_property(env, error, "errno", errnum);
	if (napi_create_string_utf8(env, op, NAPI_AUTO_LENGTH, &jsop) == napi_ok)
		napi_set_named_property(env, error, "syscall", jsop);
	return error;
}

napi_value tdl_throw_errno(napi_env env, const char *op, int err)
{
	napi_value error = tdl_errno_error(env, op, err);
	if (error != NULL)
		napi_throw(env, error);
	else
		tdl_throw_pending(env, op);
	return NULL;
}

void tdl_reject(napi_env env, napi_deferred deferred, napi_value error)
{
	bool pending = false;

	if (error == NULL && napi_is_exception_pending(env, &pending) == napi_ok && pending)
		napi_get_and_clear_last_exception(env, &error);
	if (error == NULL) {
		napi_value msg;
		if (napi_create_string_utf8(env, "tendril kernel addon: could not build the error", NAPI_AUTO_LENGTH, &msg) != napi_ok ||
		    napi_create_error(env, NULL, msg, &error) != napi_ok)
			napi_get_undefined(env, &error);
	}
	napi_reject_deferred(env, deferred, error);
}

napi_value tdl_throw_pending(napi_env env, const char *msg)
{
	bool pending = false;
	if (napi_is_exception_pending(env, &pending) != napi_ok || !pending)
		napi_throw_error(env, NULL, msg);
	return NULL;
}

napi_value tdl_throw_type(napi_env env, const char *msg)
{
	napi_throw_type_error(env, NULL, msg);
	return NULL;
}

napi_status tdl_export_fn(napi_env env, napi_value obj, const char *name, napi_callback cb)
{
	napi_value fn;
	napi_status st = napi_create_function(env, name, NAPI_AUTO_LENGTH, cb, NULL, &fn);
	if (st != napi_ok)
		return st;
	return napi_set_named_property(env, obj, name, fn);
}

int tdl_get_string(napi_env env, napi_value v, char *buf, size_t cap, const char *what)
{
	size_t len = 0, copied = 0;
	char msg[128];

	if (napi_get_value_string_utf8(env, v, NULL, 0, &len) != napi_ok) {
		snprintf(msg, sizeof(msg), "%s must be a string", what);
		tdl_throw_type(env, msg);
		return -1;
	}
	if (len >= cap) {
		snprintf(msg, sizeof(msg), "%s is longer than %zu bytes", what, cap - 1);
		tdl_throw_type(env, msg);
		return -1;
	}
	if (napi_get_value_string_utf8(env, v, buf, cap, &copied) != napi_ok || copied != len) {
		tdl_throw_pending(env, what);
		return -1;
	}
	if (strlen(buf) != len) {
		snprintf(msg, sizeof(msg), "%s must not contain NUL characters", what);
		tdl_throw_type(env, msg);
		return -1;
	}
	return 0;
}

/* An integral number in [min, max]; everything else is a TypeError. */
static int get_integer(napi_env env, napi_value v, double min, double max, double *out, const char *what)
{
	char msg[128];
	double d;

	/* The range check comes first: it makes the int64 cast below defined. */
	if (napi_get_value_double(env, v, &d) != napi_ok || !(d >= min && d <= max) || (double)(int64_t)d != d) {
		snprintf(msg, sizeof(msg), "%s must be an integer from %.0f to %.0f", what, min, max);
		tdl_throw_type(env, msg);
		return -1;
	}
	*out = d;
	return 0;
}

int tdl_get_int32(napi_env env, napi_value v, int32_t *out, const char *what)
{
	double d;
	if (get_integer(env, v, (double)INT32_MIN, (double)INT32_MAX, &d, what) != 0)
		return -1;
	*out = (int32_t)d;
	return 0;
}

int tdl_get_uint32(napi_env env, napi_value v, uint32_t *out, const char *what)
{
	double d;
	if (get_integer(env, v, 0.0, (double)UINT32_MAX, &d, what) != 0)
		return -1;
	*out = (uint32_t)d;
	return 0;
}

int tdl_get_bytes(napi_env env, napi_value v, void **data, size_t *len, const char *what)
{
	bool is_typed = false;
	char msg[128];

	napi_is_typedarray(env, v, &is_typed);
	if (is_typed) {
		napi_typedarray_type type;
		napi_value ab;
		size_t off;
		if (napi_get_typedarray_info(env, v, &type, len, data, &ab, &off) == napi_ok && type == napi_uint8_array)
			return 0;
	}
	snprintf(msg, sizeof(msg), "%s must be a Uint8Array", what);
	tdl_throw_type(env, msg);
	return -1;
}

int tdl_queue_work(napi_env env, const char *name, napi_async_execute_callback execute,
		   napi_async_complete_callback complete, void *data, napi_async_work *work, napi_deferred *deferred,
		   napi_value *promise)
{
	napi_value rname;

	*work = NULL;
	if (napi_create_string_utf8(env, name, NAPI_AUTO_LENGTH, &rname) != napi_ok ||
	    napi_create_async_work(env, NULL, rname, execute, complete, data, work) != napi_ok) {
		tdl_throw_pending(env, name);
		return -1;
	}
	if (napi_create_promise(env, deferred, promise) != napi_ok) {
		napi_delete_async_work(env, *work);
		tdl_throw_pending(env, name);
		return -1;
	}
	if (napi_queue_async_work(env, *work) != napi_ok) {
		/* The promise is dropped unsettled and never returned: nobody waits on it. */
		napi_delete_async_work(env, *work);
		tdl_throw_pending(env, name);
		return -1;
	}
	return 0;
}

static napi_value init(napi_env env, napi_value exports)
{
	if (tdl_netlink_register(env, exports) != napi_ok || tdl_bpf_register(env, exports) != napi_ok) {
		napi_throw_error(env, NULL, "tendril kernel addon: registration failed");
		return NULL;
	}
	return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
