/**
 * What the agent runs for people to see the eBPF datapath: the monitor hub
 * (events ring buffer, read from start to stop, clients or not), the map inspector
 * behind /v1/bpf/*, and the conntrack GC on its interval. All of it works
 * from the pins under `<bpffs root>/tendril/`, so it needs nothing of the
 * BpfDatapath object but where the pins are.
 */
import { join } from 'node:path';
import { collectConntrack, ConntrackGc } from '../datapath/bpf/conntrackGc.js';
import { MapName } from '../datapath/bpf/constants.js';
import { DatapathInspector } from '../datapath/bpf/inspect.js';
import type { Logger } from '../logging/logger.js';
import { DropWindow } from '../metrics/dropWindow.js';
import { FlowRing } from '../flow/index.js';
import type { FlowMetrics } from '../metrics/index.js';
import { agentMonitorContext, type AgentMonitorSources, type EventRecorder, InterfaceNames, MonitorHub, netlinkLinks, type PodRef, pinnedRingBuffer } from '../monitor/index.js';
import type { PolicyRevisions } from '../endpoint/index.js';
import { type IdentityAllocator, identityToJSON, reservedIdentity } from '../identity/index.js';
import type { BpfApi } from '../api/server/bpfRoutes.js';

/**
 * A datapath that loaded the eBPF programs says where it pinned their maps;
 * the routing datapath (and the fake) have no such property.
 */
export interface PinnedMapsDatapath {
  readonly bpfPinDir: string;
}

export function bpfPinDirOf(datapath: object): string | undefined {
  const dir = (datapath as Partial<PinnedMapsDatapath>).bpfPinDir;
  return typeof dir === 'string' && dir !== '' ? dir : undefined;
}

export interface BpfObservabilityOptions extends AgentMonitorSources {
  /** `<bpffs root>/tendril`. */
  pinDir: string;
  log: Logger;
  /** Conntrack GC interval (default 30 s). */
  ctGcIntervalMs?: number;
  /** The flow history: how many flows it keeps (0: none), and this node's name for them. */
  flowHistory?: { size: number; nodeName: string };
  /** The flow metrics, counted from every event as the history is. */
  flowMetrics?: Pick<FlowMetrics, 'record'>;
}

/**
 * The hub's recorder: every event to the flow history and the flow metrics,
 * whichever are on. With neither, none: the hub then decodes only what
 * monitor clients ask for.
 */
function recorderOf(recorders: ReadonlyArray<{ record: EventRecorder } | undefined>): EventRecorder | undefined {
  const on = recorders.filter((r) => r !== undefined);
  if (on.length === 0) return undefined;
  if (on.length === 1) {
    const only = on[0]!;
    return (record, header, refs) => only.record(record, header, refs);
  }
  return (record, header, refs) => {
    for (const r of on) r.record(record, header, refs);
  };
}

export class BpfObservability {
  readonly monitor: MonitorHub;
  readonly bpf: BpfApi;
  /** Drops in the last minute, for the status. */
  readonly drops: DropWindow;
  /** The flow history, every event recorded whether or not anyone listens (absent when sized 0). */
  readonly flows: FlowRing | undefined;
  readonly #gc: ConntrackGc;

  constructor(opts: BpfObservabilityOptions) {
    const inspector = new DatapathInspector(opts.pinDir);
    const context = agentMonitorContext(opts);
    const flows = opts.flowHistory?.size ? new FlowRing({ capacity: opts.flowHistory.size, node: opts.flowHistory.nodeName }) : undefined;
    this.flows = flows;
    const record = recorderOf([flows, opts.flowMetrics]);
    this.monitor = new MonitorHub({
      source: pinnedRingBuffer(join(opts.pinDir, MapName.EVENTS)),
      context,
      log: opts.log.child({ subsys: 'monitor' }),
      ...(record ? { record } : {}),
    });
    this.#gc = new ConntrackGc({ inspector, log: opts.log.child({ subsys: 'ct-gc' }), ...(opts.ctGcIntervalMs !== undefined ? { intervalMs: opts.ctGcIntervalMs } : {}) });
    this.drops = new DropWindow(() => inspector.metrics(), opts.log.child({ subsys: 'drops' }));
    this.bpf = {
      inspector,
      context,
      conntrackGc: async () => {
        const r = await this.#gc.runOnce();
        // runOnce logs and swallows failures for the timer; asked directly, the caller hears about them.
        return r ?? collectConntrack(inspector);
      },
    };
  }

  /**
   * The conntrack GC, and the monitor's reader for good: EVENTS_LOST then
   * counts only records a reader could not keep up with.
   */
  async start(): Promise<void> {
    await this.monitor.start();
    await this.drops.start();
    this.#gc.start();
  }

  /** Ends monitor streams and stops the GC (the maps and programs stay). */
  async stop(): Promise<void> {
    await this.monitor.close();
    this.drops.stop();
    await this.#gc.stop();
  }
}

/** What the agent's monitor resolves events with, beside the datapath. */
export interface ObservabilitySources {
  log: Logger;
  identities: Pick<IdentityAllocator, 'lookupById'>;
  policy: PolicyRevisions;
  /** The pod behind a local endpoint: one object per endpoint (the flow history holds it). */
  endpointPod(endpointId: number): PodRef | undefined;
  /** A service's name by its ID (Kubernetes Services' `namespace/name`). */
  serviceName(id: number): string | undefined;
  nodeName: string;
  flowHistorySize: number;
  /** Flow metrics; absent when off. */
  flowMetrics?: Pick<FlowMetrics, 'record'>;
}

/** The eBPF datapath's monitor, flow history, map inspection and conntrack GC, when the datapath pinned its maps. */
export function bpfObservabilityOf(datapath: object, sources: ObservabilitySources): BpfObservability | undefined {
  // What the datapath says, not the config: a datapath handed in (the fake in tests) pinned nothing.
  const pinDir = bpfPinDirOf(datapath);
  if (pinDir === undefined) return undefined;
  const { log, identities, policy } = sources;
  const labelStrings = new WeakMap<object, readonly string[]>();
  const interfaces = new InterfaceNames(netlinkLinks, (err) => log.warn({ err }, 'listing interfaces for monitor events failed'));
  void interfaces.refresh();
  return new BpfObservability({
    pinDir,
    log,
    interfaces,
    identityLabels: (id) => {
      const identity = reservedIdentity(id) ?? identities.lookupById(id);
      if (identity === undefined) return undefined;
      // Formatted once per identity, not per event: every event of it shares the frozen array.
      let labels = labelStrings.get(identity);
      if (labels === undefined) {
        labels = Object.freeze(identityToJSON(identity).labels);
        labelStrings.set(identity, labels);
      }
      return labels;
    },
    policies: () => policy.policies(),
    policyRevision: () => policy.revision,
    enforcedBy: (endpointId, direction, staged) => policy.engine.endpointEnforcement(endpointId, staged === true)?.[direction].by,
    endpointPod: sources.endpointPod,
    serviceName: sources.serviceName,
    flowHistory: { size: sources.flowHistorySize, nodeName: sources.nodeName },
    ...(sources.flowMetrics ? { flowMetrics: sources.flowMetrics } : {}),
  });
}
