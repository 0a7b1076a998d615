import { LOCAL_IDENTITY_SCOPE, reservedIdentity } from '../identity/index.js';
import type { IPCache } from '../ipcache/index.js';
import { parseIp, prefixContainsIp, tryParsePrefix } from '../netip/index.js';
import type { NodeRecord } from './types.js';

/**
 * What the cluster has at `ip` beyond this node's own pods and CIDRs (which
 * the service manager checks itself): an exact ipcache entry with an
 * identity that is not world or a CIDR's (a pod or node elsewhere), or
 * another node's pod CIDR. A service frontend there would capture this
 * node's connections to that pod.
 */
export function clusterAddressOwner(ip: string, cluster: { ipcache: IPCache; nodeName: string; nodes: readonly NodeRecord[] }): string | undefined {
  const entry = cluster.ipcache.get(`${ip}/${parseIp(ip).family === 6 ? 128 : 32}`);
  // Reserved identities (world, host, remote-node, …) are left out: an external IP may be a node's.
  if (entry && reservedIdentity(entry.identity) === undefined && (entry.identity & LOCAL_IDENTITY_SCOPE) === 0) {
    return `is a pod's address (ipcache identity ${entry.identity}, from ${entry.owner})`;
  }
  const addr = parseIp(ip);
  for (const node of cluster.nodes) {
    if (node.name === cluster.nodeName) continue;
    const cidr = node.podCidrs.find((c) => {
      const p = tryParsePrefix(c);
      return p !== undefined && prefixContainsIp(p, addr);
    });
    if (cidr) return `is in node ${node.name}'s pod CIDR ${cidr} (pods' addresses)`;
  }
  return undefined;
}
