/**
 * Who told the ipcache about a prefix. When several sources know the same
 * prefix the strongest wins (Cilium's source precedence): what this node
 * knows about its own endpoints beats what the kvstore says, which beats
 * entries generated for policy CIDRs and entries restored from the BPF map
 * at start-up. Weaker entries are kept, not dropped, so they come back when
 * the stronger one is deleted.
 */
export const IpcacheSource = {
  Local: 'local',
  Kvstore: 'kvstore',
  Generated: 'generated',
  Restored: 'restored',
} as const;

export type IpcacheSource = (typeof IpcacheSource)[keyof typeof IpcacheSource];

const PRIORITY: Readonly<Record<IpcacheSource, number>> = {
  local: 3,
  kvstore: 2,
  generated: 1,
  restored: 0,
};

export function sourcePriority(s: IpcacheSource): number {
  return PRIORITY[s];
}

export function isIpcacheSource(s: unknown): s is IpcacheSource {
  return typeof s === 'string' && Object.hasOwn(PRIORITY, s);
}
