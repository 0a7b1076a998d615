/* bpf() and libbpf for TypeScript; filled in by the bpf work. */
#include "addon.h"

napi_status tdl_bpf_register(napi_env env, napi_value exports)
{
	(void)env;
	(void)exports;
	return napi_ok;
}
