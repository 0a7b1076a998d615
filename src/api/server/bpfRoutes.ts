/**
 * /v1/bpf/*: the eBPF datapath's maps decoded from their pins (DatapathInspector),
 * with identities' labels and rule cookies resolved by the agent. Without the
 * eBPF datapath these answer 409 saying so, never 500.
 */
import type { FastifyInstance } from 'fastify';
import { AgentError } from '../errors.js';
import type { PathParams, QueryParams, ResponseBody } from '../types.js';
import type { CtGcResult } from '../../datapath/bpf/conntrackGc.js';
import { DatapathInspectError, type DatapathInspector } from '../../datapath/bpf/inspect.js';
import { LbInspector } from '../../datapath/bpf/lbInspect.js';
import { type MonitorContext, describeCookie } from '../../monitor/index.js';

/** What the bpf routes need from the agent. */
export interface BpfApi {
  inspector: DatapathInspector;
  /** One conntrack GC pass now. */
  conntrackGc(): Promise<CtGcResult>;
  /** Labels, interface names and rule cookies, as the monitor resolves them. */
  context: MonitorContext;
}

export const NO_BPF_DATAPATH = 'the eBPF datapath is not running on this node (the agent uses the routing datapath): there are no BPF maps to show';

function need(bpf: BpfApi | undefined): BpfApi {
  if (!bpf) throw new AgentError('CONFLICT', NO_BPF_DATAPATH);
  return bpf;
}

/** Runs an inspection, a map that is not pinned answered as 409. */
async function inspect<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof DatapathInspectError) throw new AgentError('CONFLICT', err.message, '', undefined, { cause: err });
    throw err;
  }
}

function endpointIdParam(text: string): number {
  if (!/^\d{1,5}$/.test(text) || Number(text) > 0xffff) throw new AgentError('INVALID_REQUEST', `invalid endpoint ID "${text}": the policy map is keyed by endpoint number (0-65535)`);
  return Number(text);
}

export function registerBpfRoutes(app: FastifyInstance, bpf: BpfApi | undefined): void {
  const labels = (b: BpfApi, id: number): string[] => [...(b.context.identityLabels(id) ?? [])];

  app.get('/v1/bpf/endpoints', async (): Promise<ResponseBody<'listBpfEndpoints', 200>> => {
    const b = need(bpf);
    const rows = await inspect(() => b.inspector.endpoints());
    // Pods created since the last listing of interfaces: list again once, rather than show their devices unnamed.
    if (rows.some((r) => b.context.interfaceName(r.ifindex) === undefined)) await b.context.refreshInterfaces?.();
    return rows.map((r) => {
      const ifName = b.context.interfaceName(r.ifindex);
      return { ...r, identityLabels: labels(b, r.identity), ...(ifName !== undefined ? { ifName } : {}) };
    });
  });

  app.get('/v1/bpf/ipcache', async (): Promise<ResponseBody<'listBpfIpcache', 200>> => {
    const b = need(bpf);
    return (await inspect(() => b.inspector.ipcache())).map((r) => ({ ...r, identityLabels: labels(b, r.identity) }));
  });

  app.get('/v1/bpf/policy/:id', async (req): Promise<ResponseBody<'getBpfPolicy', 200>> => {
    const b = need(bpf);
    const endpointId = endpointIdParam((req.params as PathParams<'getBpfPolicy'>).id);
    const rows = await inspect(() => b.inspector.policy(endpointId));
    // No entries and not in the endpoint map: no such endpoint, as `endpoint get` says (an empty 200 read as "allows nothing").
    if (rows.length === 0 && !(await inspect(() => b.inspector.endpoints())).some((r) => r.endpointId === endpointId)) {
      throw new AgentError('NOT_FOUND', `endpoint ${endpointId} not found in the datapath's endpoint map (tendril bpf endpoint list shows the endpoints there)`);
    }
    const rules = b.context.ruleIndex();
    return {
      endpointId,
      entries: rows.map((r) => ({
        direction: r.direction,
        identity: r.identity,
        identityLabels: r.identity === 0 ? [] : labels(b, r.identity),
        proto: r.proto,
        portFirst: r.portFirst,
        portLast: r.portLast,
        portPrefixLen: r.portPrefixLen,
        action: r.deny ? ('deny' as const) : ('allow' as const),
        l4PrefixBits: r.l4PrefixBits,
        rule: describeCookie(r.cookie, rules),
        ...(r.staged === true ? { staged: true } : {}),
      })),
    };
  });

  app.get('/v1/bpf/ct', async (req): Promise<ResponseBody<'listBpfConntrack', 200>> => {
    const b = need(bpf);
    const q = req.query as QueryParams<'listBpfConntrack'>;
    return inspect(() => b.inspector.conntrack(q.endpoint !== undefined ? { endpoint: q.endpoint } : {}));
  });

  app.delete('/v1/bpf/ct', async (): Promise<ResponseBody<'flushBpfConntrack', 200>> => {
    const b = need(bpf);
    return { removed: await inspect(() => b.inspector.flushConntrack()) };
  });

  app.post('/v1/bpf/ct/gc', async (): Promise<ResponseBody<'gcBpfConntrack', 200>> => {
    const b = need(bpf);
    return inspect(() => b.conntrackGc());
  });

  app.get('/v1/bpf/metrics', async (): Promise<ResponseBody<'listBpfMetrics', 200>> => {
    const b = need(bpf);
    return inspect(() => b.inspector.metrics());
  });

  app.get('/v1/bpf/lb', async (): Promise<ResponseBody<'listBpfLoadBalancer', 200>> => {
    const b = need(bpf);
    return inspect(() => new LbInspector(b.inspector).lbList());
  });

  app.get('/v1/bpf/nat', async (): Promise<ResponseBody<'listBpfNat', 200>> => {
    const b = need(bpf);
    const r = await inspect(() => new LbInspector(b.inspector).natList());
    if (r.devices.some((d) => b.context.interfaceName(d.ifindex) === undefined)) await b.context.refreshInterfaces?.();
    return {
      mappings: r.mappings,
      devices: r.devices.map((d) => {
        const ifName = b.context.interfaceName(d.ifindex);
        return { ...d, ...(ifName !== undefined ? { ifName } : {}) };
      }),
    };
  });
}
