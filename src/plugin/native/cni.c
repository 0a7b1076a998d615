#include "cni.h"

#include <string.h>

#include "json.h"

const char *const cni_supported_versions[] = { "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0" };
const size_t cni_supported_count = sizeof(cni_supported_versions) / sizeof(cni_supported_versions[0]);

const char *cni_newest_version(void)
{
	return cni_supported_versions[cni_supported_count - 1];
}

int cni_version_supported(const char *v, size_t n)
{
	for (size_t i = 0; i < cni_supported_count; i++)
		if (strlen(cni_supported_versions[i]) == n && memcmp(cni_supported_versions[i], v, n) == 0)
			return 1;
	return 0;
}

int cni_version_shaped(const char *v, size_t n)
{
	size_t i = 0;
	for (int part = 0; part < 3; part++) {
		if (part > 0) {
			if (i >= n || v[i] != '.')
				return 0;
			i++;
		}
		size_t digits = 0;
		while (i < n && v[i] >= '0' && v[i] <= '9') {
			i++;
			digits++;
		}
		if (digits == 0)
			return 0;
	}
	return i == n;
}

int cni_version_answer(struct buf *out, const char *cni_version)
{
	if (buf_append_str(out, "{\"cniVersion\":") < 0 || json_quote(out, cni_version, strlen(cni_version)) < 0 ||
	    buf_append_str(out, ",\"supportedVersions\":[") < 0)
		return -1;
	for (size_t i = 0; i < cni_supported_count; i++) {
		if ((i > 0 && buf_append_str(out, ",") < 0) ||
		    json_quote(out, cni_supported_versions[i], strlen(cni_supported_versions[i])) < 0)
			return -1;
	}
	return buf_append_str(out, "]}\n");
}

int cni_error_json(struct buf *out, int code, const char *msg, const char *details, const char *cni_version)
{
	if (buf_printf(out, "{\n    \"code\": %d,\n    \"msg\": ", code) < 0 || json_quote(out, msg, strlen(msg)) < 0)
		return -1;
	if (cni_version && (buf_append_str(out, ",\n    \"cniVersion\": ") < 0 ||
			    json_quote(out, cni_version, strlen(cni_version)) < 0))
		return -1;
	if (details && *details &&
	    (buf_append_str(out, ",\n    \"details\": ") < 0 || json_quote(out, details, strlen(details)) < 0))
		return -1;
	return buf_append_str(out, "\n}\n");
}

/* Appends ,"name":"value" (no comma before the first); a NULL value is left out. */
static int member(struct buf *out, int *first, const char *name, const char *value, size_t len)
{
	if (!value)
		return 0;
	if (!*first && buf_append_str(out, ",") < 0)
		return -1;
	*first = 0;
	if (json_quote(out, name, strlen(name)) < 0 || buf_append_str(out, ":") < 0)
		return -1;
	return json_quote(out, value, len);
}

static int env_member(struct buf *out, int *first, const char *name, const char *value)
{
	return member(out, first, name, value, value ? strlen(value) : 0);
}

int cni_request_json(struct buf *out, const struct cni_call *c)
{
	int first = 1;
	if (buf_append_str(out, "{") < 0 || env_member(out, &first, "command", c->command) < 0 ||
	    env_member(out, &first, "containerId", c->container_id) < 0 || env_member(out, &first, "netns", c->netns) < 0 ||
	    env_member(out, &first, "ifName", c->ifname) < 0 || env_member(out, &first, "args", c->args) < 0 ||
	    env_member(out, &first, "path", c->path) < 0 ||
	    member(out, &first, "config", c->config ? c->config : "", c->config ? c->config_len : 0) < 0)
		return -1;
	return buf_append_str(out, "}");
}
