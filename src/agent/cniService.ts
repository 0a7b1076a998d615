import { AgentError, agentCodeForCni } from '../api/errors.js';
import { type CniRequest, type CniResponse, type EndpointAdoptionBody, SUPPORTED_CNI_VERSIONS } from '../api/types.js';
import {
  type CniArgs,
  CniError,
  CniErrorCode,
  formatCniArgs,
  IMPLICIT_VERSION,
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
import { isDatapathError } from '../datapath/types.js';
import {
  type AddressLease,
  type EndpointAddress,
  EndpointErrorCode,
  type EndpointManager,
  type EndpointStatus,
  isEndpointError,
  KeyedMutex,
  StepTimer,
  UndoList,
} from '../endpoint/index.js';
import { IdentityError, IdentityErrorCode } from '../identity/index.js';
import { LabelError } from '../labels/index.js';
import { formatPrefix, hostPrefix, ipFamilyOf, parseIp } from '../netip/index.js';
import { isPolicyError, PolicyErrorCode, PolicyValidationError } from '../policy/index.js';
import { type Allocation, type Allocator, IpamError, IpamErrorCode } from '../ipam/index.js';
import type { Logger } from '../logging/logger.js';
import type { AgentConfig } from './config.js';
import { endpointLabels, labelTextsFromCni, podRefFromArgs } from './endpointLabels.js';
import type { IpamProvider } from './ipamProvider.js';

/** PUT /endpoint/{id}: a pod set up by someone else, to be made an endpoint (the body, and the ID when the path gave a number). */
export type EndpointAdoption = EndpointAdoptionBody & { id?: number };

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
    if (ipFamilyOf(ip) === 0) throw new AgentError('INVALID_ENVIRONMENT', `CNI_ARGS IP="${raw}" is not a list of IP addresses`);
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

/** The addresses of one IPAM owner across allocators, as an endpoint's lease on them. */
export function ownerLease(allocators: readonly Allocator[], owner: string): AddressLease {
  return {
    confirm: async () => {
      for (const a of allocators) await a.confirm(owner);
    },
    release: async () => {
      for (const a of allocators) await a.releaseOwner(owner);
    },
  };
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
  if (isEndpointError(err)) {
    switch (err.code) {
      case EndpointErrorCode.NOT_FOUND:
        return new AgentError('NOT_FOUND', err.message);
      case EndpointErrorCode.CONFLICT:
      case EndpointErrorCode.DISCONNECTING:
        return new AgentError('CONFLICT', err.message);
      case EndpointErrorCode.INVALID_ARGUMENT:
        return new AgentError('INVALID_REQUEST', err.message);
      case EndpointErrorCode.NETNS_REFUSED:
        // The CNI spec has no code for "this is not a pod's namespace"; CNI_NETNS is an environment variable.
        return new AgentError('INVALID_ENVIRONMENT', `CNI_NETNS refused: ${err.message}`);
      case EndpointErrorCode.REGENERATION_FAILED:
        return new AgentError('DATAPATH_FAILED', err.message);
    }
  }
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
  if (isDatapathError(err)) return new AgentError('DATAPATH_FAILED', err.message);
  return new AgentError('INTERNAL', err instanceof Error ? err.message : String(err));
}

export interface CniServiceDeps {
  config: AgentConfig;
  ipam: IpamProvider;
  endpoints: EndpointManager;
  log: Logger;
  /** Whether the agent can serve ADD (kvstore reachable, IPAM started). */
  ready: () => Promise<boolean>;
  /** Called when delegated IPAM hands out a gateway the host device does not hold yet. */
  ensureRouterAddress: (family: 4 | 6, ip: string) => Promise<void>;
  /** Crash-test hook called at each ADD step (see faultPointFromEnv). */
  faultPoint?: (step: string) => void;
}

/**
 * The CNI verbs (and the granular PUT /endpoint that Cilium's plugin uses) as
 * a thin adapter: it validates the call, does the IPAM and netconf specifics
 * and builds the CNI result; the EndpointManager does the rest. ADD is one
 * transaction: the addresses are released when the endpoint cannot be made
 * (the manager undoes its own steps first), and the answer comes only once
 * the endpoint's first regeneration is in force.
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
    const { config, endpoints, log } = this.d;
    const owner = ipamOwner(call.containerId, call.ifName);
    const pod = podRefFromArgs(call.args);
    const labels = endpointLabels(labelTextsFromCni(call.args, call.conf), pod);
    // Before anything is allocated or removed: never the node's own namespace.
    await endpoints.requirePodNetns(call.netns);

    // A second ADD for the same attachment replaces the first, as a re-created sandbox expects.
    const previous = endpoints.byContainer(call.containerId, call.ifName);
    const allocator = await this.d.ipam.allocatorFor(call.conf);
    if (previous) await endpoints.delete(previous.id, { netns: call.netns, lease: ownerLease([allocator], owner) });

    const families = this.d.ipam.families();
    const timer = new StepTimer();
    const undo = new UndoList(log, { containerId: call.containerId });
    try {
      const allocations: Allocation[] = [];
      undo.push('release addresses', () => allocator.releaseOwner(owner));
      // CNI_ARGS IP= (podman --ip, the spec's convention) asks for given addresses.
      const wanted = requestedIps(call.args);
      for (const family of families.length > 0 ? families : ([4] as const)) {
        const ip = wanted.find((w) => ipFamilyOf(w) === family);
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
      timer.mark('ipam');
      this.d.faultPoint?.('after-ipam');
      for (const a of allocations) {
        if (!a.gateway) throw new AgentError('IPAM_FAILED', `IPAM gave ${a.ip} without a gateway`);
        if (config.ipam === 'delegated') await this.d.ensureRouterAddress(a.family, a.gateway);
      }
      const ep = await endpoints.create(
        {
          containerId: call.containerId,
          ifName: call.ifName,
          netns: call.netns,
          mtu: config.mtu,
          ...(pod.namespace ? { podNamespace: pod.namespace } : {}),
          ...(pod.name ? { podName: pod.name } : {}),
          labels,
          addresses: allocations.map(endpointAddress),
          ipamOwned: config.ipam !== 'delegated',
          timer,
        },
        ownerLease([allocator], owner),
      );
      return this.result(call, ep);
    } catch (err) {
      await undo.rollBack();
      throw err;
    }
  }

  private result(call: ParsedCall, ep: EndpointStatus): Result100 {
    return {
      cniVersion: '1.1.0',
      interfaces: [
        { name: ep.hostIfName, mac: ep.hostMac },
        { name: ep.ifName, mac: ep.podMac, mtu: ep.mtu, sandbox: call.netns },
      ],
      ips: ep.addresses.map((a) => ({ address: formatPrefix(hostPrefix(parseIp(a.ip))), gateway: a.gateway, interface: 1 })),
      routes: ep.addresses.map((a) => ({ dst: a.family === 4 ? '0.0.0.0/0' : '::/0', gw: a.gateway })),
      ...(call.conf.dns ? { dns: call.conf.dns } : {}),
    };
  }

  /**
   * DEL is idempotent and never fails for something already gone; a
   * CNI_NETNS that is not a pod's namespace is left alone, yet the
   * container's addresses are still released.
   */
  private async del(call: ParsedCall): Promise<void> {
    const allocator = await this.d.ipam.allocatorFor(call.conf);
    const lease = ownerLease([allocator], ipamOwner(call.containerId, call.ifName));
    await this.d.endpoints.deleteAttachment({ containerId: call.containerId, ifName: call.ifName, netns: call.netns }, lease);
  }

  private async check(call: ParsedCall): Promise<void> {
    const { endpoints } = this.d;
    await endpoints.requirePodNetns(call.netns);
    const ep = endpoints.byContainer(call.containerId, call.ifName);
    if (!ep) throw new AgentError('NOT_FOUND', `no endpoint for container ${call.containerId} interface ${call.ifName}`);
    const allocator: Allocator = await this.d.ipam.allocatorFor(call.conf);
    const held = new Set((await allocator.get(ipamOwner(ep.containerId, ep.ifName))).map((a) => a.ip));
    for (const a of ep.addresses) {
      if (!held.has(a.ip)) throw new AgentError('DATAPATH_FAILED', `address ${a.ip} of endpoint ${ep.id} is no longer allocated to it`);
    }
    await endpoints.check(ep.id, call.netns);
  }

  /**
   * PUT /endpoint/{id}: an endpoint for a pod whose veth pair and addresses
   * someone else set up (Cilium's plugin-driven flow: POST /ipam, create the
   * veth, PUT the endpoint). The addresses must be allocated to the
   * attachment's owner; the manager adds the host side, identity and policy.
   */
  async adoptEndpoint(req: EndpointAdoption): Promise<EndpointStatus> {
    try {
      validateContainerId(req.containerId);
      validateInterfaceName(req.ifName);
      validateInterfaceName(req.hostIfName);
      validateAbsolutePath(req.netns, 'netns');
    } catch (err) {
      throw toAgentError(err);
    }
    const owner = ipamOwner(req.containerId, req.ifName);
    return this.locks.run(owner, async () => {
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
      return this.d.endpoints.adopt(
        {
          ...(req.id !== undefined ? { id: req.id } : {}),
          containerId: req.containerId,
          ifName: req.ifName,
          netns: req.netns,
          hostIfName: req.hostIfName,
          mtu: this.d.config.mtu,
          ...(pod.namespace ? { podNamespace: pod.namespace } : {}),
          ...(pod.name ? { podName: pod.name } : {}),
          labels,
          addresses: allocations.map(endpointAddress),
          ipamOwned: true,
        },
        ownerLease(this.d.ipam.all(), owner),
      );
    });
  }

  /** Removes endpoints and allocations not among the runtime's valid attachments (CNI GC, spec 1.1.0). */
  private async gc(call: ParsedCall): Promise<void> {
    const valid = new Set(validAttachments(call.conf).map((a) => ipamOwner(a.containerID, a.ifname)));
    const allocator = await this.d.ipam.allocatorFor(call.conf);
    for (const ep of this.d.endpoints.list()) {
      const owner = ipamOwner(ep.containerId, ep.ifName);
      if (valid.has(owner)) continue;
      // No namespace path: the recorded one may name another process's namespace by now.
      await this.locks.run(owner, () => this.d.endpoints.deleteAttachment({ containerId: ep.containerId, ifName: ep.ifName, netns: '' }, ownerLease([allocator], owner)));
    }
    const live = new Set([...valid, ...this.inFlightOwners()]);
    const report = await allocator.gc(live);
    if (report.released.length > 0) this.d.log.info({ released: report.released.map((a) => `${a.owner}=${a.ip}`) }, 'CNI GC released stale addresses');
  }
}
