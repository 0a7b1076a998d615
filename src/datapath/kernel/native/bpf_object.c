/*
 * ELF objects built by clang, opened and loaded through libbpf on libuv's
 * pool (the verifier can take a while). Maps marked LIBBPF_PIN_BY_NAME are
 * pinned under the pin root, or reused when a pin is already there, which is
 * how maps outlive an agent restart; without a pin root nothing is pinned.
 * What TypeScript gets back is one handle
 * per program and map, each owning a dup of libbpf's fd, so the bpf_object is
 * closed before the promise settles and nothing of libbpf stays alive.
 */
#include "bpf_internal.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_OVERRIDES 256
#define MAX_ITEMS 512

struct size_override {
	char name[256];
	uint32_t max_entries;
};

struct loaded_prog {
	struct tdl_bpf_handle h;
	char name[128];
	char section[128];
	uint32_t expected_attach_type;
};

struct loaded_map {
	struct tdl_bpf_handle h;
	char name[128];
	char pin_path[4096];
	bool pinned, reused, internal;
};

struct load_work {
	napi_async_work work;
	napi_deferred deferred;
	char path[4096];
	char pin_root[4096];
	bool has_pin_root;
	struct size_override *overrides;
	size_t n_overrides;
	/* results */
	struct loaded_prog *progs;
	size_t n_progs;
	struct loaded_map *maps;
	size_t n_maps;
	int err;
	char op[4400];
	char *log;
};

static const char *base_name(const char *path)
{
	const char *slash = strrchr(path, '/');
	return slash ? slash + 1 : path;
}

static void copy_str(char *dst, size_t cap, const char *src)
{
	snprintf(dst, cap, "%s", src ? src : "");
}

static void fail(struct load_work *w, int err, const char *what, const char *subject)
{
	w->err = err < 0 ? -err : err;
	snprintf(w->op, sizeof(w->op), "%s %s", what, subject);
}

/* Collects dups of every program and map fd of a loaded object. */
static void collect(struct load_work *w, struct bpf_object *obj)
{
	struct bpf_program *p;
	struct bpf_map *m;
	size_t np = 0, nm = 0;

	bpf_object__for_each_program(p, obj) np++;
	bpf_object__for_each_map(m, obj) nm++;
	if (np > MAX_ITEMS || nm > MAX_ITEMS) {
		fail(w, E2BIG, "bpf_object__load", base_name(w->path));
		return;
	}
	w->progs = calloc(np ? np : 1, sizeof(*w->progs));
	w->maps = calloc(nm ? nm : 1, sizeof(*w->maps));
	if (w->progs == NULL || w->maps == NULL) {
		fail(w, ENOMEM, "bpf_object__load", base_name(w->path));
		return;
	}
	bpf_object__for_each_program(p, obj) {
		struct loaded_prog *lp = &w->progs[w->n_progs];
		int fd = bpf_program__fd(p), err;
		if (fd < 0) /* autoload disabled for this program */
			continue;
		fd = dup(fd);
		err = fd < 0 ? errno : tdl_bpf_handle_fill(&lp->h, TDL_BPF_PROG, fd);
		if (err != 0) {
			fail(w, err, "BPF_OBJ_GET_INFO_BY_FD", bpf_program__name(p));
			return;
		}
		copy_str(lp->name, sizeof(lp->name), bpf_program__name(p));
		copy_str(lp->section, sizeof(lp->section), bpf_program__section_name(p));
		lp->expected_attach_type = (uint32_t)bpf_program__expected_attach_type(p);
		w->n_progs++;
	}
	bpf_object__for_each_map(m, obj) {
		struct loaded_map *lm = &w->maps[w->n_maps];
		int fd = bpf_map__fd(m), err;
		if (fd < 0)
			continue;
		fd = dup(fd);
		err = fd < 0 ? errno : tdl_bpf_handle_fill(&lm->h, TDL_BPF_MAP, fd);
		if (err != 0) {
			fail(w, err, "BPF_OBJ_GET_INFO_BY_FD", bpf_map__name(m));
			return;
		}
		copy_str(lm->name, sizeof(lm->name), bpf_map__name(m));
		copy_str(lm->pin_path, sizeof(lm->pin_path), bpf_map__pin_path(m));
		lm->pinned = bpf_map__is_pinned(m);
		lm->internal = bpf_map__is_internal(m);
		w->n_maps++;
	}
}

static void load_execute(napi_env env, void *data)
{
	struct load_work *w = data;
	LIBBPF_OPTS(bpf_object_open_opts, opts);
	struct bpf_object *obj;
	struct bpf_map *m;
	bool *had_pin = NULL;
	size_t i, nm = 0;
	int err;
	(void)env;

	/*
	 * libbpf opens the file without O_NONBLOCK: a FIFO at the path would
	 * hold this pool thread (one of libuv's four, shared with every netlink
	 * request) until someone writes to it. Only a regular file goes on.
	 */
	struct stat st;
	int probe = open(w->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (probe < 0) {
		fail(w, errno, "bpf_object__open_file", w->path);
		return;
	}
	err = fstat(probe, &st) != 0 ? errno : (S_ISREG(st.st_mode) ? 0 : EINVAL);
	close(probe);
	if (err != 0) {
		fail(w, err, "bpf_object__open_file", w->path);
		if (err == EINVAL)
			w->log = strdup("not a regular file");
		return;
	}
	tdl_log_begin();
	if (w->has_pin_root)
		opts.pin_root_path = w->pin_root;
	obj = bpf_object__open_file(w->path, &opts);
	if (obj == NULL) {
		fail(w, errno, "bpf_object__open_file", w->path);
		w->log = tdl_log_end();
		return;
	}
	/*
	 * Pins only under a root the caller chose: libbpf's default root would
	 * leave pins in /sys/fs/bpf for every object loaded without one.
	 */
	if (!w->has_pin_root) {
		bpf_object__for_each_map(m, obj) {
			err = bpf_map__set_pin_path(m, NULL);
			if (err != 0) {
				fail(w, err, "bpf_map__set_pin_path", bpf_map__name(m));
				goto out;
			}
		}
	}
	for (i = 0; i < w->n_overrides; i++) {
		m = bpf_object__find_map_by_name(obj, w->overrides[i].name);
		if (m == NULL) {
			fail(w, ENOENT, "bpf_map__set_max_entries", w->overrides[i].name);
			goto out;
		}
		err = bpf_map__set_max_entries(m, w->overrides[i].max_entries);
		if (err != 0) {
			fail(w, err, "bpf_map__set_max_entries", w->overrides[i].name);
			goto out;
		}
	}
	/* Which pins exist before the load tells which maps libbpf reused. */
	bpf_object__for_each_map(m, obj) nm++;
	had_pin = calloc(nm ? nm : 1, sizeof(*had_pin));
	if (had_pin == NULL) {
		fail(w, ENOMEM, "bpf_object__load", base_name(w->path));
		goto out;
	}
	i = 0;
	bpf_object__for_each_map(m, obj) {
		const char *pin = bpf_map__pin_path(m);
		had_pin[i++] = pin != NULL && access(pin, F_OK) == 0;
	}
	err = bpf_object__load(obj);
	if (err != 0) {
		fail(w, err, "bpf_object__load", base_name(w->path));
		goto out;
	}
	collect(w, obj);
	if (w->err == 0) {
		size_t j = 0;
		i = 0;
		bpf_object__for_each_map(m, obj) {
			if (j < w->n_maps && bpf_map__fd(m) >= 0) {
				w->maps[j].reused = had_pin[i] && w->maps[j].pinned;
				j++;
			}
			i++;
		}
	}
out:
	free(had_pin);
	bpf_object__close(obj);
	w->log = tdl_log_end();
}

static void free_results(struct load_work *w)
{
	/* Handles not yet wrapped still own their fds. */
	for (size_t i = 0; i < w->n_progs; i++)
		if (w->progs[i].h.fd >= 0)
			close(w->progs[i].h.fd);
	for (size_t i = 0; i < w->n_maps; i++)
		if (w->maps[i].h.fd >= 0)
			close(w->maps[i].h.fd);
	free(w->progs);
	free(w->maps);
	free(w->overrides);
	free(w->log);
	free(w);
}

static napi_value prog_object(napi_env env, struct loaded_prog *lp)
{
	napi_value o, handle;
	char tag[2 * BPF_TAG_SIZE + 1];

	handle = tdl_bpf_wrap(env, &lp->h);
	lp->h.fd = -1; /* the external owns it now */
	if (handle == NULL)
		return NULL;
	for (size_t i = 0; i < BPF_TAG_SIZE; i++)
		snprintf(tag + 2 * i, 3, "%02x", lp->h.prog_tag[i]);
	if (napi_create_object(env, &o) != napi_ok)
		return NULL;
	napi_set_named_property(env, o, "handle", handle);
	tdl_set_str(env, o, "name", lp->name);
	tdl_set_str(env, o, "section", lp->section);
	tdl_set_u32(env, o, "type", lp->h.prog_type);
	tdl_set_u32(env, o, "expectedAttachType", lp->expected_attach_type);
	tdl_set_u32(env, o, "id", lp->h.id);
	tdl_set_str(env, o, "tag", tag);
	return o;
}

static napi_value map_object(napi_env env, struct loaded_map *lm)
{
	napi_value o, handle, pin;

	handle = tdl_bpf_wrap(env, &lm->h);
	lm->h.fd = -1;
	if (handle == NULL)
		return NULL;
	if (napi_create_object(env, &o) != napi_ok)
		return NULL;
	napi_set_named_property(env, o, "handle", handle);
	tdl_set_str(env, o, "name", lm->name);
	if (lm->pinned && lm->pin_path[0] != '\0')
		napi_create_string_utf8(env, lm->pin_path, NAPI_AUTO_LENGTH, &pin);
	else
		napi_get_null(env, &pin);
	napi_set_named_property(env, o, "pinPath", pin);
	tdl_set_bool(env, o, "reusedPin", lm->reused);
	tdl_set_bool(env, o, "internal", lm->internal);
	return o;
}

static void load_complete(napi_env env, napi_status status, void *data)
{
	struct load_work *w = data;
	napi_value result, progs, maps, v;

	if (status != napi_ok && w->err == 0)
		fail(w, ECANCELED, "bpf_object__load", base_name(w->path));
	if (w->err != 0) {
		tdl_reject(env, w->deferred, tdl_bpf_error(env, w->op, w->err, w->log));
		goto done;
	}
	if (napi_create_object(env, &result) != napi_ok || napi_create_array_with_length(env, w->n_progs, &progs) != napi_ok ||
	    napi_create_array_with_length(env, w->n_maps, &maps) != napi_ok)
		goto failed;
	/*
	 * A handle that cannot be wrapped leaves an exception pending: stop
	 * there and reject with it. Handles wrapped so far are closed by their
	 * finalizers, the rest by free_results.
	 */
	for (size_t i = 0; i < w->n_progs; i++) {
		v = prog_object(env, &w->progs[i]);
		if (v == NULL || napi_set_element(env, progs, (uint32_t)i, v) != napi_ok)
			goto failed;
	}
	for (size_t i = 0; i < w->n_maps; i++) {
		v = map_object(env, &w->maps[i]);
		if (v == NULL || napi_set_element(env, maps, (uint32_t)i, v) != napi_ok)
			goto failed;
	}
	napi_set_named_property(env, result, "programs", progs);
	napi_set_named_property(env, result, "maps", maps);
	if (w->log != NULL)
		tdl_set_str(env, result, "log", w->log);
	napi_resolve_deferred(env, w->deferred, result);
	goto done;
failed:
	tdl_reject(env, w->deferred, NULL);
done:
	napi_delete_async_work(env, w->work);
	free_results(w);
}

/* Reads opts.maxEntries: an array of [mapName, maxEntries] pairs. */
static int read_overrides(napi_env env, napi_value opts, struct load_work *w)
{
	napi_value arr, pair, v;
	uint32_t n;
	bool is_array = false;

	if (tdl_opt_value(env, opts, "maxEntries", &arr) != 0)
		return -1;
	if (arr == NULL)
		return 0;
	if (napi_is_array(env, arr, &is_array) != napi_ok || !is_array || napi_get_array_length(env, arr, &n) != napi_ok) {
		tdl_throw_type(env, "maxEntries must be an array of [name, maxEntries] pairs");
		return -1;
	}
	if (n > MAX_OVERRIDES) {
		tdl_throw_type(env, "maxEntries has too many entries");
		return -1;
	}
	w->overrides = calloc(n ? n : 1, sizeof(*w->overrides));
	if (w->overrides == NULL) {
		tdl_throw_errno(env, "bpf_object__open_file", ENOMEM);
		return -1;
	}
	for (uint32_t i = 0; i < n; i++) {
		bool pair_ok = false;
		if (napi_get_element(env, arr, i, &pair) != napi_ok || napi_is_array(env, pair, &pair_ok) != napi_ok) {
			tdl_throw_pending(env, "maxEntries");
			return -1;
		}
		if (!pair_ok) {
			tdl_throw_type(env, "maxEntries must be an array of [name, maxEntries] pairs");
			return -1;
		}
		if (napi_get_element(env, pair, 0, &v) != napi_ok) {
			tdl_throw_pending(env, "maxEntries");
			return -1;
		}
		if (tdl_get_string(env, v, w->overrides[i].name, sizeof(w->overrides[i].name), "map name") != 0)
			return -1;
		if (napi_get_element(env, pair, 1, &v) != napi_ok) {
			tdl_throw_pending(env, "maxEntries");
			return -1;
		}
		if (tdl_get_uint32(env, v, &w->overrides[i].max_entries, "maxEntries") != 0)
			return -1;
	}
	w->n_overrides = n;
	return 0;
}

/*
 * objectLoad(path, {pinRoot?, maxEntries?}) → Promise<{programs, maps, log?}>
 * programs: [{handle, name, section, type, expectedAttachType, id, tag}]
 * maps: [{handle, name, pinPath, reusedPin, internal}]
 */
static napi_value js_object_load(napi_env env, napi_callback_info info)
{
	size_t argc = 2;
	napi_value argv[2], promise, v;
	struct load_work *w;

	napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
	w = calloc(1, sizeof(*w));
	if (w == NULL)
		return tdl_throw_errno(env, "bpf_object__open_file", ENOMEM);
	if (tdl_get_string(env, argv[0], w->path, sizeof(w->path), "path") != 0)
		goto bad;
	if (argc > 1) {
		if (tdl_opt_value(env, argv[1], "pinRoot", &v) != 0)
			goto bad;
		if (v != NULL) {
			if (tdl_get_string(env, v, w->pin_root, sizeof(w->pin_root), "pinRoot") != 0)
				goto bad;
			w->has_pin_root = true;
		}
		if (read_overrides(env, argv[1], w) != 0)
			goto bad;
	}
	if (tdl_queue_work(env, "tendril:bpf-object-load", load_execute, load_complete, w, &w->work, &w->deferred,
			   &promise) != 0)
		goto bad;
	return promise;
bad:
	free(w->overrides);
	free(w);
	return NULL;
}

napi_status tdl_bpf_object_register(napi_env env, napi_value exports)
{
	return tdl_export_fn(env, exports, "objectLoad", js_object_load);
}
