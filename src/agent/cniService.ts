import { AgentError, agentCodeForCni } from '../api/errors.js';
import { type CniRequest, type CniResponse, SUPPORTED_CNI_VERSIONS } from '../api/types.js';
import {
  type CniArgs,
  CniError,
  CniErrorCode,
  formatCniArgs,
  IMPLICIT_VERSION,
  ipFamily,
  type NetConf,
  parseNetConf,
  pluginVersionInfo,
  parseCniArgs,
  reconcileVersion,
  type Result100,
  validateAbsolutePath,
  validateContainerId,
  validateInterfaceName,
  validAttachments,
} from '../cni/index.js';
import type { Datapath, PodAddress } from '../datapath/types.js';
import type { Endpoint, EndpointAddress } from '../endpoint/endpoint.js';
import type { EndpointManager } from '../endpoint/endpointManager.js';
import type { EndpointStore } from '../endpoint/endpointStore.js';
import type { EndpointIdentityBinder } from '../endpoint/identityBinder.js';
import { IdentityError, IdentityErrorCode } from '../identity/index.js';
import { LabelError, type LabelSet } from '../labels/index.js';
import { isPolicyError, PolicyErrorCode, PolicyValidationError } from '../policy/index.js';
import { type Allocation, type Allocator, IpamError, IpamErrorCode } from '../ipam/index.js';
import type { Logger } from '../logging/logger.js';
import type { AgentConfig } from './config.js';
import { endpointLabels, labelTextsFromCni, podRefFromArgs } from './endpointLabels.js';
import type { IpamProvider } from './ipamProvider.js';
import { KeyedMutex } from './keyedMutex.js';

interface UndoStep {
  what: string;
  fn: () => Promise<unknown>;
}

/** Runs a transaction's undo steps newest first; a failing step is logged and the rest still run. */
async function rollBack(undo: UndoStep[], log: Logger, containerId: string): Promise<void> {
  for (const step of [...undo].reverse()) {
    try {
      await step.fn();
    } catch (undoErr) {
      log.error({ err: undoErr, step: step.what, containerId }, 'rollback step failed');
    }
  }
}

/** PUT /endpoint/{id}: a pod set up by someone else, to be made an endpoint. */
export interface EndpointAdoption {
  id?: number;
  containerId: string;
  ifName: string;
  netns: string;
  hostIfName: string;
  addresses: string[];
  labels?: string[];
  podNamespace?: string;
  podName?: string;
}

/** A CNI call after validation at the API boundary. */
interface ParsedCall {
  command: CniRequest['command'];
  containerId: string;
  netns: string;
  ifName: string;
  args: CniArgs;
  conf: NetConf;
}


/** Addresses asked for through CNI_ARGS `IP=` (comma-separated, one per family). */
function requestedIps(args: CniArgs): string[] {
  const raw = args.find(([k]) => k === 'IP')?.[1];
  if (raw === undefined || raw === '') return [];
  const ips = raw.split(',').map((x) => x.trim());
  for (const ip of ips) {
    if (ipFamily(ip) === 0) throw new AgentError('INVALID_ENVIRONMENT', `CNI_ARGS IP="${raw}" is not a list of IP addresses`);
  }
  return ips;
}

/** An endpoint's record of one of its allocations (the gateway is checked by the caller). */
function endpointAddress(a: Allocation): EndpointAddress {
  return { family: a.family, ip: a.ip, gateway: a.gateway!, pool: a.pool, cidr: a.cidr, seq: a.seq };
}

/** IPAM owner of an attachment: the container ID, plus the interface when it is not eth0. */
export function ipamOwner(containerId: string, ifName: string): string {
  return ifName === 'eth0' ? containerId : `${containerId}:${ifName}`;
}

function fromCniError(err: CniError): AgentError {
  return new AgentError(agentCodeForCni(err.code), err.msg, err.details, err.code);
}

function fromIpamError(err: IpamError): AgentError {
  switch (err.code) {
    case IpamErrorCode.POOL_EXHAUSTED:
    case IpamErrorCode.NO_FREE_BLOCK:
      return new AgentError('IPAM_EXHAUSTED', err.message);
    case IpamErrorCode.INVALID_CIDR:
    case IpamErrorCode.INVALID_CONFIG:
    case IpamErrorCode.INVALID_ARGUMENT:
    case IpamErrorCode.UNKNOWN_POOL:
    case IpamErrorCode.FAMILY_UNAVAILABLE:
      return new AgentError('INVALID_REQUEST', err.message);
    case IpamErrorCode.CONFLICT:
      return new AgentError('TRY_AGAIN', err.message);
    case IpamErrorCode.IP_IN_USE:
      return new AgentError('CONFLICT', err.message);
    case IpamErrorCode.NOT_STARTED:
      return new AgentError('NOT_READY', err.message);
    case IpamErrorCode.DELEGATE_FAILED: {
      // Pass the delegated plugin's own CNI code through to the runtime.
      const cause = err.cause;
      return cause instanceof CniError ? new AgentError('IPAM_FAILED', err.message, cause.details, cause.code) : new AgentError('IPAM_FAILED', err.message);
    }
  }
}

/** Turns subsystem errors into API errors with a stable code. */
export function toAgentError(err: unknown): AgentError {
  if (err instanceof AgentError) return err;
  if (err instanceof CniError) return fromCniError(err);
  if (err instanceof IpamError) return fromIpamError(err);
  if (err instanceof LabelError) return new AgentError('INVALID_REQUEST', err.message);
  if (isPolicyError(err)) {
    switch (err.code) {
      case PolicyErrorCode.PARSE:
      case PolicyErrorCode.INVALID:
      case PolicyErrorCode.INVALID_ARGUMENT:
        return new AgentError('INVALID_REQUEST', err instanceof PolicyValidationError ? 'invalid policy' : err.message, err instanceof PolicyValidationError ? err.message : '');
      case PolicyErrorCode.NOT_FOUND:
      case PolicyErrorCode.UNKNOWN_ENDPOINT:
      case PolicyErrorCode.UNKNOWN_IDENTITY:
        return new AgentError('NOT_FOUND', err.message);
      default:
        return new AgentError('INTERNAL', err.message);
    }
  }
  if (err instanceof IdentityError) {
    return err.code === IdentityErrorCode.INVALID_LABELS ? new AgentError('INVALID_REQUEST', err.message) : new AgentError('TRY_AGAIN', `identity: ${err.message}`);
  }
  if (err instanceof Error && err.name === 'DatapathError') return new AgentError('DATAPATH_FAILED', err.message);
  if (err instanceof Error && err.name === 'EndpointConflictError') return new AgentError('CONFLICT', err.message);
  return new AgentError('INTERNAL', err instanceof Error ? err.message : String(err));
}

export interface CniServiceDeps {
  config: AgentConfig;
  ipam: IpamProvider;
  datapath: Datapath;
  endpoints: EndpointManager;
  store: EndpointStore;
  identities: EndpointIdentityBinder;
  log: Logger;
  /** Whether the agent can serve ADD (kvstore reachable, IPAM started). */
  ready: () => Promise<boolean>;
  /** Called when delegated IPAM hands out a gateway the host device does not hold yet. */
  ensureRouterAddress: (family: 4 | 6, ip: string) => Promise<void>;
  /** Crash-test hook called at each ADD step (see faultPointFromEnv). */
  faultPoint?: (step: string) => void;
}

/**
 * The CNI verbs, performed by the agent (what Cilium splits between its
 * plugin and agent). ADD is one transaction: every step is undone if a later
 * one fails, and the answer comes only when the pod's network is in force.
 */
export class CniService {
  private readonly locks = new KeyedMutex();

  constructor(private readonly d: CniServiceDeps) {}

  /** Owners with a CNI call in progress: GC must leave their (provisional) addresses alone. */
  inFlightOwners(): Set<string> {
    return this.locks.held();
  }

  async handle(req: CniRequest): Promise<CniResponse> {
    let call: ParsedCall;
    try {
      call = this.parse(req);
    } catch (err) {
      throw toAgentError(err);
    }
    try {
      switch (call.command) {
        case 'ADD':
          return { result: await this.locks.run(ipamOwner(call.containerId, call.ifName), () => this.add(call)) };
        case 'DEL':
          await this.locks.run(ipamOwner(call.containerId, call.ifName), () => this.del(call));
          return {};
        case 'CHECK':
          await this.locks.run(ipamOwner(call.containerId, call.ifName), () => this.check(call));
          return {};
        case 'GC':
          await this.gc(call);
          return {};
        case 'STATUS':
          if (!(await this.d.ready())) throw new AgentError('NOT_READY', 'tendril agent is not ready: kvstore or IPAM unavailable');
          return {};
      }
    } catch (err) {
      throw toAgentError(err);
    }
  }

  private parse(req: CniRequest): ParsedCall {
    let raw: unknown;
    try {
      raw = JSON.parse(req.config);
    } catch (err) {
      throw new CniError(CniErrorCode.DecodingFailure, `error decoding network config: ${(err as Error).message}`);
    }
    if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new CniError(CniErrorCode.DecodingFailure, 'network config is not a JSON object');
    const conf = parseNetConf(raw);
    reconcileVersion(conf.cniVersion || IMPLICIT_VERSION, pluginVersionInfo(SUPPORTED_CNI_VERSIONS));
    const call: ParsedCall = {
      command: req.command,
      containerId: req.containerId ?? '',
      netns: req.netns ?? '',
      ifName: req.ifName ?? '',
      args: parseCniArgs(req.args ?? ''),
      conf,
    };
    if (call.command === 'ADD' || call.command === 'DEL' || call.command === 'CHECK') {
      validateContainerId(call.containerId);
      validateInterfaceName(call.ifName);
      if (call.command !== 'DEL' || call.netns !== '') validateAbsolutePath(call.netns, 'CNI_NETNS');
    }
    return call;
  }

  private async add(call: ParsedCall): Promise<Result100> {
    const { config, datapath, endpoints, log } = this.d;
    const owner = ipamOwner(call.containerId, call.ifName);
    const pod = podRefFromArgs(call.args);
    const labels = endpointLabels(labelTextsFromCni(call.args, call.conf), pod);

    // A second ADD for the same attachment replaces the first, as a re-created sandbox expects.
    const previous = endpoints.byContainer(call.containerId, call.ifName);
    if (previous) await this.removeEndpoint(previous, call.netns, call.conf);

    const allocator = await this.d.ipam.allocatorFor(call.conf);
    const families = this.d.ipam.families();
    const undo: UndoStep[] = [];
    try {
      const allocations: Allocation[] = [];
      undo.push({ what: 'release addresses', fn: () => allocator.releaseOwner(owner) });
      // CNI_ARGS IP= (podman --ip, the spec's convention) asks for given addresses.
      const wanted = requestedIps(call.args);
      for (const family of families.length > 0 ? families : ([4] as const)) {
        const ip = wanted.find((w) => ipFamily(w) === family);
        allocations.push(
          await allocator.allocate({
            owner,
            family,
            ...(ip ? { ip } : {}),
            // Delegated allocators exist per netconf and only once a call names them, so
            // after a restart none would re-arm or confirm an expiry: no expiration there.
            ...(config.ipam === 'delegated' ? {} : { expirationMs: config.ipamExpirationMs }),
            cni: { netns: call.netns, ifname: call.ifName, args: formatCniArgs(call.args) },
          }),
        );
      }
      this.d.faultPoint?.('after-ipam');
      const addresses: PodAddress[] = [];
      for (const a of allocations) {
        if (!a.gateway) throw new AgentError('IPAM_FAILED', `IPAM gave ${a.ip} without a gateway`);
        if (config.ipam === 'delegated') await this.d.ensureRouterAddress(a.family, a.gateway);
        addresses.push({ family: a.family, ip: a.ip, gateway: a.gateway });
      }

      undo.push({ what: 'remove pod network', fn: () => datapath.removePod({ containerId: call.containerId, netns: call.netns, ifName: call.ifName, addresses }) });
      const net = await datapath.addPod({ containerId: call.containerId, netns: call.netns, ifName: call.ifName, mtu: config.mtu, addresses });
      this.d.faultPoint?.('after-datapath');

      const ep: Endpoint = {
        id: endpoints.allocateId(),
        containerId: call.containerId,
        ifName: call.ifName,
        netns: call.netns,
        ...(pod.namespace ? { podNamespace: pod.namespace } : {}),
        ...(pod.name ? { podName: pod.name } : {}),
        labels: labels.toStrings(),
        addresses: allocations.map(endpointAddress),
        hostIfName: net.hostIfName,
        hostIfIndex: net.hostIfIndex,
        hostMac: net.hostMac,
        podMac: net.podMac,
        mtu: config.mtu,
        state: 'waiting-for-identity',
        ipamOwned: config.ipam !== 'delegated',
        createdAt: new Date().toISOString(),
      };
      const ready = await this.commitEndpoint(ep, [allocator], undo);
      log.info({ endpoint: ep.id, identity: ready.identity, containerId: call.containerId, ifName: call.ifName, addresses: ep.addresses.map((a) => a.ip) }, 'endpoint created');
      return this.result(call, ready);
    } catch (err) {
      await rollBack(undo, log, call.containerId);
      throw err;
    }
  }

  /**
   * The end of endpoint creation, shared by ADD and PUT /endpoint, in
   * Cilium's order: register, resolve the identity (ipcache, policy),
   * regenerate — today the routes already programmed — persist, and confirm
   * the addresses last, so a crash before that leaves only provisional
   * allocations that expire by themselves. Undo steps go onto `undo`.
   */
  private async commitEndpoint(ep: Endpoint, allocators: readonly Allocator[], undo: UndoStep[]): Promise<Endpoint> {
    const { endpoints, store } = this.d;
    endpoints.register(ep);
    undo.push({ what: 'unregister endpoint', fn: async () => endpoints.remove(ep.id) });
    undo.push({ what: 'remove endpoint state', fn: () => store.remove(ep.id) });
    const bound = await this.d.identities.bind(ep);
    undo.push({ what: 'release identity and ipcache entries', fn: () => this.d.identities.unbind(bound) });
    endpoints.update({ ...bound, state: 'waiting-to-regenerate' });
    const ready: Endpoint = { ...bound, state: 'ready' };
    endpoints.update(ready);
    await store.save(ready);
    this.d.faultPoint?.('after-endpoint');
    const owner = ipamOwner(ep.containerId, ep.ifName);
    for (const a of allocators) await a.confirm(owner);
    return ready;
  }

  private result(call: ParsedCall, ep: Endpoint): Result100 {
    const prefix = (f: 4 | 6) => (f === 4 ? 32 : 128);
    return {
      cniVersion: '1.1.0',
      interfaces: [
        { name: ep.hostIfName, mac: ep.hostMac },
        { name: ep.ifName, mac: ep.podMac, mtu: ep.mtu, sandbox: call.netns },
      ],
      ips: ep.addresses.map((a) => ({ address: `${a.ip}/${prefix(a.family)}`, gateway: a.gateway, interface: 1 })),
      routes: ep.addresses.map((a) => ({ dst: a.family === 4 ? '0.0.0.0/0' : '::/0', gw: a.gateway })),
      ...(call.conf.dns ? { dns: call.conf.dns } : {}),
    };
  }

  /** Tears an endpoint down: pod network, addresses, state. Parts already gone are fine. */
  async removeEndpoint(ep: Endpoint, netns: string, conf?: NetConf): Promise<void> {
    const { datapath, endpoints, store, log } = this.d;
    endpoints.update({ ...ep, state: 'disconnecting' });
    try {
      await this.d.identities.unbind(ep);
    } catch (err) {
      // A reference this node no longer holds must not stop the pod's teardown.
      if (!(err instanceof IdentityError && err.code === IdentityErrorCode.NOT_ALLOCATED)) throw err;
      log.warn({ endpoint: ep.id, identity: ep.identity }, 'endpoint identity was not held; continuing teardown');
    }
    await datapath.removePod({ containerId: ep.containerId, hostIfName: ep.hostIfName, netns: netns || ep.netns, ifName: ep.ifName, addresses: ep.addresses });
    const allocators = conf ? [await this.d.ipam.allocatorFor(conf)] : this.d.ipam.all();
    for (const a of allocators) await a.releaseOwner(ipamOwner(ep.containerId, ep.ifName));
    await store.remove(ep.id);
    endpoints.remove(ep.id);
    log.info({ endpoint: ep.id, containerId: ep.containerId }, 'endpoint deleted');
  }

  private async del(call: ParsedCall): Promise<void> {
    const ep = this.d.endpoints.byContainer(call.containerId, call.ifName);
    if (ep) return this.removeEndpoint(ep, call.netns, call.conf);
    // No endpoint (never created, or already deleted): still remove anything an
    // interrupted ADD left behind. DEL is idempotent.
    await this.d.datapath.removePod({ containerId: call.containerId, netns: call.netns, ifName: call.ifName, addresses: [] });
    const allocator = await this.d.ipam.allocatorFor(call.conf);
    await allocator.releaseOwner(ipamOwner(call.containerId, call.ifName));
  }

  private async check(call: ParsedCall): Promise<void> {
    const ep = this.d.endpoints.byContainer(call.containerId, call.ifName);
    if (!ep) throw new AgentError('NOT_FOUND', `no endpoint for container ${call.containerId} interface ${call.ifName}`);
    const allocator: Allocator = await this.d.ipam.allocatorFor(call.conf);
    const held = new Set((await allocator.get(ipamOwner(ep.containerId, ep.ifName))).map((a) => a.ip));
    for (const a of ep.addresses) {
      if (!held.has(a.ip)) throw new AgentError('DATAPATH_FAILED', `address ${a.ip} of endpoint ${ep.id} is no longer allocated to it`);
    }
    await this.d.datapath.checkPod({ containerId: ep.containerId, netns: call.netns, ifName: ep.ifName, mtu: ep.mtu, addresses: ep.addresses });
  }

  /**
   * PUT /endpoint/{id}: an endpoint for a pod whose veth pair and addresses
   * someone else set up (Cilium's plugin-driven flow: POST /ipam, create the
   * veth, PUT the endpoint). The addresses must be allocated to the
   * attachment's owner; the agent adds the host side, identity and policy.
   */
  async adoptEndpoint(req: EndpointAdoption): Promise<Endpoint> {
    validateContainerId(req.containerId);
    validateInterfaceName(req.ifName);
    validateInterfaceName(req.hostIfName);
    validateAbsolutePath(req.netns, 'netns');
    const owner = ipamOwner(req.containerId, req.ifName);
    return this.locks.run(owner, async () => {
      const { endpoints, datapath, config, log } = this.d;
      if (endpoints.byContainer(req.containerId, req.ifName)) throw new AgentError('CONFLICT', `container ${req.containerId} interface ${req.ifName} already has an endpoint`);
      if (req.id !== undefined && endpoints.get(req.id)) throw new AgentError('CONFLICT', `endpoint ID ${req.id} is taken`);
      const held: Allocation[] = [];
      for (const a of this.d.ipam.all()) held.push(...(await a.get(owner)));
      const allocations = req.addresses.map((ip) => {
        const a = held.find((h) => h.ip === ip);
        if (!a) throw new AgentError('INVALID_REQUEST', `address ${ip} is not allocated to ${owner}: allocate it first (POST /ipam?owner=${owner})`);
        if (!a.gateway) throw new AgentError('IPAM_FAILED', `address ${ip} has no gateway`);
        return a;
      });
      if (allocations.length === 0) throw new AgentError('INVALID_REQUEST', 'an endpoint needs at least one address');
      const pod = { ...(req.podNamespace ? { namespace: req.podNamespace } : {}), ...(req.podName ? { name: req.podName } : {}) };
      const labels = endpointLabels((req.labels ?? []).map((text) => ({ text, from: 'the request\'s labels' })), pod);
      const addresses = allocations.map((a) => ({ family: a.family, ip: a.ip, gateway: a.gateway! }));
      const undo: UndoStep[] = [];
      try {
        const net = await datapath.adoptPod({ hostIfName: req.hostIfName, addresses });
        undo.push({ what: 'remove host routes', fn: () => datapath.releaseAdoptedPod({ hostIfName: req.hostIfName, addresses }) });
        const ep: Endpoint = {
          id: req.id ?? endpoints.allocateId(),
          containerId: req.containerId,
          ifName: req.ifName,
          netns: req.netns,
          ...(pod.namespace ? { podNamespace: pod.namespace } : {}),
          ...(pod.name ? { podName: pod.name } : {}),
          labels: labels.toStrings(),
          addresses: allocations.map(endpointAddress),
          hostIfName: req.hostIfName,
          hostIfIndex: net.hostIfIndex,
          hostMac: net.hostMac,
          podMac: '',
          mtu: config.mtu,
          state: 'waiting-for-identity',
          ipamOwned: true,
          createdAt: new Date().toISOString(),
        };
        const ready = await this.commitEndpoint(ep, this.d.ipam.all(), undo);
        log.info({ endpoint: ep.id, identity: ready.identity, containerId: req.containerId, hostIfName: req.hostIfName }, 'endpoint adopted');
        return ready;
      } catch (err) {
        await rollBack(undo, log, req.containerId);
        throw err;
      }
    });
  }

  /** Adds and deletes labels of an endpoint: a new identity, the old one released, a regeneration. */
  async updateLabels(ep: Endpoint, labels: LabelSet): Promise<Endpoint> {
    return this.locks.run(ipamOwner(ep.containerId, ep.ifName), async () => {
      const current = this.d.endpoints.get(ep.id);
      if (!current) throw new AgentError('NOT_FOUND', `endpoint ${ep.id} is gone`);
      this.d.endpoints.update({ ...current, state: 'waiting-for-identity' });
      let updated: Endpoint;
      try {
        updated = { ...(await this.d.identities.relabel(current, labels)), state: 'ready' };
      } catch (err) {
        this.d.endpoints.update(current);
        throw err;
      }
      this.d.endpoints.update(updated);
      await this.d.store.save(updated);
      this.d.log.info({ endpoint: ep.id, from: current.identity, to: updated.identity, labelsRevision: updated.labelsRevision }, 'endpoint labels changed');
      return updated;
    });
  }

  /** Removes endpoints and allocations not among the runtime's valid attachments (CNI GC, spec 1.1.0). */
  private async gc(call: ParsedCall): Promise<void> {
    const valid = new Set(validAttachments(call.conf).map((a) => ipamOwner(a.containerID, a.ifname)));
    for (const ep of this.d.endpoints.list()) {
      const owner = ipamOwner(ep.containerId, ep.ifName);
      if (valid.has(owner)) continue;
      await this.locks.run(owner, async () => {
        const still = this.d.endpoints.get(ep.id);
        if (still) await this.removeEndpoint(still, still.netns, call.conf);
      });
    }
    const live = new Set([...valid, ...this.inFlightOwners()]);
    const allocator = await this.d.ipam.allocatorFor(call.conf);
    const report = await allocator.gc(live);
    if (report.released.length > 0) this.d.log.info({ released: report.released.map((a) => `${a.owner}=${a.ip}`) }, 'CNI GC released stale addresses');
  }
}
