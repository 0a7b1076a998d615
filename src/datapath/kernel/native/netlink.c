/* Netlink sockets opened in a chosen network namespace; filled in by the netlink work. */
#include "addon.h"

napi_status tdl_netlink_register(napi_env env, napi_value exports)
{
	(void)env;
	(void)exports;
	return napi_ok;
}
