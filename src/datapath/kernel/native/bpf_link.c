/*
 * Programs and links: tcx links through the raw BPF_LINK_CREATE (Debian's
 * libbpf 1.1 predates tcx), atomic program replacement on a link, detach,
 * link and program info, and BPF_PROG_TEST_RUN. Attach (which may enter a
 * namespace), detach (an RCU grace period) and test runs (many repetitions)
 * run on libuv's pool.
 */
#define _GNU_SOURCE /* setns */
#include "bpf_internal.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/*
 * The kernel's link_create attributes for tcx (UAPI since 6.6): after
 * prog_fd, target_ifindex, attach_type and flags comes a union whose tcx
 * member is {relative_fd | relative_id, expected_revision}. Debian's headers
 * are older, so the layout is spelled out and tied to their offsets.
 */
struct tdl_tcx_link_create {
	uint32_t prog_fd;
	uint32_t target_ifindex;
	uint32_t attach_type;
	uint32_t flags;
	uint32_t relative_fd;
	uint32_t pad;
	uint64_t expected_revision;
};
_Static_assert(offsetof(union bpf_attr, link_create.prog_fd) == offsetof(struct tdl_tcx_link_create, prog_fd),
	       "link_create.prog_fd");
_Static_assert(offsetof(union bpf_attr, link_create.target_ifindex) ==
		       offsetof(struct tdl_tcx_link_create, target_ifindex),
	       "link_create.target_ifindex");
_Static_assert(offsetof(union bpf_attr, link_create.attach_type) == offsetof(struct tdl_tcx_link_create, attach_type),
	       "link_create.attach_type");
_Static_assert(offsetof(union bpf_attr, link_create.flags) == offsetof(struct tdl_tcx_link_create, flags),
	       "link_create.flags");
_Static_assert(offsetof(union bpf_attr, link_create.target_btf_id) ==
		       offsetof(struct tdl_tcx_link_create, relative_fd),
	       "link_create union");

#define TDL_BPF_TCX_INGRESS 46
#define TDL_BPF_TCX_EGRESS 47
#define TDL_BPF_LINK_TYPE_TCX 11
#define TDL_BPF_F_BEFORE (1U << 3)
#define TDL_BPF_F_AFTER (1U << 4)

#define MAX_TEST_DATA (1u << 20)
#define MAX_TEST_CTX 4096
/* A run holds a pool thread (one of four) until it ends: a million short runs take well under a second. */
#define MAX_TEST_REPEAT 1000000u

struct attach_work {
	napi_async_work work;
	napi_deferred deferred;
	struct tdl_tcx_link_create attr;
	int prog_fd; /* a dup, owned here */
	char netns[4096]; /* "": the caller's namespace */
	int netns_fd; /* opened on the pool thread; -1 until then */
	struct tdl_bpf_handle link;
	int err;
	char op[4400];
};

/* The link is created by a thread of its own when it must enter a namespace. */
static void *attach_in_netns(void *arg)
{
	struct attach_work *w = arg;
	if (setns(w->netns_fd, CLONE_NEWNET) != 0) {
		w->err = errno;
		return NULL;
	}
	w->attr.prog_fd = (uint32_t)w->prog_fd;
	long fd = syscall(__NR_bpf, BPF_LINK_CREATE, &w->attr, sizeof(w->attr));
	if (fd < 0)
		w->err = errno;
	else
		w->link.fd = (int)fd;
	return NULL;
}

static void attach_execute(napi_env env, void *data)
{
	struct attach_work *w = data;
	(void)env;

	w->link.fd = -1;
	if (w->netns[0] != '\0') {
		/*
		 * Opened here, not on the main thread: a path on a slow filesystem,
		 * or a FIFO (which O_NONBLOCK keeps from blocking even this thread),
		 * must not stall the event loop. setns() refuses what is not a netns.
		 */
		w->netns_fd = open(w->netns, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
		if (w->netns_fd < 0) {
			w->err = errno;
			snprintf(w->op, sizeof(w->op), "open netns %s", w->netns);
			return;
		}
		/*
		 * The thread starts with every signal blocked: it runs nothing but
		 * setns and bpf(), no signal handler either, and ends in the other
		 * namespace.
		 */
		pthread_t t;
		sigset_t all, old;
		sigfillset(&all);
		pthread_sigmask(SIG_BLOCK, &all, &old);
		int err = pthread_create(&t, NULL, attach_in_netns, w);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		if (err != 0) {
			w->err = err;
			return;
		}
		pthread_join(t, NULL);
	} else {
		w->attr.prog_fd = (uint32_t)w->prog_fd;
		long fd = syscall(__NR_bpf, BPF_LINK_CREATE, &w->attr, sizeof(w->attr));
		if (fd < 0)
			w->err = errno;
		else
			w->link.fd = (int)fd;
	}
	if (w->err == 0)
		w->err = tdl_bpf_handle_fill(&w->link, TDL_BPF_LINK, w->link.fd);
}

static void attach_complete(napi_env env, napi_status status, void *data)
{
	struct attach_work *w = data;
	napi_value handle;

	if (status != napi_ok && w->err == 0) {
		/* Cancelled: link.fd is -1 unless the work ran. */
		if (w->link.fd >= 0)
			close(w->link.fd);
		w->link.fd = -1;
		w->err = ECANCELED;
	}
	if (w->err != 0) {
		tdl_reject(env, w->deferred, tdl_errno_error(env, w->op, w->err));
	} else {
		handle = tdl_bpf_wrap(env, &w->link);
		if (handle == NULL) {
			/* tdl_bpf_wrap closed the fd or left it to an external; its exception is pending. */
			tdl_reject(env, w->deferred, NULL);
		} else {
			napi_resolve_deferred(env, w->deferred, handle);
		}
	}
	napi_delete_async_work(env, w->work);
	close(w->prog_fd);
	if (w->netns_fd >= 0)
		close(w->netns_fd);
	free(w);
}

/*
 * tcxAttach(prog, ifindex, attachType, flags, netnsPath | null) →
 * Promise<link handle>. attachType is 46 (ingress) or 47 (egress); flags may
 * be BPF_F_BEFORE or BPF_F_AFTER with no anchor (first or last place among
 * the device's tcx programs). With netnsPath, ifindex is a device of that
 * namespace and the link is created from a thread that entered it.
 */
static napi_value js_tcx_attach(napi_env env, napi_callback_info info)
{
	size_t argc = 5;
	napi_value argv[5], promise;
	struct tdl_bpf_handle *prog;
	struct attach_work *w;
	uint32_t ifindex, attach_type, flags = 0;
	char netns[4096] = "";
	bool has_netns = false;

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	prog = tdl_bpf_unwrap(env, argv[0], TDL_BPF_PROG, "program");
	if (prog == NULL || tdl_get_uint32(env, argv[1], &ifindex, "ifindex") != 0 ||
	    tdl_get_uint32(env, argv[2], &attach_type, "attachType") != 0 ||
	    (argc > 3 && !tdl_is_nullish(env, argv[3]) && tdl_get_uint32(env, argv[3], &flags, "flags") != 0))
		return NULL;
	if (argc > 4 && !tdl_is_nullish(env, argv[4])) {
		if (tdl_get_string(env, argv[4], netns, sizeof(netns), "netns") != 0)
			return NULL;
		if (netns[0] != '/')
			return tdl_throw_type(env, "netns must be an absolute path");
		has_netns = true;
	}
	if (attach_type != TDL_BPF_TCX_INGRESS && attach_type != TDL_BPF_TCX_EGRESS)
		return tdl_throw_type(env, "attachType must be BPF_TCX_INGRESS (46) or BPF_TCX_EGRESS (47)");
	if ((flags & ~(TDL_BPF_F_BEFORE | TDL_BPF_F_AFTER)) != 0)
		return tdl_throw_type(env, "flags may only be BPF_F_BEFORE or BPF_F_AFTER");
	w = calloc(1, sizeof(*w));
	if (w == NULL)
		return tdl_throw_errno(env, "BPF_LINK_CREATE", ENOMEM);
	snprintf(w->op, sizeof(w->op), "BPF_LINK_CREATE tcx %s ifindex %u%s%s %s",
		 attach_type == TDL_BPF_TCX_INGRESS ? "ingress" : "egress", ifindex, has_netns ? " netns " : "", netns,
		 prog->name);
	w->netns_fd = -1;
	w->link.fd = -1;
	memcpy(w->netns, netns, sizeof(w->netns));
	w->attr.target_ifindex = ifindex;
	w->attr.attach_type = attach_type;
	w->attr.flags = flags;
	w->prog_fd = dup(prog->fd);
	if (w->prog_fd < 0) {
		int err = errno;
		free(w);
		return tdl_throw_errno(env, "BPF_LINK_CREATE", err);
	}
	if (tdl_queue_work(env, "tendril:bpf-tcx-attach", attach_execute, attach_complete, w, &w->work, &w->deferred,
			   &promise) != 0) {
		close(w->prog_fd);
		free(w);
		return NULL;
	}
	return promise;
}

/*
 * linkUpdate(link, newProg, expectedOldProg | null): swaps the link's
 * program in one step. With an expected program the kernel refuses (EPERM)
 * when the link holds another one, so two agents cannot undo each other.
 */
static napi_value js_link_update(napi_env env, napi_callback_info info)
{
	size_t argc = 3;
	napi_value argv[3];
	struct tdl_bpf_handle *link, *prog, *old = NULL;
	LIBBPF_OPTS(bpf_link_update_opts, opts);
	char op[96];

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	link = tdl_bpf_unwrap(env, argv[0], TDL_BPF_LINK, "link");
	if (link == NULL)
		return NULL;
	prog = tdl_bpf_unwrap(env, argv[1], TDL_BPF_PROG, "program");
	if (prog == NULL)
		return NULL;
	if (argc > 2 && !tdl_is_nullish(env, argv[2])) {
		old = tdl_bpf_unwrap(env, argv[2], TDL_BPF_PROG, "expected program");
		if (old == NULL)
			return NULL;
		opts.flags = BPF_F_REPLACE;
		opts.old_prog_fd = (uint32_t)old->fd;
	}
	if (bpf_link_update(link->fd, prog->fd, &opts) != 0) {
		int err = errno;
		snprintf(op, sizeof(op), "BPF_LINK_UPDATE link %u %s", link->id, prog->name);
		return tdl_throw_errno(env, op, err);
	}
	return NULL;
}

/* ---- BPF_LINK_DETACH (libuv pool) ------------------------------------------- */

struct detach_work {
	napi_async_work work;
	napi_deferred deferred;
	int fd; /* a dup, so closing the handle meanwhile cannot reuse the number */
	int err;
	char op[64];
};

static void detach_execute(napi_env env, void *data)
{
	struct detach_work *w = data;
	(void)env;
	if (bpf_link_detach(w->fd) != 0)
		w->err = errno;
}

static void detach_complete(napi_env env, napi_status status, void *data)
{
	struct detach_work *w = data;
	napi_value undefined;

	if (status != napi_ok && w->err == 0)
		w->err = ECANCELED;
	if (w->err != 0) {
		tdl_reject(env, w->deferred, tdl_errno_error(env, w->op, w->err));
	} else {
		napi_get_undefined(env, &undefined);
		napi_resolve_deferred(env, w->deferred, undefined);
	}
	napi_delete_async_work(env, w->work);
	close(w->fd);
	free(w);
}

/*
 * linkDetach(link) → Promise<void>: BPF_LINK_DETACH; the link fd stays open
 * but holds nothing. On the pool: detaching a tcx link waits for an RCU
 * grace period (3 to 16 ms measured).
 */
static napi_value js_link_detach(napi_env env, napi_callback_info info)
{
	size_t argc = 1;
	napi_value argv[1], promise;
	struct tdl_bpf_handle *link;
	struct detach_work *w;

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	link = tdl_bpf_unwrap(env, argv[0], TDL_BPF_LINK, "link");
	if (link == NULL)
		return NULL;
	w = calloc(1, sizeof(*w));
	if (w == NULL)
		return tdl_throw_errno(env, "BPF_LINK_DETACH", ENOMEM);
	snprintf(w->op, sizeof(w->op), "BPF_LINK_DETACH link %u", link->id);
	w->fd = dup(link->fd);
	if (w->fd < 0) {
		int err = errno;
		free(w);
		return tdl_throw_errno(env, "BPF_LINK_DETACH", err);
	}
	if (tdl_queue_work(env, "tendril:bpf-link-detach", detach_execute, detach_complete, w, &w->work, &w->deferred,
			   &promise) != 0) {
		close(w->fd);
		free(w);
		return NULL;
	}
	return promise;
}

/*
 * linkInfo(link) → {id, type, progId, ifindex?, attachType?}. ifindex and
 * attachType are there for tcx links; a detached link (its device gone, or
 * BPF_LINK_DETACH) reports ifindex 0.
 */
static napi_value js_link_info(napi_env env, napi_callback_info info)
{
	size_t argc = 1;
	napi_value argv[1], out;
	struct tdl_bpf_handle *link;
	struct bpf_link_info li;
	uint32_t len = sizeof(li), ifindex, attach_type;
	const unsigned char *raw = (const unsigned char *)&li;
	const size_t off = offsetof(struct bpf_link_info, xdp.ifindex);
	char op[64];

	_Static_assert(offsetof(struct bpf_link_info, xdp.ifindex) + 8 <= sizeof(struct bpf_link_info), "link info");
	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	link = tdl_bpf_unwrap(env, argv[0], TDL_BPF_LINK, "link");
	if (link == NULL)
		return NULL;
	memset(&li, 0, sizeof(li));
	if (bpf_obj_get_info_by_fd(link->fd, &li, &len) != 0) {
		int err = errno;
		snprintf(op, sizeof(op), "BPF_OBJ_GET_INFO_BY_FD link %u", link->id);
		return tdl_throw_errno(env, op, err);
	}
	if (napi_create_object(env, &out) != napi_ok)
		return tdl_throw_pending(env, "linkInfo");
	tdl_set_u32(env, out, "id", li.id);
	tdl_set_u32(env, out, "type", li.type);
	tdl_set_u32(env, out, "progId", li.prog_id);
	if (li.type == TDL_BPF_LINK_TYPE_TCX) {
		/* The tcx member of the info union: {ifindex, attach_type}. */
		memcpy(&ifindex, raw + off, sizeof(ifindex));
		memcpy(&attach_type, raw + off + 4, sizeof(attach_type));
		tdl_set_u32(env, out, "ifindex", ifindex);
		tdl_set_u32(env, out, "attachType", attach_type);
	}
	return out;
}

/* progInfo(prog) → {id, type, name, tag, verifiedInsns}. */
static napi_value js_prog_info(napi_env env, napi_callback_info info)
{
	size_t argc = 1;
	napi_value argv[1], out;
	struct tdl_bpf_handle *prog;
	char tag[2 * BPF_TAG_SIZE + 1];

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	prog = tdl_bpf_unwrap(env, argv[0], TDL_BPF_PROG, "program");
	if (prog == NULL)
		return NULL;
	for (size_t i = 0; i < BPF_TAG_SIZE; i++)
		snprintf(tag + 2 * i, 3, "%02x", prog->prog_tag[i]);
	if (napi_create_object(env, &out) != napi_ok)
		return tdl_throw_pending(env, "progInfo");
	tdl_set_u32(env, out, "id", prog->id);
	tdl_set_u32(env, out, "type", prog->prog_type);
	tdl_set_str(env, out, "name", prog->name);
	tdl_set_str(env, out, "tag", tag);
	tdl_set_u32(env, out, "verifiedInsns", prog->verified_insns);
	return out;
}

/* ---- BPF_PROG_TEST_RUN (libuv pool) ------------------------------------------- */

struct test_run_work {
	napi_async_work work;
	napi_deferred deferred;
	int fd;
	char name[BPF_OBJ_NAME_LEN];
	void *data_in, *data_out, *ctx_in, *ctx_out;
	uint32_t data_in_len, data_out_cap, ctx_in_len, ctx_out_cap;
	uint32_t repeat, flags;
	/* results */
	uint32_t data_out_len, ctx_out_len, retval, duration;
	int err;
};

static void test_run_execute(napi_env env, void *data)
{
	struct test_run_work *w = data;
	LIBBPF_OPTS(bpf_test_run_opts, opts);
	(void)env;

	opts.data_in = w->data_in;
	opts.data_size_in = w->data_in_len;
	opts.data_out = w->data_out;
	opts.data_size_out = w->data_out_cap;
	if (w->ctx_in != NULL) {
		opts.ctx_in = w->ctx_in;
		opts.ctx_size_in = w->ctx_in_len;
	}
	if (w->ctx_out != NULL) {
		opts.ctx_out = w->ctx_out;
		opts.ctx_size_out = w->ctx_out_cap;
	}
	opts.repeat = (int)w->repeat;
	opts.flags = w->flags;
	/*
	 * The kernel ends a run with EINTR when a signal is pending for this
	 * thread, and libuv's pool threads take process signals (SIGCHLD of any
	 * child the agent spawns). Retrying would repeat the program's map side
	 * effects, so the signals go to another thread for the run instead.
	 */
	sigset_t all, old;
	int ret, err;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	ret = bpf_prog_test_run_opts(w->fd, &opts);
	err = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret != 0) {
		w->err = err;
		return;
	}
	w->retval = opts.retval;
	w->duration = opts.duration;
	/* The kernel reports the full length even when it had to cut (ENOSPC). */
	w->data_out_len = opts.data_size_out < w->data_out_cap ? opts.data_size_out : w->data_out_cap;
	w->ctx_out_len = opts.ctx_size_out < w->ctx_out_cap ? opts.ctx_size_out : w->ctx_out_cap;
}

static void test_run_complete(napi_env env, napi_status status, void *data)
{
	struct test_run_work *w = data;
	napi_value result, v;
	char op[64];

	if (status != napi_ok && w->err == 0)
		w->err = ECANCELED;
	if (w->err != 0) {
		snprintf(op, sizeof(op), "BPF_PROG_TEST_RUN %s", w->name);
		tdl_reject(env, w->deferred, tdl_errno_error(env, op, w->err));
	} else if (napi_create_object(env, &result) != napi_ok) {
		tdl_reject(env, w->deferred, NULL);
	} else {
		tdl_set_u32(env, result, "retval", w->retval);
		tdl_set_u32(env, result, "duration", w->duration);
		v = tdl_buffer_copy(env, w->data_out, w->data_out_len);
		napi_set_named_property(env, result, "data", v);
		if (w->ctx_out != NULL) {
			v = tdl_buffer_copy(env, w->ctx_out, w->ctx_out_len);
			napi_set_named_property(env, result, "ctx", v);
		}
		napi_resolve_deferred(env, w->deferred, result);
	}
	napi_delete_async_work(env, w->work);
	close(w->fd);
	free(w->data_in);
	free(w->data_out);
	free(w->ctx_in);
	free(w->ctx_out);
	free(w);
}

static void *copy_bytes(const void *src, size_t len)
{
	void *dst = malloc(len ? len : 1);
	if (dst != NULL && len > 0)
		memcpy(dst, src, len);
	return dst;
}

/*
 * progTestRun(prog, {data, dataOutSize, ctx?, ctxOutSize?, repeat, flags})
 * → Promise<{retval, duration, data, ctx?}>; duration is the kernel's mean
 * per repetition in ns. repeat is at most 1000000 (RangeError beyond).
 */
static napi_value js_prog_test_run(napi_env env, napi_callback_info info)
{
	size_t argc = 2, dlen = 0, clen = 0;
	napi_value argv[2], v, promise;
	struct tdl_bpf_handle *prog;
	struct test_run_work *w;
	void *data = NULL, *ctx = NULL;
	uint32_t out_cap = 0, ctx_out_cap = 0, repeat = 1, flags = 0;
	bool has_ctx_out = false;

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	prog = tdl_bpf_unwrap(env, argv[0], TDL_BPF_PROG, "program");
	if (prog == NULL)
		return NULL;
	if (napi_get_named_property(env, argv[1], "data", &v) != napi_ok ||
	    tdl_get_bytes(env, v, &data, &dlen, "data") != 0 ||
	    tdl_opt_uint32(env, argv[1], "dataOutSize", &out_cap, NULL) != 0 ||
	    tdl_opt_uint32(env, argv[1], "ctxOutSize", &ctx_out_cap, &has_ctx_out) != 0 ||
	    tdl_opt_uint32(env, argv[1], "repeat", &repeat, NULL) != 0 ||
	    tdl_opt_uint32(env, argv[1], "flags", &flags, NULL) != 0 || tdl_opt_value(env, argv[1], "ctx", &v) != 0)
		return NULL;
	if (v != NULL && tdl_get_bytes(env, v, &ctx, &clen, "ctx") != 0)
		return NULL;
	if (dlen > MAX_TEST_DATA || out_cap > MAX_TEST_DATA || clen > MAX_TEST_CTX || ctx_out_cap > MAX_TEST_CTX) {
		napi_throw_range_error(env, "ERR_BPF_SIZE", "test run data or context is too large");
		return NULL;
	}
	if (repeat > MAX_TEST_REPEAT) {
		napi_throw_range_error(env, "ERR_BPF_SIZE", "test run repeat must be at most 1000000");
		return NULL;
	}
	w = calloc(1, sizeof(*w));
	if (w == NULL)
		return tdl_throw_errno(env, "BPF_PROG_TEST_RUN", ENOMEM);
	memcpy(w->name, prog->name, sizeof(w->name));
	w->data_in_len = (uint32_t)dlen;
	w->data_out_cap = out_cap;
	w->ctx_in_len = (uint32_t)clen;
	w->ctx_out_cap = ctx_out_cap;
	w->repeat = repeat;
	w->flags = flags;
	w->data_in = copy_bytes(data, dlen);
	w->data_out = malloc(out_cap ? out_cap : 1);
	w->ctx_in = ctx != NULL ? copy_bytes(ctx, clen) : NULL;
	w->ctx_out = has_ctx_out ? malloc(ctx_out_cap ? ctx_out_cap : 1) : NULL;
	w->fd = dup(prog->fd);
	if (w->data_in == NULL || w->data_out == NULL || (ctx != NULL && w->ctx_in == NULL) ||
	    (has_ctx_out && w->ctx_out == NULL) || w->fd < 0) {
		int err = w->fd < 0 ? errno : ENOMEM;
		if (w->fd >= 0)
			close(w->fd);
		free(w->data_in);
		free(w->data_out);
		free(w->ctx_in);
		free(w->ctx_out);
		free(w);
		return tdl_throw_errno(env, "BPF_PROG_TEST_RUN", err);
	}
	if (tdl_queue_work(env, "tendril:bpf-prog-test-run", test_run_execute, test_run_complete, w, &w->work,
			   &w->deferred, &promise) != 0) {
		close(w->fd);
		free(w->data_in);
		free(w->data_out);
		free(w->ctx_in);
		free(w->ctx_out);
		free(w);
		return NULL;
	}
	return promise;
}

napi_status tdl_bpf_link_register(napi_env env, napi_value exports)
{
	napi_status st;
	if ((st = tdl_export_fn(env, exports, "tcxAttach", js_tcx_attach)) != napi_ok ||
	    (st = tdl_export_fn(env, exports, "linkUpdate", js_link_update)) != napi_ok ||
	    (st = tdl_export_fn(env, exports, "linkDetach", js_link_detach)) != napi_ok ||
	    (st = tdl_export_fn(env, exports, "linkInfo", js_link_info)) != napi_ok ||
	    (st = tdl_export_fn(env, exports, "progInfo", js_prog_info)) != napi_ok ||
	    (st = tdl_export_fn(env, exports, "progTestRun", js_prog_test_run)) != napi_ok)
		return st;
	return napi_ok;
}
