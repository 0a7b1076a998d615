import { DEFAULT_SOCKET, SOCKET_ENV } from '../api/types.js';
import { CniError, CniErrorCode } from '../cni/errors.js';
import { validateAbsolutePath } from '../cni/names.js';
import type { NetConf } from '../cni/netconf.js';

/**
 * The agent's socket: the netconf's `socket`, else TENDRIL_SOCK, else the
 * default. Runtimes run DEL from cleanup processes with a minimal environment,
 * so the netconf field is the one that always arrives.
 */
export function resolveSocketPath(conf: NetConf, env: Readonly<Record<string, string | undefined>>): string {
  const fromConf = (conf as Record<string, unknown>).socket;
  if (fromConf !== undefined && typeof fromConf !== 'string') {
    throw new CniError(CniErrorCode.InvalidNetworkConfig, 'netconf field "socket" must be a string');
  }
  const path = (fromConf as string | undefined) || env[SOCKET_ENV] || DEFAULT_SOCKET;
  validateAbsolutePath(path, 'agent socket path', CniErrorCode.InvalidNetworkConfig);
  return path;
}
