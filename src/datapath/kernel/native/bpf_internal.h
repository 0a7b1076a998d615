/*
 * Shared by the bpf parts of the kernel addon (bpf*.c). Every BPF object
 * TypeScript holds is an external wrapping a tdl_bpf_handle: the fd plus what
 * the kernel reported about it, so the native side checks key/value lengths
 * against the kernel's sizes, never against what JavaScript claims.
 */
#ifndef TENDRIL_BPF_INTERNAL_H
#define TENDRIL_BPF_INTERNAL_H

#include "addon.h"

#include <linux/bpf.h>
#include <stdbool.h>

enum tdl_bpf_kind {
	TDL_BPF_MAP = 1,
	TDL_BPF_PROG = 2,
	TDL_BPF_LINK = 3,
};

struct tdl_bpf_handle {
	enum tdl_bpf_kind kind;
	int fd; /* -1 once closed */
	char name[BPF_OBJ_NAME_LEN];
	uint32_t id;
	/* maps */
	uint32_t map_type;
	uint32_t key_size;
	uint32_t value_size;
	uint32_t value_buf_size; /* what lookup/update move: value_size, or per-CPU slots */
	uint32_t max_entries;
	uint32_t map_flags;
	/* The map's BTF and its key and value types in it (0 = none): what an upgrade reads the old layout from. */
	uint32_t btf_id;
	uint32_t btf_key_type_id;
	uint32_t btf_value_type_id;
	bool batch_unsupported; /* learnt from the kernel's ENOTSUPP */
	/* programs */
	uint32_t prog_type;
	uint8_t prog_tag[BPF_TAG_SIZE];
	uint32_t verified_insns; /* the verifier's processed instructions at load (Linux 5.16+; 0 before) */
};

/* The kernel-internal ENOTSUPP, which bpf() leaks for unsupported batch ops. */
#define TDL_ENOTSUPP 524

/*
 * A handle for an fd this code now owns (closed on failure). Fills the
 * handle from the kernel's info about the fd. Returns 0 or a positive errno.
 */
int tdl_bpf_handle_fill(struct tdl_bpf_handle *h, enum tdl_bpf_kind kind, int fd);
/* Wraps an owned, filled handle (copied) as a tagged external; NULL after a JS exception. */
napi_value tdl_bpf_wrap(napi_env env, const struct tdl_bpf_handle *h);
/* Unwraps an external of the given kind that is still open; NULL after a TypeError. */
struct tdl_bpf_handle *tdl_bpf_unwrap(napi_env env, napi_value v, enum tdl_bpf_kind kind, const char *what);
/* Bytes of one value in lookup/update buffers for a map type and value size. */
uint32_t tdl_bpf_value_buf_size(uint32_t map_type, uint32_t value_size);

/*
 * libbpf's warnings, captured per thread while an operation runs, so an
 * error can carry them (the verifier's log, a pinned map's mismatch).
 * tdl_log_end returns a malloc'd string (NULL when nothing was printed).
 */
void tdl_log_begin(void);
char *tdl_log_end(void);
void tdl_log_install(void);

/*
 * An errno error (see addon.h) naming `op`, with libbpf's captured log as
 * its `log` property when there is one. Does not take ownership of `log`.
 */
napi_value tdl_bpf_error(napi_env env, const char *op, int err, const char *log);

/* Reads an optional (undefined/null → absent) uint32 property of an options object. */
int tdl_opt_uint32(napi_env env, napi_value obj, const char *key, uint32_t *out, bool *present);
/* Reads an optional property; `out` is NULL-valued (napi_value NULL) when absent. */
int tdl_opt_value(napi_env env, napi_value obj, const char *key, napi_value *out);
/* Whether a value is undefined or null. */
bool tdl_is_nullish(napi_env env, napi_value v);
/* Creates a Buffer holding a copy of `len` bytes. */
napi_value tdl_buffer_copy(napi_env env, const void *data, size_t len);
/* Sets a uint32/number/string/bigint property; errors are left pending. */
void tdl_set_u32(napi_env env, napi_value obj, const char *key, uint32_t v);
void tdl_set_str(napi_env env, napi_value obj, const char *key, const char *v);
void tdl_set_bool(napi_env env, napi_value obj, const char *key, bool v);

/* Registration of each part. */
napi_status tdl_bpf_map_register(napi_env env, napi_value exports);
napi_status tdl_bpf_object_register(napi_env env, napi_value exports);
napi_status tdl_bpf_link_register(napi_env env, napi_value exports);
napi_status tdl_bpf_ringbuf_register(napi_env env, napi_value exports);

#endif
