import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FakeDatapath } from '../../datapath/fake/fakeDatapath.js';
import { IdentityAllocator, NodeLease } from '../../identity/index.js';
import { IPCache } from '../../ipcache/index.js';
import { openBackend } from '../../kvstore/factory.js';
import type { Backend } from '../../kvstore/types.js';
import { LabelSet, LabelSource } from '../../labels/index.js';
import { createLogger, type Logger } from '../../logging/logger.js';
import { PolicyEngine } from '../../policy/index.js';
import { EndpointStore } from '../endpointStore.js';
import { type AddressLease, EndpointManager, type EndpointStateChange, type NewEndpoint } from '../manager.js';
import { PolicyRevisions } from '../policyRevisions.js';

export const ROUTER = '10.77.0.1';
const NODE = 'tdl-unit-node';

/**
 * An address lease that counts its calls; `failConfirm` makes the next
 * confirm throw, `lost` makes confirms answer that IPAM no longer holds the
 * addresses (a provisional allocation that expired).
 */
export class RecordingLease implements AddressLease {
  confirmed = 0;
  released = 0;
  failConfirm: Error | undefined;
  lost = false;

  async confirm(): Promise<boolean> {
    const err = this.failConfirm;
    this.failConfirm = undefined;
    if (err) throw err;
    if (this.lost) return false;
    this.confirmed++;
    return true;
  }

  async release(): Promise<void> {
    this.released++;
  }
}

export interface WorldOptions {
  /** The policy engine's per-endpoint entry limit (small values make regenerations fail). */
  maxEntriesPerEndpoint?: number;
  /** The managers' logger (default: silent unless TENDRIL_LOG_LEVEL says otherwise). */
  log?: Logger;
}

/**
 * An EndpointManager over real subsystems without root: the fake datapath,
 * an embedded kvstore in a temp dir with the real identity allocator, the
 * real ipcache and policy engine, and a state dir in the temp dir.
 * `restart()` replaces everything but the kvstore, the state dir and the
 * datapath, as an agent restart does.
 */
export class EndpointWorld {
  readonly datapath = new FakeDatapath({ nodeLinks: ['eth0'] });
  readonly log: Logger;
  /** Every state transition the current manager reported. */
  readonly transitions: EndpointStateChange[] = [];
  lease!: NodeLease;
  identities!: IdentityAllocator;
  ipcache!: IPCache;
  engine!: PolicyEngine;
  policy!: PolicyRevisions;
  store!: EndpointStore;
  manager!: EndpointManager;
  #pods = 0;
  #nextIp = 10;

  private constructor(
    readonly dir: string,
    readonly backend: Backend,
    private readonly options: WorldOptions,
  ) {
    this.log = options.log ?? createLogger('endpoint-test', process.env.TENDRIL_LOG_LEVEL ?? 'silent');
  }

  static async create(options: WorldOptions = {}): Promise<EndpointWorld> {
    const dir = await mkdtemp(join(tmpdir(), 'tdl-endpoint-'));
    const backend = await openBackend({ kind: 'embedded', options: { 'embedded.synchronous': 'normal', 'embedded.leaseCheckInterval': '50ms' }, dataDir: dir });
    const w = new EndpointWorld(dir, backend, options);
    await w.datapath.setupNode({ routerAddresses: [{ family: 4, ip: ROUTER }], masqueradeCidrs: ['10.77.0.0/24'] });
    await w.#start();
    return w;
  }

  async #start(): Promise<void> {
    this.lease = new NodeLease(this.backend, { ttlSeconds: 30, logger: this.log });
    this.identities = new IdentityAllocator({ backend: this.backend, nodeName: NODE, lease: this.lease, gcIntervalMs: 0, logger: this.log });
    await this.identities.start();
    this.ipcache = new IPCache();
    this.engine = new PolicyEngine({ identities: this.identities, cidrIdentities: this.identities, ...(this.options.maxEntriesPerEndpoint !== undefined ? { maxEntriesPerEndpoint: this.options.maxEntriesPerEndpoint } : {}) });
    this.policy = new PolicyRevisions(this.engine);
    this.store = new EndpointStore(join(this.dir, 'endpoints'));
    this.manager = new EndpointManager({ datapath: this.datapath, store: this.store, identities: this.identities, ipcache: this.ipcache, policy: this.policy, log: this.log });
    this.transitions.length = 0;
    this.manager.subscribe((c) => this.transitions.push(c));
  }

  /** A fresh pod network namespace in the fake; returns its path. */
  newPodNetns(): string {
    const path = `/var/run/netns/tdlunit${this.#pods++}`;
    this.datapath.addNetns(path);
    return path;
  }

  /** A creation request for a new pod with `labels` (`app=web`, k8s source). */
  spec(containerId: string, labels: string[] = [], overrides: Partial<NewEndpoint> = {}): NewEndpoint {
    const ip = `10.77.0.${this.#nextIp++}`;
    return {
      containerId,
      ifName: 'eth0',
      netns: overrides.netns ?? this.newPodNetns(),
      mtu: 1500,
      podNamespace: 'default',
      podName: containerId,
      labels: LabelSet.parse(['k8s:io.kubernetes.pod.namespace=default', ...labels.map((l) => `k8s:${l}`)], LabelSource.K8s),
      addresses: [{ family: 4, ip, gateway: ROUTER, pool: 'default', cidr: '10.77.0.0/24', seq: this.#nextIp }],
      ipamOwned: true,
      ...overrides,
    };
  }

  /** Transitions of one endpoint, in order. */
  statesOf(id: number): string[] {
    return this.transitions.filter((t) => t.id === id).map((t) => t.to);
  }

  /** An agent restart: new manager, identity allocator, ipcache and policy engine over the same store, state dir and datapath. */
  async restart(): Promise<void> {
    await this.manager.stop();
    await this.identities.close();
    await this.lease.stop();
    await this.#start();
  }

  async close(): Promise<void> {
    await this.manager.stop();
    await this.identities.close();
    await this.lease.stop();
    await this.backend.close();
    await rm(this.dir, { recursive: true, force: true });
  }
}

/** Polls until `check` holds; fails after `timeoutMs`. */
export async function waitFor<T>(what: string, check: () => T | undefined | false, timeoutMs = 5000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = check();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
