/**
 * Keys of `reserved:` labels, one per special entity. The numeric identities
 * these map to live in src/identity/reserved.ts (labels sits below identity).
 */
export const ReservedLabelKey = {
  Unknown: 'unknown',
  Host: 'host',
  World: 'world',
  Unmanaged: 'unmanaged',
  Health: 'health',
  Init: 'init',
  RemoteNode: 'remote-node',
  KubeApiserver: 'kube-apiserver',
  Ingress: 'ingress',
  WorldIpv4: 'world-ipv4',
  WorldIpv6: 'world-ipv6',
} as const;

export type ReservedLabelKey = (typeof ReservedLabelKey)[keyof typeof ReservedLabelKey];

const KEYS: ReadonlySet<string> = new Set(Object.values(ReservedLabelKey));

export function isReservedLabelKey(key: string): key is ReservedLabelKey {
  return KEYS.has(key);
}

export const RESERVED_LABEL_KEYS: readonly ReservedLabelKey[] = Object.freeze([...Object.values(ReservedLabelKey)]);
