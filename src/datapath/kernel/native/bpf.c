/*
 * bpf() and libbpf for TypeScript: handles, libbpf's log capture, pins and
 * bpffs. Maps, objects, links and ring buffers live in bpf_*.c. Nothing here
 * decides anything; it moves bytes and reports errno.
 */
#include "bpf_internal.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#ifndef BPF_FS_MAGIC
#define BPF_FS_MAGIC 0xcafe4a11
#endif

/* Tags the externals this file creates, so a foreign external is refused. */
static const napi_type_tag handle_tag = { 0x74646c6270666831ULL, 0x9d3c51a2e07b44f6ULL };

/* ---- libbpf's log, captured per thread -------------------------------- */

/*
 * The start of a log says what failed ("prog 'x': BPF program load failed")
 * and its end says why (the verifier's last lines), so both are kept and the
 * middle of a long verifier log is dropped.
 */
#define LOG_HEAD 8192
#define LOG_TAIL 24576

struct tdl_log {
	char head[LOG_HEAD];
	size_t head_len;
	char tail[LOG_TAIL]; /* circular */
	size_t tail_start, tail_len;
	size_t dropped;
};

static _Thread_local struct tdl_log *current_log;

static void log_append(struct tdl_log *l, const char *s, size_t n)
{
	while (n > 0 && l->head_len < LOG_HEAD) {
		l->head[l->head_len++] = *s++;
		n--;
	}
	for (; n > 0; n--, s++) {
		if (l->tail_len == LOG_TAIL) {
			l->tail_start = (l->tail_start + 1) % LOG_TAIL;
			l->tail_len--;
			l->dropped++;
		}
		l->tail[(l->tail_start + l->tail_len) % LOG_TAIL] = *s;
		l->tail_len++;
	}
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list args)
{
	char line[1024];
	va_list again;
	int n;

	if (level != LIBBPF_WARN || current_log == NULL)
		return 0;
	va_copy(again, args);
	n = vsnprintf(line, sizeof(line), fmt, args);
	if (n >= 0 && (size_t)n < sizeof(line)) {
		log_append(current_log, line, (size_t)n);
	} else if (n >= 0) {
		/* A whole verifier log arrives as one message. */
		char *big = malloc((size_t)n + 1);
		if (big != NULL) {
			int m = vsnprintf(big, (size_t)n + 1, fmt, again);
			if (m >= 0)
				log_append(current_log, big, (size_t)m < (size_t)n ? (size_t)m : (size_t)n);
			free(big);
		}
	}
	va_end(again);
	return 0;
}

void tdl_log_install(void)
{
	libbpf_set_print(libbpf_print);
}

void tdl_log_begin(void)
{
	free(current_log);
	current_log = calloc(1, sizeof(*current_log));
}

char *tdl_log_end(void)
{
	struct tdl_log *l = current_log;
	char marker[64];
	char *out;
	size_t mlen = 0, len, pos = 0;

	current_log = NULL;
	if (l == NULL)
		return NULL;
	if (l->head_len == 0) {
		free(l);
		return NULL;
	}
	if (l->dropped > 0)
		mlen = (size_t)snprintf(marker, sizeof(marker), "\n[... %zu bytes of log omitted ...]\n", l->dropped);
	len = l->head_len + mlen + l->tail_len;
	out = malloc(len + 1);
	if (out != NULL) {
		memcpy(out, l->head, l->head_len);
		pos = l->head_len;
		memcpy(out + pos, marker, mlen);
		pos += mlen;
		for (size_t i = 0; i < l->tail_len; i++)
			out[pos++] = l->tail[(l->tail_start + i) % LOG_TAIL];
		/* Trailing newlines say nothing. */
		while (pos > 0 && (out[pos - 1] == '\n' || out[pos - 1] == ' '))
			pos--;
		out[pos] = '\0';
	}
	free(l);
	return out;
}

/* ---- errors ------------------------------------------------------------- */

napi_value tdl_bpf_error(napi_env env, const char *op, int err, const char *log)
{
	char what[256];
	napi_value error, jslog;
	const char *extra = NULL;

	/* libbpf's own codes (bad ELF, relocation) are not errnos: say what they mean. */
	if (err >= __LIBBPF_ERRNO__START) {
		libbpf_strerror(err, what, sizeof(what));
		extra = what;
		err = EINVAL;
	}
	error = tdl_errno_error(env, op, err);
	if (extra != NULL || (log != NULL && log[0] != '\0')) {
		size_t n = (extra ? strlen(extra) + 1 : 0) + (log ? strlen(log) : 0) + 1;
		char *text = malloc(n);
		if (text != NULL) {
			snprintf(text, n, "%s%s%s", extra ? extra : "", extra && log ? "\n" : "", log ? log : "");
			napi_create_string_utf8(env, text, NAPI_AUTO_LENGTH, &jslog);
			napi_set_named_property(env, error, "log", jslog);
			free(text);
		}
	}
	return error;
}

/* ---- small N-API helpers ---------------------------------------------- */

bool tdl_is_nullish(napi_env env, napi_value v)
{
	napi_valuetype t;
	if (v == NULL || napi_typeof(env, v, &t) != napi_ok)
		return true;
	return t == napi_undefined || t == napi_null;
}

int tdl_opt_value(napi_env env, napi_value obj, const char *key, napi_value *out)
{
	*out = NULL;
	if (tdl_is_nullish(env, obj))
		return 0;
	if (napi_get_named_property(env, obj, key, out) != napi_ok)
		return -1;
	if (tdl_is_nullish(env, *out))
		*out = NULL;
	return 0;
}

int tdl_opt_uint32(napi_env env, napi_value obj, const char *key, uint32_t *out, bool *present)
{
	napi_value v;
	if (present)
		*present = false;
	if (tdl_opt_value(env, obj, key, &v) != 0)
		return -1;
	if (v == NULL)
		return 0;
	if (tdl_get_uint32(env, v, out, key) != 0)
		return -1;
	if (present)
		*present = true;
	return 0;
}

napi_value tdl_buffer_copy(napi_env env, const void *data, size_t len)
{
	napi_value buf;
	void *dst;
	if (napi_create_buffer_copy(env, len, data, &dst, &buf) != napi_ok)
		return NULL;
	return buf;
}

void tdl_set_u32(napi_env env, napi_value obj, const char *key, uint32_t v)
{
	napi_value x;
	if (napi_create_uint32(env, v, &x) == napi_ok)
		napi_set_named_property(env, obj, key, x);
}

void tdl_set_str(napi_env env, napi_value obj, const char *key, const char *v)
{
	napi_value x;
	if (napi_create_string_utf8(env, v, NAPI_AUTO_LENGTH, &x) == napi_ok)
		napi_set_named_property(env, obj, key, x);
}

void tdl_set_bool(napi_env env, napi_value obj, const char *key, bool v)
{
	napi_value x;
	if (napi_get_boolean(env, v, &x) == napi_ok)
		napi_set_named_property(env, obj, key, x);
}

/* ---- handles ------------------------------------------------------------ */

uint32_t tdl_bpf_value_buf_size(uint32_t map_type, uint32_t value_size)
{
	switch (map_type) {
	case BPF_MAP_TYPE_PERCPU_HASH:
	case BPF_MAP_TYPE_PERCPU_ARRAY:
	case BPF_MAP_TYPE_LRU_PERCPU_HASH:
	case BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE: {
		int cpus = libbpf_num_possible_cpus();
		uint64_t slot = ((uint64_t)value_size + 7) & ~(uint64_t)7;
		uint64_t total;
		if (cpus <= 0)
			return 0;
		total = slot * (uint64_t)cpus;
		return total > UINT32_MAX ? 0 : (uint32_t)total;
	}
	default:
		return value_size;
	}
}

/*
 * What kind of bpf object an fd refers to, from its anon inode's name. A
 * link has two spellings: "bpf_link" when created, "bpf-link" when reopened
 * from a pin.
 */
static int fd_kind(int fd, enum tdl_bpf_kind *kind)
{
	char path[64], target[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, target, sizeof(target) - 1);
	if (n < 0)
		return errno;
	target[n] = '\0';
	if (strcmp(target, "anon_inode:bpf-map") == 0)
		*kind = TDL_BPF_MAP;
	else if (strcmp(target, "anon_inode:bpf-prog") == 0)
		*kind = TDL_BPF_PROG;
	else if (strcmp(target, "anon_inode:bpf_link") == 0 || strcmp(target, "anon_inode:bpf-link") == 0)
		*kind = TDL_BPF_LINK;
	else
		return EBADF;
	return 0;
}

int tdl_bpf_handle_fill(struct tdl_bpf_handle *h, enum tdl_bpf_kind kind, int fd)
{
	enum tdl_bpf_kind actual = 0;
	int err;

	memset(h, 0, sizeof(*h));
	h->kind = kind;
	h->fd = fd;
	err = fd_kind(fd, &actual);
	if (err == 0 && actual != kind)
		err = EINVAL;
	if (err == 0 && kind == TDL_BPF_MAP) {
		struct bpf_map_info info;
		uint32_t len = sizeof(info);
		memset(&info, 0, sizeof(info));
		if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0) {
			err = errno;
		} else {
			h->id = info.id;
			h->map_type = info.type;
			h->key_size = info.key_size;
			h->value_size = info.value_size;
			h->max_entries = info.max_entries;
			h->map_flags = info.map_flags;
			h->btf_id = info.btf_id;
			h->btf_key_type_id = info.btf_key_type_id;
			h->btf_value_type_id = info.btf_value_type_id;
			memcpy(h->name, info.name, sizeof(h->name));
			h->value_buf_size = tdl_bpf_value_buf_size(info.type, info.value_size);
			if (h->value_buf_size == 0 && info.value_size != 0)
				err = EOVERFLOW;
		}
	} else if (err == 0 && kind == TDL_BPF_PROG) {
		struct bpf_prog_info info;
		uint32_t len = sizeof(info);
		memset(&info, 0, sizeof(info));
		if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0) {
			err = errno;
		} else {
			h->id = info.id;
			h->prog_type = info.type;
			h->verified_insns = info.verified_insns;
			memcpy(h->prog_tag, info.tag, sizeof(h->prog_tag));
			memcpy(h->name, info.name, sizeof(h->name));
		}
	} else if (err == 0 && kind == TDL_BPF_LINK) {
		struct bpf_link_info info;
		uint32_t len = sizeof(info);
		memset(&info, 0, sizeof(info));
		if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0)
			err = errno;
		else
			h->id = info.id;
	}
	h->name[sizeof(h->name) - 1] = '\0';
	if (err != 0) {
		close(fd);
		h->fd = -1;
	}
	return err;
}

static void handle_finalize(napi_env env, void *data, void *hint)
{
	struct tdl_bpf_handle *h = data;
	(void)env;
	(void)hint;
	if (h->fd >= 0)
		close(h->fd);
	free(h);
}

napi_value tdl_bpf_wrap(napi_env env, const struct tdl_bpf_handle *src)
{
	struct tdl_bpf_handle *h = malloc(sizeof(*h));
	napi_value ext;

	if (h == NULL) {
		close(src->fd);
		return tdl_throw_errno(env, "tendril bpf handle", ENOMEM);
	}
	*h = *src;
	if (napi_create_external(env, h, handle_finalize, NULL, &ext) != napi_ok) {
		handle_finalize(env, h, NULL);
		return tdl_throw_pending(env, "tendril bpf handle");
	}
	/* On failure the untagged external still owns h: its finalizer closes the fd. */
	if (napi_type_tag_object(env, ext, &handle_tag) != napi_ok)
		return tdl_throw_pending(env, "tendril bpf handle");
	return ext;
}

struct tdl_bpf_handle *tdl_bpf_unwrap(napi_env env, napi_value v, enum tdl_bpf_kind kind, const char *what)
{
	static const char *const kinds[] = { "", "map", "program", "link" };
	char msg[128];
	bool tagged = false;
	void *data = NULL;
	struct tdl_bpf_handle *h;

	if (napi_check_object_type_tag(env, v, &handle_tag, &tagged) != napi_ok || !tagged ||
	    napi_get_value_external(env, v, &data) != napi_ok || data == NULL) {
		snprintf(msg, sizeof(msg), "%s must be a bpf %s handle", what, kinds[kind]);
		tdl_throw_type(env, msg);
		return NULL;
	}
	h = data;
	if (h->kind != kind) {
		snprintf(msg, sizeof(msg), "%s must be a bpf %s handle, not a %s", what, kinds[kind], kinds[h->kind]);
		tdl_throw_type(env, msg);
		return NULL;
	}
	if (h->fd < 0) {
		snprintf(msg, sizeof(msg), "%s (%s %s) is closed", what, kinds[kind], h->name);
		napi_throw_error(env, "ERR_BPF_CLOSED", msg);
		return NULL;
	}
	return h;
}

/* Any kind of handle, for the calls that work on all of them. */
static struct tdl_bpf_handle *unwrap_any(napi_env env, napi_value v, bool allow_closed)
{
	bool tagged = false;
	void *data = NULL;
	struct tdl_bpf_handle *h;

	if (napi_check_object_type_tag(env, v, &handle_tag, &tagged) != napi_ok || !tagged ||
	    napi_get_value_external(env, v, &data) != napi_ok || data == NULL) {
		tdl_throw_type(env, "handle must be a bpf handle");
		return NULL;
	}
	h = data;
	if (!allow_closed && h->fd < 0) {
		napi_throw_error(env, "ERR_BPF_CLOSED", "bpf handle is closed");
		return NULL;
	}
	return h;
}

static int parse_kind(napi_env env, napi_value v, enum tdl_bpf_kind *kind)
{
	char s[8];
	if (tdl_get_string(env, v, s, sizeof(s), "kind") != 0)
		return -1;
	if (strcmp(s, "map") == 0)
		*kind = TDL_BPF_MAP;
	else if (strcmp(s, "prog") == 0)
		*kind = TDL_BPF_PROG;
	else if (strcmp(s, "link") == 0)
		*kind = TDL_BPF_LINK;
	else {
		tdl_throw_type(env, "kind must be \"map\", \"prog\" or \"link\"");
		return -1;
	}
	return 0;
}

/* ---- generic calls -------------------------------------------------------- */

struct close_work {
	napi_async_work work;
	int fd;
};

static void close_execute(napi_env env, void *data)
{
	struct close_work *w = data;
	(void)env;
	close(w->fd);
	w->fd = -1;
}

static void close_complete(napi_env env, napi_status status, void *data)
{
	struct close_work *w = data;
	/* Cancelled before it ran: the fd is still open. */
	if (w->fd >= 0)
		close(w->fd);
	napi_delete_async_work(env, w->work);
	free(w);
}

/*
 * Closes a link fd on libuv's pool. The last close of an attached tcx link
 * detaches it, and the kernel then waits for an RCU grace period (measured:
 * 15 ms) before close(2) returns; the event loop must not wait with it. The
 * handle reads as closed at once; the fd number stays taken until the pool
 * thread has closed it, so it cannot be reused under anyone meanwhile.
 */
static void close_link_later(napi_env env, int fd)
{
	struct close_work *w = malloc(sizeof(*w));
	napi_value rname;

	if (w != NULL) {
		w->fd = fd;
		if (napi_create_string_utf8(env, "tendril:bpf-link-close", NAPI_AUTO_LENGTH, &rname) == napi_ok &&
		    napi_create_async_work(env, NULL, rname, close_execute, close_complete, w, &w->work) == napi_ok) {
			if (napi_queue_async_work(env, w->work) == napi_ok)
				return;
			napi_delete_async_work(env, w->work);
		}
		free(w);
	}
	close(fd);
}

/* close(handle): idempotent. */
static napi_value js_close(napi_env env, napi_callback_info info)
{
	size_t argc = 1;
	napi_value argv[1];
	struct tdl_bpf_handle *h;

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	h = unwrap_any(env, argv[0], true);
	if (h == NULL)
		return NULL;
	if (h->fd >= 0) {
		int fd = h->fd;
		h->fd = -1;
		if (h->kind == TDL_BPF_LINK)
			close_link_later(env, fd);
		else
			close(fd);
	}
	return NULL;
}

/* fd(handle) → number, for netlink calls that take a program fd. */
static napi_value js_fd(napi_env env, napi_callback_info info)
{
	size_t argc = 1;
	napi_value argv[1], out;
	struct tdl_bpf_handle *h;

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	h = unwrap_any(env, argv[0], false);
	if (h == NULL)
		return NULL;
	napi_create_int32(env, h->fd, &out);
	return out;
}

/* objPin(handle, path) */
static napi_value js_obj_pin(napi_env env, napi_callback_info info)
{
	size_t argc = 2;
	napi_value argv[2];
	char path[4096], op[4200];
	struct tdl_bpf_handle *h;

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	h = unwrap_any(env, argv[0], false);
	if (h == NULL || tdl_get_string(env, argv[1], path, sizeof(path), "path") != 0)
		return NULL;
	if (bpf_obj_pin(h->fd, path) != 0) {
		int err = errno;
		snprintf(op, sizeof(op), "BPF_OBJ_PIN %s %s", h->name, path);
		return tdl_throw_errno(env, op, err);
	}
	return NULL;
}

/* objGet(path, kind) → handle of that kind (EINVAL when the pin holds another kind). */
static napi_value js_obj_get(napi_env env, napi_callback_info info)
{
	size_t argc = 2;
	napi_value argv[2];
	char path[4096], op[4200];
	enum tdl_bpf_kind kind;
	struct tdl_bpf_handle h;
	int fd, err;

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	if (tdl_get_string(env, argv[0], path, sizeof(path), "path") != 0 || parse_kind(env, argv[1], &kind) != 0)
		return NULL;
	snprintf(op, sizeof(op), "BPF_OBJ_GET %s", path);
	fd = bpf_obj_get(path);
	if (fd < 0)
		return tdl_throw_errno(env, op, errno);
	err = tdl_bpf_handle_fill(&h, kind, fd);
	if (err != 0)
		return tdl_throw_errno(env, op, err);
	return tdl_bpf_wrap(env, &h);
}

/* unpin(path): unlink(2) of a pin on bpffs. */
static napi_value js_unpin(napi_env env, napi_callback_info info)
{
	size_t argc = 1;
	napi_value argv[1];
	char path[4096], op[4200];

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	if (tdl_get_string(env, argv[0], path, sizeof(path), "path") != 0)
		return NULL;
	if (unlink(path) != 0) {
		int err = errno;
		snprintf(op, sizeof(op), "unlink %s", path);
		return tdl_throw_errno(env, op, err);
	}
	return NULL;
}

/* isBpffs(path) → boolean (false when the path does not exist). */
static napi_value js_is_bpffs(napi_env env, napi_callback_info info)
{
	size_t argc = 1;
	napi_value argv[1];
	char path[4096], op[4200];
	struct statfs st;

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	if (tdl_get_string(env, argv[0], path, sizeof(path), "path") != 0)
		return NULL;
	if (statfs(path, &st) != 0) {
		int err = errno;
		napi_value f;
		if (err == ENOENT) {
			napi_get_boolean(env, false, &f);
			return f;
		}
		snprintf(op, sizeof(op), "statfs %s", path);
		return tdl_throw_errno(env, op, err);
	}
	napi_value out;
	napi_get_boolean(env, (unsigned long)st.f_type == (unsigned long)BPF_FS_MAGIC, &out);
	return out;
}

/*
 * mountBpffs(path): mount(2) a bpf filesystem on an existing directory. The
 * caller checks isBpffs first; this never stacks a second mount itself.
 */
static napi_value js_mount_bpffs(napi_env env, napi_callback_info info)
{
	size_t argc = 1;
	napi_value argv[1];
	char path[4096], op[4200];

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	if (tdl_get_string(env, argv[0], path, sizeof(path), "path") != 0)
		return NULL;
	if (mount("bpf", path, "bpf", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0700") != 0) {
		int err = errno;
		snprintf(op, sizeof(op), "mount bpf %s", path);
		return tdl_throw_errno(env, op, err);
	}
	return NULL;
}

/* possibleCpus() → libbpf's count of possible CPUs (what per-CPU values are sized by). */
static napi_value js_possible_cpus(napi_env env, napi_callback_info info)
{
	napi_value out;
	int n = libbpf_num_possible_cpus();
	(void)info;
	if (n < 0)
		return tdl_throw_errno(env, "libbpf_num_possible_cpus", -n);
	napi_create_int32(env, n, &out);
	return out;
}

napi_status tdl_bpf_register(napi_env env, napi_value exports)
{
	napi_value bpf;
	napi_status st;

	tdl_log_install();
	st = napi_create_object(env, &bpf);
	if (st != napi_ok)
		return st;
	if ((st = tdl_export_fn(env, bpf, "close", js_close)) != napi_ok ||
	    (st = tdl_export_fn(env, bpf, "fd", js_fd)) != napi_ok ||
	    (st = tdl_export_fn(env, bpf, "objPin", js_obj_pin)) != napi_ok ||
	    (st = tdl_export_fn(env, bpf, "objGet", js_obj_get)) != napi_ok ||
	    (st = tdl_export_fn(env, bpf, "unpin", js_unpin)) != napi_ok ||
	    (st = tdl_export_fn(env, bpf, "isBpffs", js_is_bpffs)) != napi_ok ||
	    (st = tdl_export_fn(env, bpf, "mountBpffs", js_mount_bpffs)) != napi_ok ||
	    (st = tdl_export_fn(env, bpf, "possibleCpus", js_possible_cpus)) != napi_ok)
		return st;
	if ((st = tdl_bpf_map_register(env, bpf)) != napi_ok || (st = tdl_bpf_object_register(env, bpf)) != napi_ok ||
	    (st = tdl_bpf_link_register(env, bpf)) != napi_ok || (st = tdl_bpf_ringbuf_register(env, bpf)) != napi_ok)
		return st;
	return napi_set_named_property(env, exports, "bpf", bpf);
}
