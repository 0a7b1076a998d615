/* What tendril-cni prints and sends: the CNI versions it speaks, its VERSION
 * answer, CNI error JSON, and the agent's CniRequest body. */
#ifndef TENDRIL_CNI_CNI_H
#define TENDRIL_CNI_CNI_H

#include <stddef.h>

#include "buf.h"

/* The CNI spec's error codes the relay reports itself. */
enum cni_code {
	CNI_ERR_INVALID_ENV = 4,
	CNI_ERR_IO = 5,
	CNI_ERR_DECODING = 6,
	CNI_ERR_INVALID_CONFIG = 7,
	CNI_ERR_TRY_AGAIN_LATER = 11,
	CNI_ERR_NOT_AVAILABLE = 50,
	CNI_ERR_INTERNAL = 999,
};

/* SUPPORTED_CNI_VERSIONS of src/api/types.ts, oldest first (a test checks they agree). */
extern const char *const cni_supported_versions[];
extern const size_t cni_supported_count;
/* The newest of them: what VERSION answers when the input names no version. */
const char *cni_newest_version(void);

int cni_version_supported(const char *v, size_t n);
/* Whether v is digits.digits.digits, the shape VERSION echoes. */
int cni_version_shaped(const char *v, size_t n);

/* The VERSION answer line, as the TypeScript skel printed it. */
int cni_version_answer(struct buf *out, const char *cni_version);

/* The error JSON a plugin prints (JSON.stringify(…, null, 4) layout); details may be NULL or "". */
int cni_error_json(struct buf *out, int code, const char *msg, const char *details, const char *cni_version);

/* One relayed call; NULL members are omitted from the request. */
struct cni_call {
	const char *command;
	const char *container_id;
	const char *netns;
	const char *ifname;
	const char *args;
	const char *path;
	const char *config;
	size_t config_len;
};

/* The CniRequest JSON of api/openapi.yaml (also the deletion queue's file format). */
int cni_request_json(struct buf *out, const struct cni_call *c);

#endif
