/**
 * A service as the load-balancer maps hold it: which backends new
 * connections may go to (in slot order), per scope, and the Maglev table
 * over them. Pure: the manager supplies backend IDs and locality.
 */
import type { LbServiceEntry } from '../datapath/types.js';
import { buildMaglevTable } from './maglev.js';
import type { LbAlgorithm } from './types.js';
import { backendKey, type NormalizedBackend, type NormalizedService } from './validate.js';

export interface RenderContext {
  algorithm: LbAlgorithm;
  maglevTableSize: number;
  /** The backend ID of a backend key. */
  idOf(key: string): number;
  /** Whether a backend key's address is an endpoint of this node. */
  isLocal(key: string): boolean;
}

export const keyOfBackend = (svc: NormalizedService, b: NormalizedBackend) => backendKey(b.ip, b.port, svc.frontend.protocol);

/**
 * The backends that take new connections: the active ones with a weight;
 * when there is none, the terminating ones (as Kubernetes falls back to
 * serving-terminating endpoints), so a service being rolled over does not
 * refuse connections it could still serve.
 */
export function selectableBackends(backends: readonly NormalizedBackend[]): NormalizedBackend[] {
  const active = backends.filter((b) => b.state === 'active' && b.weight > 0);
  return active.length > 0 ? active : backends.filter((b) => b.state === 'terminating' && b.weight > 0);
}

/** Whether externalTrafficPolicy Local changes the entries: only for traffic from outside the node. */
export function isLocalTraffic(svc: NormalizedService): boolean {
  return svc.flags.trafficPolicy === 'Local' && svc.flags.type !== 'ClusterIP';
}

/** Whether internalTrafficPolicy Local changes the entries: traffic from the node's pods and the node itself. */
export function isLocalInternalTraffic(svc: NormalizedService): boolean {
  return svc.flags.internalTrafficPolicy === 'Local';
}

/** Whether the entry changes when endpoints come to or leave this node. */
export function dependsOnLocality(svc: NormalizedService): boolean {
  return isLocalTraffic(svc) || isLocalInternalTraffic(svc);
}

/**
 * The datapath has one list of backends per scope: EXTERNAL (traffic from
 * outside the node, and from inside when there is no INTERNAL scope) and
 * INTERNAL. A ClusterIP takes no traffic from outside, so its one scope
 * follows internalTrafficPolicy; other types get a second scope only when
 * the two policies differ. A Local scope lists this node's backends, chosen
 * among them as among all (active ones, else the terminating ones), as
 * kube-proxy does: a local terminating backend serves before traffic is
 * dropped for want of a local one. An empty Local scope drops new
 * connections (NO_SERVICE), never sends them off the node.
 */
export function renderService(svc: NormalizedService, ctx: RenderContext): LbServiceEntry {
  const cluster = selectableBackends(svc.backends);
  let localCache: NormalizedBackend[] | undefined;
  const local = () => (localCache ??= selectableBackends(svc.backends.filter((b) => ctx.isLocal(keyOfBackend(svc, b)))));
  const externalLocal = isLocalTraffic(svc);
  const internalLocal = isLocalInternalTraffic(svc);
  const external = (svc.flags.type === 'ClusterIP' ? internalLocal : externalLocal) ? local() : cluster;
  const twoScopes = svc.flags.type !== 'ClusterIP' && externalLocal !== internalLocal;
  const ids = (list: readonly NormalizedBackend[]) => list.map((b) => ctx.idOf(keyOfBackend(svc, b)));
  const entry: LbServiceEntry = {
    id: svc.id,
    address: svc.frontend.ip,
    port: svc.frontend.port,
    protocol: svc.frontend.protocol,
    type: svc.flags.type,
    localTraffic: externalLocal,
    affinityTimeoutSec: svc.flags.sessionAffinity ? svc.flags.sessionAffinityTimeout : 0,
    backendIds: ids(external),
    // Every backend, whatever its state or weight: the connections it has stay until it leaves the service.
    memberIds: ids(svc.backends),
  };
  if (twoScopes) entry.internalBackendIds = ids(internalLocal ? local() : cluster);
  if (svc.flags.sourceRanges.length > 0) entry.sourceRanges = [...svc.flags.sourceRanges];
  if (ctx.algorithm === 'maglev' && external.length > 0) {
    entry.maglevTable = buildMaglevTable(
      external.map((b) => {
        const key = keyOfBackend(svc, b);
        return { id: ctx.idOf(key), key, weight: b.weight };
      }),
      ctx.maglevTableSize,
    );
  }
  return entry;
}

/** Whether two rendered entries put the same thing in the maps. */
export function sameEntry(a: LbServiceEntry, b: LbServiceEntry): boolean {
  const { maglevTable: ta, ...ra } = a;
  const { maglevTable: tb, ...rb } = b;
  if (JSON.stringify(ra) !== JSON.stringify(rb)) return false;
  if (ta === undefined || tb === undefined) return ta === tb;
  return ta.length === tb.length && ta.every((v, i) => v === tb[i]);
}
