import { type Datapath, isDatapathError, type NetnsKind, type PodAddress } from '../datapath/types.js';
import { type IdentityAllocator, IdentityError, IdentityErrorCode } from '../identity/index.js';
import type { IPCache } from '../ipcache/index.js';
import { LabelFilter, type LabelSet, requirePodLabel } from '../labels/index.js';
import type { Logger } from '../logging/logger.js';
import { isPolicyError, PolicyErrorCode } from '../policy/index.js';
import type { Endpoint, EndpointAddress, EndpointState } from './endpoint.js';
import type { EndpointStore, QuarantinedRecord } from './endpointStore.js';
import { EndpointError, EndpointErrorCode, isEndpointError } from './errors.js';
import { EndpointIdentityBinder } from './identityBinder.js';
import { KeyedSerializer } from '../async/keyedSerializer.js';
import type { PolicyChange, PolicyRevisions } from './policyRevisions.js';
import { RegenerationQueue } from './regenerationQueue.js';
import { EndpointRegistry } from './registry.js';
import { StepTimer } from './stepTimer.js';
import { UndoList } from '../async/undoList.js';

/**
 * The addresses an endpoint is created with, as IPAM holds them for it. The
 * manager confirms them as the last step of a creation and releases them
 * during teardown, before the endpoint's state file goes (so a crash in
 * between leaves a file that the next restore finishes).
 */
export interface AddressLease {
  /**
   * Makes the addresses permanent. False when IPAM no longer holds them for
   * the endpoint: its provisional allocation expired (and the address may be
   * someone else's by now).
   */
  confirm(): Promise<boolean>;
  release(): Promise<void>;
}

/** An endpoint as the API shows it: the persisted model and its regeneration status. */
export interface EndpointStatus extends Endpoint {
  /** The policy revision the endpoint's datapath state realizes (0: none yet). */
  policyRevision: number;
  /** The agent's current policy revision: what the endpoint converges to. */
  desiredPolicyRevision: number;
  /** Why the last regeneration failed, while the endpoint is not-ready. */
  regenerationError?: string;
  /** Milliseconds each step of this endpoint's creation took, in order (not kept across agent restarts). */
  creationTimings?: Record<string, number>;
}

/** A pod the manager plumbs itself (CNI ADD). */
export interface NewEndpoint {
  containerId: string;
  ifName: string;
  netns: string;
  /** The CNI network (netconf `name`) of a CNI ADD; CNI GC acts only on its own network's endpoints. */
  networkName?: string;
  mtu: number;
  podNamespace?: string;
  podName?: string;
  labels: LabelSet;
  addresses: EndpointAddress[];
  /** Whether the agent's IPAM owns the addresses (false: a delegated plugin does). */
  ipamOwned: boolean;
  /** Started by the caller when it has steps of its own to count (IPAM); the manager marks its steps on it. */
  timer?: StepTimer;
}

/** A pod whose veth pair someone else made (PUT /endpoint/{id}). */
export interface AdoptedEndpoint extends NewEndpoint {
  id?: number;
  hostIfName: string;
}

/** A restored endpoint's addresses after IPAM was asked to hold them for it again. */
export interface AddressClaim {
  /** The endpoint's addresses as IPAM now holds them (a re-claimed one has a new sequence number). */
  addresses: EndpointAddress[];
  /** Addresses IPAM no longer held (its state was lost or rolled back) and now holds for the endpoint again. */
  reclaimed: string[];
  /** Why the endpoint cannot have its addresses: IPAM gives one to another owner, or cannot give it at all. */
  conflict?: string;
}

export interface RestoreHooks {
  /** The lease of a restored endpoint's addresses (confirmed once it is back, released when it vanished). */
  lease(ep: Endpoint): AddressLease;
  /**
   * Makes IPAM hold a restored endpoint's addresses for it again (a kvstore
   * that lost its latest writes forgets them, and would hand them to the next
   * pod). Runs before anything of the endpoint is put back in force.
   */
  reclaim?(ep: Endpoint): Promise<AddressClaim>;
  /** Runs before a restored endpoint's first regeneration (the agent puts its gateway on the host device). */
  prepare?(ep: Endpoint): Promise<void>;
  /**
   * The attachments IPAM holds addresses for, and whether only provisionally
   * (an ADD not finished); undefined when IPAM cannot say (delegated). The
   * orphan sweep tells an interrupted ADD's interface from an unreadable
   * record's pod by it.
   */
  addressOwners?(): Promise<Array<{ containerId: string; ifName: string; provisional: boolean }> | undefined>;
}

export interface RestoreReport {
  restored: number;
  /** Endpoints whose pod vanished while the agent was down, or whose deletion was interrupted. */
  released: number;
  /** Restored endpoints whose first regeneration failed (they are not-ready). */
  failed: number;
  /** Addresses IPAM had lost and now holds for their endpoints again. */
  reclaimed: string[];
  /** Records quarantined because IPAM gives one of their addresses to someone else, or another record claims it. */
  conflicts: Array<{ endpoint: number; containerId: string; reason: string }>;
  /** Records moved aside this start (unreadable, naming an interface not their attachment's, conflicting); their pods were left alone. */
  quarantined: QuarantinedRecord[];
  /** Pod host interfaces no endpoint owns, removed. */
  orphansRemoved: string[];
  /** Pod host interfaces no endpoint owns, kept because a quarantined record may own them. */
  orphansKept: string[];
}

export interface EndpointManagerOptions {
  datapath: Datapath;
  store: EndpointStore;
  identities: IdentityAllocator;
  ipcache: IPCache;
  policy: PolicyRevisions;
  labelFilter?: LabelFilter;
  log: Logger;
  /** Crash-test hook called at `after-datapath` and `after-endpoint` of a creation. */
  faultPoint?: (step: string) => void;
  /** Called as each regeneration ends, with how long it took (the agent's metrics). */
  onRegenerated?: (result: 'success' | 'error', seconds: number) => void;
}

interface Runtime {
  readonly queue: RegenerationQueue<number>;
  /** The policy revision of the last regeneration that succeeded. */
  realized?: number;
  /** Why the last regeneration failed; cleared by one that succeeds. */
  error?: string;
  creationTimings?: Record<string, number>;
  /** Teardown steps done, so a deletion retried after a failure does not repeat them. */
  policyRemoved: boolean;
  identityReleased: boolean;
}

/** One endpoint state transition; `from` is undefined when the endpoint appears. */
export interface EndpointStateChange {
  id: number;
  from: EndpointState | undefined;
  to: EndpointState;
}

export type EndpointStateListener = (change: EndpointStateChange) => void;

const attachmentKey = (containerId: string, ifName: string) => `${containerId}/${ifName}`;

export function podAddress(a: EndpointAddress): PodAddress {
  return { family: a.family, ip: a.ip, gateway: a.gateway };
}

/**
 * A runtime run under `ip netns exec` has a mount namespace of its own, so the
 * pod namespaces it bind-mounts under /run/netns are invisible to the agent:
 * the agent sees the empty mount-point file.
 */
export function unmountedNetnsMessage(path: string): string {
  return `${path} is not a network namespace in the agent's view: it is an empty file with nothing mounted on it, so the runtime mounted the pod's namespace in a mount namespace of its own (a runtime started under \`ip netns exec\` gets a private one). Start the runtime with \`nsenter --net=/run/netns/NAME\` instead, which changes the network namespace only`;
}

/**
 * Owns every local endpoint's lifecycle, in Cilium's order:
 * create → identity → ipcache → policy → datapath regeneration → ready;
 * adopt (a pod plumbed by someone else); label change (new identity, then a
 * regeneration); delete (disconnecting → teardown); restore after a restart.
 *
 * Regenerations go through a per-endpoint queue (one at a time, coalesced)
 * and realize a policy revision; creation answers only once the endpoint's
 * first regeneration is in force. Policy imports and deletions and identity
 * changes queue regenerations of the endpoints whose map state they changed.
 * Lifecycle calls for one attachment run one at a time.
 */
export class EndpointManager {
  readonly #registry = new EndpointRegistry();
  readonly #runtime = new Map<number, Runtime>();
  readonly #locks = new KeyedSerializer();
  readonly #binder: EndpointIdentityBinder;
  readonly #unsubscribe: Array<() => void> = [];
  readonly #stateListeners = new Set<EndpointStateListener>();

  constructor(private readonly o: EndpointManagerOptions) {
    this.#binder = new EndpointIdentityBinder(o.identities, o.ipcache, o.labelFilter ?? LabelFilter.DEFAULT);
    this.#unsubscribe.push(o.policy.subscribe((change) => this.#onPolicyChange(change)));
    // Identities other nodes (or this one) create change which peers a selector names.
    this.#unsubscribe.push(
      o.identities.subscribe((events) => {
        const added = events.filter((e) => e.type === 'upsert').map((e) => e.identity);
        const removed = events.filter((e) => e.type === 'delete').map((e) => e.identity.id);
        try {
          o.policy.identitiesChanged(added, removed);
        } catch (err) {
          o.log.error({ err, added: added.map((i) => i.id), removed }, 'policy engine rejected identity changes');
        }
      }),
    );
  }

  // ---- reads ---------------------------------------------------------------

  get size(): number {
    return this.#registry.size;
  }

  get(id: number): Endpoint | undefined {
    return this.#registry.get(id);
  }

  /** `<number>`, `container-id:<id>`, `pod-name:<ns>:<name>`, `ipv4:<ip>`, `ipv6:<ip>`. */
  lookup(ref: string): Endpoint | undefined {
    return this.#registry.lookup(ref);
  }

  byContainer(containerId: string, ifName?: string): Endpoint | undefined {
    return this.#registry.byContainer(containerId, ifName);
  }

  byIp(ip: string): Endpoint | undefined {
    return this.#registry.byIp(ip);
  }

  list(): Endpoint[] {
    return this.#registry.list();
  }

  /**
   * The endpoints a CNI GC of `network` removes: that network's, those the
   * runtime does not list as valid. The valid list speaks for that network
   * only, so endpoints of other networks, and endpoints without a recorded
   * network (adopted ones, and records older than the field), are never GC's.
   */
  gcCandidates(network: string, valid: (ep: Endpoint) => boolean): Endpoint[] {
    if (network === '') return [];
    return this.list().filter((ep) => ep.networkName === network && !valid(ep));
  }

  status(ep: Endpoint): EndpointStatus {
    const rt = this.#runtime.get(ep.id);
    const desired = this.o.policy.revision;
    // Ready, nothing queued, last run fine: every change since that run left this
    // endpoint's map alone (it would have queued one), so it realizes the current revision.
    const inSync = rt?.realized !== undefined && !rt.queue.busy && rt.error === undefined && ep.state === 'ready';
    return {
      ...ep,
      policyRevision: inSync ? desired : (rt?.realized ?? 0),
      desiredPolicyRevision: desired,
      ...(rt?.error !== undefined ? { regenerationError: rt.error } : {}),
      ...(rt?.creationTimings ? { creationTimings: rt.creationTimings } : {}),
    };
  }

  statuses(): EndpointStatus[] {
    return this.list().map((ep) => this.status(ep));
  }

  /** Every state transition of every endpoint, as it happens (`disconnected` when one is gone). */
  subscribe(listener: EndpointStateListener): () => void {
    this.#stateListeners.add(listener);
    return () => this.#stateListeners.delete(listener);
  }

  /** Regenerations started for an endpoint so far (0 for an unknown one). */
  regenerationCount(id: number): number {
    return this.#runtime.get(id)?.queue.runs ?? 0;
  }

  // ---- network namespaces ------------------------------------------------------

  classifyNetns(path: string): Promise<NetnsKind> {
    return path === '' ? Promise.resolve('missing') : this.o.datapath.classifyNetns(path);
  }

  /**
   * Refuses a pod namespace path the agent must never create or delete
   * interfaces in: its own (or the init) namespace, or a file that is no
   * namespace (a FIFO would block whoever opens it). A missing path passes:
   * the datapath reports it as `netns-gone` where it matters.
   */
  async requirePodNetns(path: string): Promise<void> {
    const kind = await this.classifyNetns(path);
    if (kind === 'node') throw new EndpointError(EndpointErrorCode.NETNS_REFUSED, `${path} is the node's own network namespace, not a pod's: refusing to create or delete interfaces in it`);
    if (kind === 'not-netns') throw new EndpointError(EndpointErrorCode.NETNS_REFUSED, `${path} is not a network namespace`);
    if (kind === 'unmounted') throw new EndpointError(EndpointErrorCode.NETNS_REFUSED, unmountedNetnsMessage(path));
  }

  /**
   * Everything a creation in `netns` would refuse for reasons of the pod's
   * namespace — not a pod's, missing, `ifName` taken by someone else — asked
   * before the caller removes anything (an earlier attachment it replaces).
   */
  async preflightCreate(spec: { containerId: string; netns: string; ifName: string }): Promise<void> {
    await this.requirePodNetns(spec.netns);
    await this.o.datapath.preflightPod(spec);
  }

  /** The namespace to hand the datapath for a teardown: empty (leave it alone) unless it is a pod's. */
  async #teardownNetns(path: string): Promise<string> {
    return (await this.classifyNetns(path)) === 'pod' ? path : '';
  }

  // ---- lifecycle -------------------------------------------------------------

  /** Plumbs a pod and makes it an endpoint; answers once its first regeneration is in force. All or nothing. */
  create(spec: NewEndpoint, lease: AddressLease): Promise<EndpointStatus> {
    return this.#locks.run(attachmentKey(spec.containerId, spec.ifName), async () => {
      await this.requirePodNetns(spec.netns);
      this.#refuseTaken(spec.containerId, spec.ifName);
      const holder = this.#hostIfHolder(spec.containerId, spec.ifName);
      if (holder) throw new EndpointError(EndpointErrorCode.CONFLICT, `host interface ${holder.hostIfName} already exists and belongs to endpoint ${holder.id} (container ${holder.containerId})`);
      const { datapath, log } = this.o;
      const addresses = spec.addresses.map(podAddress);
      const undo = new UndoList();
      try {
        const timer = spec.timer ?? new StepTimer();
        // A failed addPod removed what it made itself; undoing before it succeeded could only
        // remove what was there before (another attachment's interface).
        const net = await datapath.addPod({ containerId: spec.containerId, netns: spec.netns, ifName: spec.ifName, mtu: spec.mtu, addresses });
        undo.add(() => datapath.removePod({ containerId: spec.containerId, netns: spec.netns, ifName: spec.ifName, addresses }), 'remove pod network');
        timer.mark('links');
        this.o.faultPoint?.('after-datapath');
        const ep = this.#newModel(spec, this.#registry.allocateId(), net);
        const ready = await this.#commit(ep, lease, undo, timer);
        log.info({ endpoint: ep.id, identity: ready.identity, containerId: spec.containerId, ifName: spec.ifName, addresses: ep.addresses.map((a) => a.ip), policyRevision: ready.policyRevision }, 'endpoint created');
        return ready;
      } catch (err) {
        await undo.rollBack(log, 'rollback step failed', { containerId: spec.containerId, ifName: spec.ifName });
        throw err;
      }
    });
  }

  /**
   * Makes an endpoint of a pod whose veth pair someone else created (Cilium's
   * plugin-driven PUT /endpoint): host routes, identity, ipcache, policy,
   * regeneration. All or nothing.
   */
  adopt(spec: AdoptedEndpoint, lease: AddressLease): Promise<EndpointStatus> {
    return this.#locks.run(attachmentKey(spec.containerId, spec.ifName), async () => {
      await this.requirePodNetns(spec.netns);
      this.#refuseTaken(spec.containerId, spec.ifName);
      if (spec.id !== undefined && this.#registry.get(spec.id)) throw new EndpointError(EndpointErrorCode.CONFLICT, `endpoint ID ${spec.id} is taken`);
      const { datapath, log } = this.o;
      const addresses = spec.addresses.map(podAddress);
      const undo = new UndoList();
      try {
        let net: { hostIfIndex: number; hostMac: string };
        try {
          net = await datapath.adoptPod({ hostIfName: spec.hostIfName, netns: spec.netns, ifName: spec.ifName, addresses });
        } catch (err) {
          // The caller named an interface that is not this pod's veth (or none): the request's fault.
          if (isDatapathError(err, 'refused', 'not-found', 'netns-gone')) throw new EndpointError(EndpointErrorCode.INVALID_ARGUMENT, err.message, { cause: err });
          throw err;
        }
        undo.add(() => datapath.releaseAdoptedPod({ hostIfName: spec.hostIfName, addresses }), 'remove host routes');
        const ep: Endpoint = { ...this.#newModel(spec, spec.id ?? this.#registry.allocateId(), { hostIfName: spec.hostIfName, hostIfIndex: net.hostIfIndex, hostMac: net.hostMac, podMac: '' }), adopted: true };
        const ready = await this.#commit(ep, lease, undo);
        log.info({ endpoint: ep.id, identity: ready.identity, containerId: spec.containerId, hostIfName: spec.hostIfName }, 'endpoint adopted');
        return ready;
      } catch (err) {
        await undo.rollBack(log, 'rollback step failed', { containerId: spec.containerId, hostIfName: spec.hostIfName });
        throw err;
      }
    });
  }

  /**
   * Deletes an endpoint: disconnecting, its queue closed (a running
   * regeneration finishes first), policy, ipcache and identity released, the
   * pod network removed, the addresses released, the state file last.
   * `netns` is the caller's (a CNI DEL's) path to the pod's namespace; a path
   * that is not a pod's namespace is left alone. Retrying after a failure
   * resumes where it stopped.
   */
  async delete(id: number, opts: { netns?: string; lease: AddressLease }): Promise<void> {
    const ep = this.#registry.get(id);
    if (!ep) throw new EndpointError(EndpointErrorCode.NOT_FOUND, `endpoint ${id} not found`);
    await this.#locks.run(attachmentKey(ep.containerId, ep.ifName), async () => {
      const current = this.#registry.get(id);
      if (!current) throw new EndpointError(EndpointErrorCode.NOT_FOUND, `endpoint ${id} not found`);
      await this.#teardown(current, opts.netns ?? '', opts.lease);
    });
  }

  /**
   * CNI DEL of one attachment: its endpoint is deleted; without one, whatever
   * an interrupted ADD left is removed and the addresses released. DEL is
   * idempotent, and a path that is not a pod's namespace is never touched.
   */
  deleteAttachment(req: { containerId: string; ifName: string; netns: string }, lease: AddressLease): Promise<void> {
    return this.#locks.run(attachmentKey(req.containerId, req.ifName), async () => {
      const ep = this.#registry.byContainer(req.containerId, req.ifName);
      if (ep) return this.#teardown(ep, req.netns, lease);
      const holder = this.#hostIfHolder(req.containerId, req.ifName);
      if (holder) {
        this.o.log.warn({ containerId: req.containerId, ifName: req.ifName, endpoint: holder.id, hostIfName: holder.hostIfName }, 'DEL of an unknown attachment: its host interface name belongs to another endpoint; left alone');
      } else {
        const netns = await this.#teardownNetns(req.netns);
        await this.o.datapath.removePod({ containerId: req.containerId, netns, ifName: req.ifName, addresses: [] });
      }
      await lease.release();
    });
  }

  /** CNI CHECK of an endpoint's pod network. */
  async check(id: number, netns: string): Promise<void> {
    await this.requirePodNetns(netns);
    const ep = this.#registry.get(id);
    if (!ep) throw new EndpointError(EndpointErrorCode.NOT_FOUND, `endpoint ${id} not found`);
    await this.o.datapath.checkPod({ containerId: ep.containerId, netns, ifName: ep.ifName, mtu: ep.mtu, addresses: ep.addresses.map(podAddress) });
  }

  /**
   * New labels: a new identity (taken before the old one is released, so the
   * endpoint always has one, and the ipcache switches in one upsert), its
   * policy, then a regeneration; answers once that is in force. A failed
   * regeneration leaves the new labels in place and the endpoint not-ready.
   * A label of a source a pod may not carry (reserved, cidr, …) is a
   * LabelError and nothing changes.
   */
  async updateLabels(id: number, labels: LabelSet): Promise<EndpointStatus> {
    const ep = this.#registry.get(id);
    if (!ep) throw new EndpointError(EndpointErrorCode.NOT_FOUND, `endpoint ${id} not found`);
    // Before anything changes: a pod given reserved:host would be the host to every policy.
    for (const label of labels) requirePodLabel(label);
    return this.#locks.run(attachmentKey(ep.containerId, ep.ifName), async () => {
      const current = this.#registry.get(id);
      if (!current) throw new EndpointError(EndpointErrorCode.NOT_FOUND, `endpoint ${id} is gone`);
      if (current.state === 'disconnecting') throw new EndpointError(EndpointErrorCode.DISCONNECTING, `endpoint ${id} is being deleted`);
      const { log, policy, store } = this.o;
      const relabelled: Endpoint = { ...current, labels: labels.toStrings(), labelsRevision: (current.labelsRevision ?? 0) + 1, state: 'waiting-for-identity' };
      this.#update(relabelled);
      let bound: Endpoint;
      try {
        bound = await this.#binder.bind(relabelled);
      } catch (err) {
        this.#update(current);
        throw err;
      }
      try {
        policy.upsertEndpoint({ id, identity: bound.identity! });
      } catch (err) {
        this.#binder.publish(current);
        await this.#binder.release(bound.identity!);
        this.#update(current);
        throw err;
      }
      if (current.identity !== undefined) await this.#releaseIdentity(current);
      this.#update({ ...bound, state: 'waiting-to-regenerate' });
      let failure: unknown;
      try {
        await this.#runtime.get(id)!.queue.request();
      } catch (err) {
        failure = err;
      }
      const updated = this.#registry.get(id)!;
      await store.save(updated);
      log.info({ endpoint: id, from: current.identity, to: updated.identity, labelsRevision: updated.labelsRevision }, 'endpoint labels changed');
      if (failure !== undefined) throw failure;
      return this.status(updated);
    });
  }

  /** Queues a regeneration of the endpoint; resolves with the policy revision it realized. */
  regenerate(id: number): Promise<number> {
    const rt = this.#runtime.get(id);
    if (!rt) return Promise.reject(new EndpointError(EndpointErrorCode.NOT_FOUND, `endpoint ${id} not found`));
    this.#markQueued(id);
    return rt.queue.request();
  }

  /**
   * Brings endpoints back from the state dir after a restart: each gets its
   * addresses held by IPAM again, its identity (the same number unless
   * another node reused it meanwhile), ipcache entries and policy, then all
   * regenerate side by side while their pods keep the datapath state they
   * had. Endpoints whose pod vanished (or whose deletion was interrupted) are
   * finished off; pod interfaces no endpoint owns are removed.
   *
   * Damaged state keeps pods online: an unreadable record is quarantined and
   * its pod's interface kept; an endpoint whose address IPAM now gives to
   * someone else is kept not-ready with the reason, its pod untouched.
   */
  async restore(hooks: RestoreHooks): Promise<RestoreReport> {
    const { datapath, store, log, policy } = this.o;
    const report: RestoreReport = { restored: 0, released: 0, failed: 0, reclaimed: [], conflicts: [], quarantined: [], orphansRemoved: [], orphansKept: [] };
    const { endpoints, quarantined, problems } = await store.loadAll();
    for (const q of quarantined) {
      log.error({ endpoint: q.id, movedTo: q.movedTo, error: q.error, hostIfName: q.hostIfName, containerId: q.containerId }, `endpoint record ${q.id} is unreadable: quarantined to ${q.movedTo}; its pod keeps its interface and address (CNI DEL still removes them); remove the quarantined record once the pod is gone`);
    }
    report.quarantined = quarantined;
    for (const p of problems) log.error({ dir: p.dir, error: p.error }, 'cannot restore endpoint state');
    const back: Endpoint[] = [];
    /** Interfaces of pods whose record could not be moved aside either: alive, and not to be swept. */
    const keep = new Set<string>();
    for (const recorded of endpoints) {
      let ep = recorded;
      // The record is a file: the kernel says whether the interface it names is this attachment's.
      const ownership = await datapath.verifyAttachment({ containerId: ep.containerId, ifName: ep.ifName, netns: ep.netns, hostIfName: ep.hostIfName, ...(ep.adopted ? { adopted: true } : {}) });
      if (ownership.kind === 'foreign') {
        await this.#quarantineRecord(ep, `${ownership.reason}: it is not that attachment's own interface, and is never touched`, report, keep);
        continue;
      }
      if (ownership.kind === 'owned' && (ownership.hostIfIndex !== ep.hostIfIndex || ownership.hostMac !== ep.hostMac)) {
        // Programs are attached and the endpoint map keyed by index: the kernel's, never the file's.
        log.warn({ endpoint: ep.id, hostIfName: ep.hostIfName, recorded: { index: ep.hostIfIndex, mac: ep.hostMac }, actual: { index: ownership.hostIfIndex, mac: ownership.hostMac } }, `endpoint ${ep.id}'s record names another index or MAC for ${ep.hostIfName} than the kernel; the kernel's are used`);
        ep = { ...ep, hostIfIndex: ownership.hostIfIndex, hostMac: ownership.hostMac };
      }
      const interrupted = ep.state === 'disconnecting';
      if (interrupted || ownership.kind === 'gone') {
        log.warn({ endpoint: ep.id, containerId: ep.containerId, interrupted }, interrupted ? 'finishing an interrupted endpoint deletion' : 'endpoint vanished while the agent was down; releasing it');
        if (interrupted) await this.#removePodNetwork(ep, '');
        await hooks.lease(ep).release();
        await store.remove(ep.id);
        report.released++;
        continue;
      }
      const claim = await hooks.reclaim?.(ep);
      if (claim?.conflict !== undefined) {
        report.conflicts.push({ endpoint: ep.id, containerId: ep.containerId, reason: claim.conflict });
        await this.#quarantineRecord(ep, `${claim.conflict}; the record's owner is ${ep.containerId} interface ${ep.ifName}`, report, keep);
        continue;
      }
      if (claim) {
        ep = { ...ep, addresses: claim.addresses };
        report.reclaimed.push(...claim.reclaimed);
      }
      const fresh: Endpoint = { ...ep, state: 'waiting-for-identity' };
      try {
        this.#register(fresh);
      } catch (err) {
        // Another record already claims its ID, attachment or an address (delegated IPAM, or two
        // records naming one address): the first one read keeps it, this one goes aside.
        if (!isEndpointError(err, EndpointErrorCode.CONFLICT)) throw err;
        report.conflicts.push({ endpoint: ep.id, containerId: ep.containerId, reason: err.message });
        await this.#quarantineRecord(ep, err.message, report, keep);
        continue;
      }
      await hooks.prepare?.(ep);
      const bound = await this.#binder.bind(fresh, ep.identity);
      if (ep.identity !== undefined && bound.identity !== ep.identity) log.warn({ endpoint: ep.id, was: ep.identity, now: bound.identity }, 'restored endpoint got a new identity');
      this.#update(bound);
      policy.upsertEndpoint({ id: ep.id, identity: bound.identity! });
      this.#setState(ep.id, 'waiting-to-regenerate');
      back.push(bound);
    }
    if (report.reclaimed.length > 0) {
      log.warn({ addresses: report.reclaimed }, `IPAM had lost ${report.reclaimed.length} address(es) of restored endpoints (kvstore state lost or rolled back); re-claimed them for their endpoints`);
    }
    const outcomes = await Promise.allSettled(back.map((ep) => this.#runtime.get(ep.id)!.queue.request()));
    for (const [i, ep] of back.entries()) {
      // A failed regeneration was logged and left the endpoint not-ready; its pod keeps what it had.
      if (outcomes[i]!.status === 'rejected') report.failed++;
      else report.restored++;
      await store.save(this.#registry.get(ep.id)!);
      // An agent killed between saving the endpoint and confirming IPAM must not let the address expire under it.
      const confirmed = await hooks.lease(ep).confirm();
      // Delegated addresses (ipamOwned false) have no allocator to confirm with until a CNI call names one.
      if (!confirmed && ep.ipamOwned) log.error({ endpoint: ep.id, containerId: ep.containerId, addresses: ep.addresses.map((a) => a.ip) }, `restored endpoint ${ep.id}'s addresses are not allocated to it: IPAM may hand them to another pod`);
    }
    await this.#sweepOrphans(report, keep, problems.length, hooks);
    if (endpoints.length > 0 || quarantined.length > 0) log.info(report, 'endpoints restored');
    return report;
  }

  /**
   * A record that reads fine but cannot be trusted goes to the quarantine,
   * with one error line naming the record, the endpoint, its attachment and
   * why: nothing of it is put in force and its pod is left alone (CNI DEL
   * still removes what is the attachment's own). The agent starts and serves
   * every other pod. When even the move fails, its interface is kept.
   */
  async #quarantineRecord(ep: Endpoint, reason: string, report: RestoreReport, keep: Set<string>): Promise<void> {
    const { store, log } = this.o;
    const path = store.recordPath(ep.id);
    const fields = { endpoint: ep.id, record: path, containerId: ep.containerId, ifName: ep.ifName, hostIfName: ep.hostIfName, netns: ep.netns, addresses: ep.addresses.map((a) => a.ip), reason };
    let q: QuarantinedRecord;
    try {
      q = await store.quarantine(ep, reason);
    } catch (err) {
      keep.add(ep.hostIfName).add(this.o.datapath.podHostIfName(ep.containerId, ep.ifName));
      log.error({ ...fields, err }, `endpoint record ${path} (endpoint ${ep.id}, container ${ep.containerId}) cannot be trusted: ${reason}; moving it to the quarantine failed, so it stays where it is and is not restored`);
      return;
    }
    report.quarantined.push(q);
    log.error({ ...fields, movedTo: q.movedTo }, `endpoint record ${path} (endpoint ${ep.id}, container ${ep.containerId}) cannot be trusted: ${reason}; quarantined to ${q.movedTo}, nothing of it is in force and its pod is left alone — delete the pod (CNI DEL) or fix the record, then remove the quarantined copy`);
  }

  /**
   * An agent killed mid-ADD leaves a veth pair no endpoint owns, with an
   * address IPAM holds provisionally until it expires; left in place, the
   * pod would keep an address the next pod can get. So every unowned pod
   * interface goes, pod side with it, except one a quarantined record may
   * own: one it names (or derives from its attachment) and, while some
   * quarantined record is illegible, one whose attachment IPAM holds an
   * address for permanently (a committed endpoint's). An interface whose
   * attachment IPAM holds only provisionally, or not at all, is never a
   * committed endpoint's, whatever the quarantine holds.
   */
  async #sweepOrphans(report: RestoreReport, keep: ReadonlySet<string>, unreadable: number, hooks: RestoreHooks): Promise<void> {
    const { datapath, store, log } = this.o;
    const holds = await store.quarantineHolds();
    const owned = new Set([...this.#registry.list().map((e) => e.hostIfName), ...keep, ...holds.hostIfNames, ...holds.attachments.map((a) => datapath.podHostIfName(a.containerId, a.ifName))]);
    const orphans = (await datapath.listPodHostInterfaces()).filter((name) => !owned.has(name));
    if (orphans.length === 0) return;
    const illegible = holds.illegible > 0 || unreadable > 0;
    const owners = illegible ? await hooks.addressOwners?.() : undefined;
    const permanent = new Set((owners ?? []).filter((o) => !o.provisional).map((o) => datapath.podHostIfName(o.containerId, o.ifName)));
    // Without IPAM's word (delegated IPAM, or no hook), an illegible record may own any of them.
    const mayBeQuarantined = (name: string) => illegible && (owners === undefined || permanent.has(name));
    const kept = orphans.filter(mayBeQuarantined);
    if (kept.length > 0) {
      report.orphansKept = kept;
      // Said loudly the start a record is quarantined (above); afterwards the health endpoint counts the records.
      log.info({ interfaces: kept, quarantinedRecords: holds.records }, 'pod interfaces no endpoint owns are kept: an unreadable endpoint record may own them');
    }
    for (const name of orphans.filter((n) => !mayBeQuarantined(n))) {
      log.warn({ interface: name }, 'removing pod interface no endpoint owns');
      await datapath.removeHostInterface(name);
      report.orphansRemoved.push(name);
    }
  }

  /** Stops reacting to policy and identity changes and waits for running regenerations. */
  async stop(): Promise<void> {
    for (const u of this.#unsubscribe.splice(0)) u();
    await Promise.all([...this.#runtime.values()].map((rt) => rt.queue.idle()));
  }

  // ---- internals -------------------------------------------------------------

  #refuseTaken(containerId: string, ifName: string): void {
    const taken = this.#registry.byContainer(containerId, ifName);
    if (taken) throw new EndpointError(EndpointErrorCode.CONFLICT, `container ${containerId} interface ${ifName} already has an endpoint (${taken.id})`);
  }

  /**
   * The endpoint of another attachment that holds the host interface name the
   * datapath derives for this one (an adopted endpoint may carry any name):
   * an ADD or DEL of this attachment must not replace or delete it.
   */
  #hostIfHolder(containerId: string, ifName: string): Endpoint | undefined {
    const name = this.o.datapath.podHostIfName(containerId, ifName);
    return this.#registry.list().find((e) => e.hostIfName === name && !(e.containerId === containerId && e.ifName === ifName));
  }

  #newModel(spec: NewEndpoint, id: number, net: { hostIfName: string; hostIfIndex: number; hostMac: string; podMac: string }): Endpoint {
    return {
      id,
      containerId: spec.containerId,
      ifName: spec.ifName,
      netns: spec.netns,
      ...(spec.networkName ? { networkName: spec.networkName } : {}),
      ...(spec.podNamespace ? { podNamespace: spec.podNamespace } : {}),
      ...(spec.podName ? { podName: spec.podName } : {}),
      labels: spec.labels.toStrings(),
      addresses: spec.addresses,
      hostIfName: net.hostIfName,
      hostIfIndex: net.hostIfIndex,
      hostMac: net.hostMac,
      podMac: net.podMac,
      mtu: spec.mtu,
      state: 'waiting-for-identity',
      ipamOwned: spec.ipamOwned,
      createdAt: new Date().toISOString(),
    };
  }

  /**
   * The end of a creation, shared by create and adopt: register, identity and
   * ipcache, policy, the first regeneration, persist, and confirm the
   * addresses last, so a crash before that leaves only provisional
   * allocations that expire by themselves. Undo steps go onto `undo`.
   */
  async #commit(ep: Endpoint, lease: AddressLease, undo: UndoList, timer = new StepTimer()): Promise<EndpointStatus> {
    const { store, policy } = this.o;
    this.#register(ep);
    undo.add(() => this.#forget(ep.id), 'unregister endpoint');
    undo.add(() => store.remove(ep.id), 'remove endpoint state');
    const bound = await this.#binder.bind(ep);
    timer.mark('identity');
    undo.add(async () => {
      this.#binder.withdraw(bound);
      await this.#binder.release(bound.identity!);
    }, 'release identity and ipcache entries');
    this.#update(bound);
    policy.upsertEndpoint({ id: ep.id, identity: bound.identity! });
    undo.add(() => policy.removeEndpoint(ep.id), 'remove endpoint policy');
    this.#setState(ep.id, 'waiting-to-regenerate');
    await this.#runtime.get(ep.id)!.queue.request();
    timer.mark('policy');
    const ready = this.#registry.get(ep.id)!;
    await store.save(ready);
    timer.mark('save');
    this.o.faultPoint?.('after-endpoint');
    if (!(await lease.confirm())) {
      // The undo list takes the endpoint back down; the address is left to whoever holds it now.
      throw new EndpointError(
        EndpointErrorCode.ADDRESSES_LOST,
        `the addresses of endpoint ${ep.id} (${ep.addresses.map((a) => a.ip).join(', ')}) are no longer allocated to it: the provisional allocation expired before the endpoint was ready (raise --ipam-expiration if the node is this slow)`,
      );
    }
    timer.mark('confirm');
    const rt = this.#runtime.get(ep.id);
    if (rt) rt.creationTimings = timer.timings();
    return this.status(ready);
  }

  /**
   * `netnsPath` comes from the caller, never from the endpoint's record: a
   * recorded /proc/<pid>/ns/net may name another process's namespace once the
   * pod's process is gone. Without one only the host end is deleted; the pod
   * end of the veth pair goes with it.
   */
  async #teardown(ep: Endpoint, netnsPath: string, lease: AddressLease): Promise<void> {
    const { store, policy, log } = this.o;
    const rt = this.#runtime.get(ep.id)!;
    const disconnecting: Endpoint = { ...ep, state: 'disconnecting' };
    this.#update(disconnecting);
    // Persisted, so an agent that dies from here on finishes the deletion when it restores.
    await store.save(disconnecting);
    await rt.queue.close();
    if (!rt.policyRemoved) {
      try {
        policy.removeEndpoint(ep.id);
      } catch (err) {
        // Never got that far (an endpoint restored without policy): nothing to remove.
        if (!(isPolicyError(err) && err.code === PolicyErrorCode.UNKNOWN_ENDPOINT)) throw err;
      }
      rt.policyRemoved = true;
    }
    this.#binder.withdraw(ep);
    const netns = await this.#teardownNetns(netnsPath);
    // Most of a DEL is the kernel deleting the veth (it waits out an RCU grace period):
    // the identity's and the addresses' releases, kvstore writes, run meanwhile. An address
    // handed to a new pod during that window is safe: its /32 host route replaces the old
    // one on the new device, and the kernel removes only the old device's routes. (The
    // reference bridge plugin releases its addresses before it deletes the veth at all.)
    const releaseIdentity = async () => {
      if (ep.identity === undefined || rt.identityReleased) return;
      await this.#releaseIdentity(ep);
      rt.identityReleased = true;
    };
    const outcomes = await Promise.allSettled([releaseIdentity(), this.#removePodNetwork(ep, netns), lease.release()]);
    for (const o of outcomes) if (o.status === 'rejected') throw o.reason;
    await store.remove(ep.id);
    await this.#forget(ep.id);
    log.info({ endpoint: ep.id, containerId: ep.containerId }, 'endpoint deleted');
  }

  /**
   * The datapath side of a teardown. An adopted endpoint's veth pair is its
   * creator's: only the host routes go, never the interface (whatever the
   * record names, tendril deletes no interface it did not create).
   */
  async #removePodNetwork(ep: Endpoint, netns: string): Promise<void> {
    const addresses = ep.addresses.map(podAddress);
    if (ep.adopted) await this.o.datapath.releaseAdoptedPod({ hostIfName: ep.hostIfName, addresses });
    // Only the name derived from the attachment, never the recorded one: a record is no proof of what an interface is.
    else await this.o.datapath.removePod({ containerId: ep.containerId, netns, ifName: ep.ifName, addresses });
  }

  /** Drops the endpoint's reference on its identity; one this node no longer holds must not stop a teardown. */
  async #releaseIdentity(ep: Endpoint): Promise<void> {
    try {
      await this.#binder.release(ep.identity!);
    } catch (err) {
      if (!(err instanceof IdentityError && err.code === IdentityErrorCode.NOT_ALLOCATED)) throw err;
      this.o.log.warn({ endpoint: ep.id, identity: ep.identity }, 'endpoint identity was not held; continuing');
    }
  }

  /** Every change of a registered endpoint goes through here, so state transitions are reported. */
  #update(ep: Endpoint): void {
    const from = this.#registry.get(ep.id)?.state;
    this.#registry.update(ep);
    if (from !== ep.state) this.#emit({ id: ep.id, from, to: ep.state });
  }

  #emit(change: EndpointStateChange): void {
    this.o.log.debug(change, 'endpoint state');
    for (const l of this.#stateListeners) l(change);
  }

  #register(ep: Endpoint): void {
    this.#registry.register(ep);
    this.#emit({ id: ep.id, from: undefined, to: ep.state });
    this.#runtime.set(ep.id, {
      queue: new RegenerationQueue(() => this.#regenerate(ep.id), `endpoint ${ep.id}`),
      policyRemoved: false,
      identityReleased: false,
    });
  }

  async #forget(id: number): Promise<void> {
    const rt = this.#runtime.get(id);
    this.#runtime.delete(id);
    const gone = this.#registry.remove(id);
    if (gone) this.#emit({ id, from: gone.state, to: 'disconnected' });
    await rt?.queue.close();
  }

  #setState(id: number, state: EndpointState): void {
    const ep = this.#registry.get(id);
    if (ep && ep.state !== state) this.#update({ ...ep, state });
  }

  /** A ready (or failed) endpoint waits for the regeneration just queued. */
  #markQueued(id: number): void {
    const state = this.#registry.get(id)?.state;
    if (state === 'ready' || state === 'not-ready') this.#setState(id, 'waiting-to-regenerate');
  }

  #onPolicyChange(change: PolicyChange): void {
    for (const id of change.endpoints) {
      const ep = this.#registry.get(id);
      const rt = this.#runtime.get(id);
      // An endpoint waiting for its identity is regenerated by the step that gives it one;
      // a disconnecting one is going away.
      if (!ep || !rt || ep.state === 'waiting-for-identity' || ep.state === 'disconnecting') continue;
      this.#markQueued(id);
      void rt.queue.request();
    }
  }

  /** One regeneration: the endpoint's current identity, addresses and policy map state, put in force. */
  async #regenerate(id: number): Promise<number> {
    const ep = this.#registry.get(id);
    const rt = this.#runtime.get(id);
    if (!ep || !rt) throw new EndpointError(EndpointErrorCode.NOT_FOUND, `endpoint ${id} not found`);
    if (ep.state !== 'waiting-for-identity' && ep.state !== 'disconnecting') this.#setState(id, 'regenerating');
    const started = performance.now();
    try {
      const snap = this.o.policy.snapshot(id);
      if (snap.error) throw new EndpointError(EndpointErrorCode.REGENERATION_FAILED, `endpoint ${id}: ${snap.error.message}`, { cause: snap.error });
      await this.o.datapath.syncEndpoint({
        id,
        identity: snap.identity,
        hostIfName: ep.hostIfName,
        hostIfIndex: ep.hostIfIndex,
        hostMac: ep.hostMac,
        podMac: ep.podMac,
        addresses: ep.addresses.map(podAddress),
        policy: { revision: snap.revision, entries: snap.entries, ...(snap.stagedEntries ? { stagedEntries: snap.stagedEntries } : {}) },
      });
      rt.realized = snap.revision;
      delete rt.error;
      this.#settle(id, rt, 'ready');
      this.o.onRegenerated?.('success', (performance.now() - started) / 1000);
      this.o.log.debug({ endpoint: id, policyRevision: snap.revision, entries: snap.entries.length }, 'endpoint regenerated');
      return snap.revision;
    } catch (err) {
      rt.error = err instanceof Error ? err.message : String(err);
      this.#settle(id, rt, 'not-ready');
      this.o.onRegenerated?.('error', (performance.now() - started) / 1000);
      this.o.log.error({ endpoint: id, err }, 'endpoint regeneration failed');
      throw err;
    }
  }

  #settle(id: number, rt: Runtime, outcome: 'ready' | 'not-ready'): void {
    if (this.#registry.get(id)?.state !== 'regenerating') return;
    this.#setState(id, rt.queue.pending ? 'waiting-to-regenerate' : outcome);
  }
}
