import { AgentError } from '../api/errors.js';
import { toAgentError } from '../api/errorMapping.js';
import { type CniRequest, type CniResponse, type EndpointAdoption, SUPPORTED_CNI_VERSIONS } from '../api/types.js';
import {
  type CniArgs,
  formatCniArgs,
  type NetConf,
  parseCallConf,
  pluginVersionInfo,
  parseCniArgs,
  type Result100,
  validateAbsolutePath,
  validateContainerId,
  validateInterfaceName,
  validAttachments,
} from '../cni/index.js';
import { isDatapathError } from '../datapath/types.js';
import { KeyedSerializer } from '../async/keyedSerializer.js';
import { UndoList } from '../async/undoList.js';
import {
  type Endpoint,
  type EndpointAddress,
  type EndpointManager,
  type EndpointStatus,
  StepTimer,
} from '../endpoint/index.js';
import type { LabelSet } from '../labels/index.js';
import { formatIp, formatPrefix, hostPrefix, ipFamilyOf, parseIp } from '../netip/index.js';
import { type Allocation, type Allocator, IpamError, IpamErrorCode, type IpamProvider, ipamOwner, ownerLease } from '../ipam/index.js';
import type { Logger } from '../logging/logger.js';
import type { AgentConfig } from './config.js';
import { endpointLabels, labelTextsFromCni, type PodRef, podRefFromArgs } from './endpointLabels.js';

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
function requestedIps(args: CniArgs, families: readonly (4 | 6)[]): string[] {
  const raw = args.find(([k]) => k === 'IP')?.[1];
  if (raw === undefined || raw === '') return [];
  const ips = raw.split(',').map((x) => x.trim());
  for (const ip of ips) {
    const family = ipFamilyOf(ip);
    if (family === 0) throw new AgentError('INVALID_ENVIRONMENT', `CNI_ARGS IP="${raw}" is not a list of IP addresses`);
    // Ignoring it would give the pod an address it did not ask for.
    if (!families.includes(family)) throw new AgentError('INVALID_ENVIRONMENT', `CNI_ARGS IP="${raw}": ${ip} is an IPv${family} address and this node has no IPv${family} pool`);
  }
  for (const family of families) {
    const same = ips.filter((ip) => ipFamilyOf(ip) === family);
    if (same.length > 1) throw new AgentError('INVALID_ENVIRONMENT', `CNI_ARGS IP="${raw}" asks for ${same.length} IPv${family} addresses (${same.join(', ')}); a pod gets one address per family`);
  }
  return ips;
}

/** An endpoint's record of one of its allocations (the gateway is checked by the caller). */
function endpointAddress(a: Allocation): EndpointAddress {
  return { family: a.family, ip: a.ip, gateway: a.gateway!, pool: a.pool, cidr: a.cidr, seq: a.seq };
}

export interface CniServiceDeps {
  config: AgentConfig;
  /** Pods' interface MTU: the configured one, or the underlay's (less the overlay's overhead in tunnel mode). */
  podMtu: number;
  ipam: IpamProvider;
  endpoints: EndpointManager;
  log: Logger;
  /** Whether the agent can serve ADD (kvstore reachable, IPAM started). */
  ready: () => Promise<boolean>;
  /** Called when delegated IPAM hands out a gateway the host device does not hold yet. */
  ensureRouterAddress: (family: 4 | 6, ip: string) => Promise<void>;
  /** Crash-test hook called at each ADD step (see faultPointFromEnv). */
  faultPoint?: (step: string) => void;
  /** With Kubernetes on: the pods' labels as the API server has them (an ADD naming a pod waits for it). */
  kubernetes?: PodLabelSource;
}

/** Pods' labels from the Kubernetes API server (the agent's watchers). */
export interface PodLabelSource {
  /** The pod's endpoint labels, waited for up to `podWaitSeconds`; undefined when the pod did not appear. */
  podLabels(namespace: string, name: string): Promise<LabelSet | undefined>;
  readonly podWaitSeconds: number;
  /** The pod's endpoint exists now: labels changed since podLabels() answered are applied to it. */
  endpointCreated(namespace: string, name: string): void;
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
  private readonly locks = new KeyedSerializer();

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
    // The skel in cniRoute makes these checks too, but the deletion queue and other callers reach handle() directly.
    const { conf } = parseCallConf(req.command, req.config, pluginVersionInfo(SUPPORTED_CNI_VERSIONS));
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
    // Before anything is allocated or replaced: a pod the API server does not know yet makes the ADD retry.
    const labels = await this.withPodLabels(endpointLabels(labelTextsFromCni(call.args, call.conf), pod), pod);
    // Delegated IPAM has no families of its own: its plugin's one ADD answers an address per
    // configured range, and the pod gets each family the plugin gave (at least one).
    const delegated = config.ipam === 'delegated';
    const families = this.d.ipam.families();
    const served = families.length > 0 ? families : ([4, 6] as const);
    // CNI_ARGS IP= (podman --ip, the spec's convention) asks for given addresses; checked
    // before a previous endpoint of the attachment is replaced.
    const wanted = requestedIps(call.args, served);
    const previous = endpoints.byContainer(call.containerId, call.ifName);
    // The spec forbids a runtime to ADD an attachment twice without a DEL; one that does
    // (a retry after a timeout, a restarted runtime) must not move a running pod.
    if (previous) {
      const existing = await this.repeatedAdd(call, previous, wanted);
      if (existing) return existing;
    }
    // Before anything is allocated or removed: never the node's own namespace. A call that
    // replaces an attachment also asks the datapath first (namespace present, interface
    // free or its own), so a refusal cannot have deleted the attachment; a first ADD
    // leaves that to addPod, which refuses the same way, and pays for no extra lookups.
    if (previous) await endpoints.preflightCreate({ containerId: call.containerId, netns: call.netns, ifName: call.ifName });
    else await endpoints.requirePodNetns(call.netns);
    const allocator = await this.d.ipam.allocatorFor(call.conf);
    if (previous) await endpoints.delete(previous.id, { netns: call.netns, lease: ownerLease([allocator], owner) });

    const timer = new StepTimer();
    const undo = new UndoList();
    try {
      const allocations: Allocation[] = [];
      undo.add(() => allocator.releaseOwner(owner), 'release addresses');
      const cni = { netns: call.netns, ifname: call.ifName, args: formatCniArgs(call.args) };
      // Every family at once when the allocator can (a dual-stack pod's addresses in one kvstore
      // write); given addresses and delegated plugins go family by family below.
      const allocateAll = !delegated && wanted.length === 0 && served.length > 1 ? allocator.allocateAll?.bind(allocator) : undefined;
      if (allocateAll) allocations.push(...(await allocateAll(served.map((family) => ({ owner, family, expirationMs: config.ipamExpirationMs, cni })))));
      for (const family of allocateAll ? [] : served) {
        const ip = wanted.find((w) => ipFamilyOf(w) === family);
        try {
          allocations.push(
            await allocator.allocate({
              owner,
              family,
              ...(ip ? { ip } : {}),
              // Delegated allocators exist per netconf and only once a call names them, so
              // after a restart none would re-arm or confirm an expiry: no expiration there.
              ...(delegated ? {} : { expirationMs: config.ipamExpirationMs }),
              cni,
            }),
          );
        } catch (err) {
          if (ip !== undefined && err instanceof IpamError && err.code === IpamErrorCode.IP_IN_USE) throw await this.unavailableAddress(allocator, ip, err);
          // A family the delegated plugin's ranges do not have; the last one it lacks too fails the ADD.
          if (delegated && err instanceof IpamError && err.code === IpamErrorCode.FAMILY_UNAVAILABLE && (allocations.length > 0 || family !== served[served.length - 1])) continue;
          throw err;
        }
      }
      timer.mark('ipam');
      this.d.faultPoint?.('after-ipam');
      for (const a of allocations) {
        if (!a.gateway) throw new AgentError('IPAM_FAILED', `IPAM gave ${a.ip} without a gateway`);
        if (delegated) await this.d.ensureRouterAddress(a.family, a.gateway);
      }
      const ep = await endpoints.create(
        {
          containerId: call.containerId,
          ifName: call.ifName,
          netns: call.netns,
          ...(call.conf.name ? { networkName: call.conf.name } : {}),
          mtu: this.d.podMtu,
          ...(pod.namespace ? { podNamespace: pod.namespace } : {}),
          ...(pod.name ? { podName: pod.name } : {}),
          labels,
          addresses: allocations.map(endpointAddress),
          ipamOwned: config.ipam !== 'delegated',
          timer,
        },
        ownerLease([allocator], owner, allocations),
      );
      if (this.d.kubernetes && pod.namespace && pod.name) this.d.kubernetes.endpointCreated(pod.namespace, pod.name);
      return this.result(call, ep);
    } catch (err) {
      await undo.rollBack(log, 'rollback step failed', { containerId: call.containerId });
      throw err;
    }
  }

  /**
   * An ADD for an attachment that already has an endpoint. While that
   * endpoint's pod network is intact in the same namespace, the answer is its
   * existing result: same addresses, MACs, labels and identity, so service
   * backends and policy still name the pod (the spec says a runtime must not
   * ADD twice without a DEL; one that retries gets the answer it lost). The same attachment in a DIFFERENT namespace while the first
   * one is intact is refused (CNI 4): replacing it would silently take a
   * running pod's network away, and the spec makes a second ADD without a DEL
   * the runtime's error. Only an attachment whose pod network is gone (its
   * namespace deleted, its interfaces removed) is replaced by the new ADD;
   * `undefined` says so. Restored endpoints (after an agent restart) take the
   * same path: they are in the registry like any other.
   */
  private async repeatedAdd(call: ParsedCall, previous: Endpoint, wanted: readonly string[]): Promise<Result100 | undefined> {
    const { endpoints, log } = this.d;
    const where = { containerId: call.containerId, ifName: call.ifName, endpoint: previous.id };
    if (previous.adopted) throw new AgentError('INVALID_ENVIRONMENT', `container ${call.containerId} interface ${call.ifName} is endpoint ${previous.id}, made by PUT /endpoint: DEL it (or DELETE /endpoint/${previous.id}) before an ADD`);
    const intact = await this.podNetworkIntact(previous, previous.netns);
    if (!intact) {
      log.warn({ ...where, netns: previous.netns, newNetns: call.netns, reason: intact === undefined ? 'namespace gone' : 'pod network damaged' }, 'repeated ADD: the previous attachment is no longer intact; it is replaced');
      return undefined;
    }
    if (previous.netns !== call.netns) {
      throw new AgentError('INVALID_ENVIRONMENT', `container ${call.containerId} interface ${call.ifName} is already attached (endpoint ${previous.id}, ${previous.addresses.map((a) => a.ip).join(', ')}) in network namespace ${previous.netns}, not ${call.netns}: DEL it first; an ADD never moves a running pod`);
    }
    const text = (ip: string) => formatIp(parseIp(ip));
    const mismatch = wanted.filter((w) => !previous.addresses.some((a) => text(a.ip) === text(w)));
    if (mismatch.length > 0) {
      throw new AgentError('INVALID_ENVIRONMENT', `CNI_ARGS IP=${mismatch.join(',')}: container ${call.containerId} interface ${call.ifName} is already attached with ${previous.addresses.map((a) => a.ip).join(', ')}; DEL it first to change its address`);
    }
    // The answer comes once the endpoint's policy is in force, as for a first ADD.
    if (previous.state !== 'ready') await endpoints.regenerate(previous.id);
    const current = endpoints.get(previous.id) ?? previous;
    log.info({ ...where, addresses: current.addresses.map((a) => a.ip) }, 'repeated ADD of a live attachment: answered with its existing result, nothing changed');
    return this.result(call, endpoints.status(current));
  }

  /** true: the endpoint's pod network checks out in `netns`; false: it does not; undefined: no such namespace. */
  private async podNetworkIntact(ep: Endpoint, netns: string): Promise<boolean | undefined> {
    const kind = await this.d.endpoints.classifyNetns(netns);
    if (kind !== 'pod') return undefined;
    try {
      await this.d.endpoints.check(ep.id, netns);
      return true;
    } catch (err) {
      if (isDatapathError(err, 'not-found', 'netns-gone')) return false;
      throw err;
    }
  }

  /**
   * With Kubernetes on, a call naming a pod (namespace and name) gets the
   * pod's labels from the API server; they win over CNI_ARGS and netconf
   * labels of the same key, which still add the keys the pod lacks. A pod
   * that does not appear in time is TRY_AGAIN (CNI 11): the kubelet retries
   * the sandbox, by when the watch has usually delivered it.
   */
  private async withPodLabels(labels: LabelSet, pod: PodRef): Promise<LabelSet> {
    const k8s = this.d.kubernetes;
    if (!k8s || !pod.namespace || !pod.name) return labels;
    const fromApi = await k8s.podLabels(pod.namespace, pod.name);
    if (!fromApi) {
      throw new AgentError('TRY_AGAIN', `pod ${pod.namespace}/${pod.name} is not known from the Kubernetes API server (waited ${k8s.podWaitSeconds} s for it among this node's pods); nothing was created, try again`);
    }
    return labels.with(fromApi);
  }

  /**
   * CNI_ARGS IP= named an address IPAM would not give. Another pod's may be
   * freed, so that stays "try again" (CONFLICT, CNI 11). The node's router
   * address and an address its block reserves (network, broadcast) never
   * will: INVALID_ENVIRONMENT (CNI 4, HTTP 400), the code of a CNI_ARGS value
   * that cannot be served, as for one that is no address; 11 would have the
   * runtime retry forever, 7 would blame the netconf.
   */
  private async unavailableAddress(allocator: Allocator, ip: string, err: IpamError): Promise<AgentError> {
    const text = formatIp(parseIp(ip));
    if (this.d.ipam.routerAddresses().some((r) => formatIp(parseIp(r.ip)) === text)) {
      return new AgentError('INVALID_ENVIRONMENT', `CNI_ARGS IP=${ip} is this node's router address (the pods' gateway): it can never be a pod's`);
    }
    if ((await allocator.list()).some((a) => formatIp(parseIp(a.ip)) === text)) return new AgentError('CONFLICT', err.message);
    return new AgentError('INVALID_ENVIRONMENT', `CNI_ARGS IP=${ip} is reserved in its block (its network or broadcast address): it can never be a pod's`);
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
      const labels = await this.withPodLabels(endpointLabels((req.labels ?? []).map((text) => ({ text, from: 'the request\'s labels' })), pod), pod);
      const adopted = await this.d.endpoints.adopt(
        {
          ...(req.id !== undefined ? { id: req.id } : {}),
          containerId: req.containerId,
          ifName: req.ifName,
          netns: req.netns,
          hostIfName: req.hostIfName,
          mtu: this.d.podMtu,
          ...(pod.namespace ? { podNamespace: pod.namespace } : {}),
          ...(pod.name ? { podName: pod.name } : {}),
          labels,
          addresses: allocations.map(endpointAddress),
          ipamOwned: true,
        },
        ownerLease(this.d.ipam.all(), owner, allocations),
      );
      if (this.d.kubernetes && pod.namespace && pod.name) this.d.kubernetes.endpointCreated(pod.namespace, pod.name);
      return adopted;
    });
  }

  /**
   * CNI GC (spec 1.1.0): removes the endpoints the endpoint manager names
   * for the netconf's network and the runtime's valid attachments
   * (gcCandidates), then has IPAM release the addresses no endpoint of any
   * network holds, no CNI call is working on and the runtime does not list
   * (leaks of an ADD that died); provisional ones are left to expire.
   */
  private async gc(call: ParsedCall): Promise<void> {
    const valid = new Set(validAttachments(call.conf).map((a) => ipamOwner(a.containerID, a.ifname)));
    const allocator = await this.d.ipam.allocatorFor(call.conf);
    for (const ep of this.d.endpoints.gcCandidates(call.conf.name ?? '', (e) => valid.has(ipamOwner(e.containerId, e.ifName)))) {
      const owner = ipamOwner(ep.containerId, ep.ifName);
      // No namespace path: the recorded one may name another process's namespace by now.
      await this.locks.run(owner, () => this.d.endpoints.deleteAttachment({ containerId: ep.containerId, ifName: ep.ifName, netns: '' }, ownerLease([allocator], owner)));
    }
    const endpointOwners = this.d.endpoints.list().map((ep) => ipamOwner(ep.containerId, ep.ifName));
    const live = new Set([...valid, ...endpointOwners, ...this.inFlightOwners()]);
    const report = await allocator.gc(live);
    if (report.released.length > 0) this.d.log.info({ released: report.released.map((a) => `${a.owner}=${a.ip}`) }, 'CNI GC released stale addresses');
  }
}
