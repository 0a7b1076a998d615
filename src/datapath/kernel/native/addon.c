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
	default: return "EUNKNOWN";
	}
}

napi_value tdl_errno_error(napi_env env, const char *op, int err)
{
	char msg[256];
	napi_value jsmsg, code, error, errnum;

	snprintf(msg, sizeof(msg), "%s: %s", op, strerror(err));
	napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &jsmsg);
	napi_create_string_utf8(env, errno_name(err), NAPI_AUTO_LENGTH, &code);
	napi_create_error(env, code, jsmsg, &error);
	napi_create_int32(env, err, &errnum);
	napi_set_named_property(env, error, "errno", errnum);
	napi_value jsop;
	napi_create_string_utf8(env, op, NAPI_AUTO_LENGTH, &jsop);
	napi_set_named_property(env, error, "syscall", jsop);
	return error;
}

napi_value tdl_throw_errno(napi_env env, const char *op, int err)
{
	napi_throw(env, tdl_errno_error(env, op, err));
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
	size_t len = 0;
	char msg[128];

	if (napi_get_value_string_utf8(env, v, NULL, 0, &len) != napi_ok) {
		snprintf(msg, sizeof(msg), "%s must be a string", what);
		tdl_throw_type(env, msg);
		return -1;
	}
	if (len + 1 > cap) {
		snprintf(msg, sizeof(msg), "%s is longer than %zu bytes", what, cap - 1);
		tdl_throw_type(env, msg);
		return -1;
	}
	if (napi_get_value_string_utf8(env, v, buf, cap, &len) != napi_ok)
		return -1;
	return 0;
}

int tdl_get_int32(napi_env env, napi_value v, int32_t *out, const char *what)
{
	char msg[128];
	if (napi_get_value_int32(env, v, out) != napi_ok) {
		snprintf(msg, sizeof(msg), "%s must be a number", what);
		tdl_throw_type(env, msg);
		return -1;
	}
	return 0;
}

int tdl_get_uint32(napi_env env, napi_value v, uint32_t *out, const char *what)
{
	char msg[128];
	if (napi_get_value_uint32(env, v, out) != napi_ok) {
		snprintf(msg, sizeof(msg), "%s must be a number", what);
		tdl_throw_type(env, msg);
		return -1;
	}
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

static napi_value init(napi_env env, napi_value exports)
{
	if (tdl_netlink_register(env, exports) != napi_ok || tdl_bpf_register(env, exports) != napi_ok) {
		napi_throw_error(env, NULL, "tendril kernel addon: registration failed");
		return NULL;
	}
	return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
