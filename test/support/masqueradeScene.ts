// The world of a masquerade test: one node with the eBPF datapath, two pods,
// and an outside host behind the node's masquerade device. The outside host
// has no route to the pod CIDR: a reply reaches a pod only when the node
// translated the request, so a flow that leaked out with the pod's own address
// goes unanswered instead of passing.
//
//   pod client-a ─┐                          ┌ outside (eth0): 10.197.0.10/24 (crr server, service agent)
//   pod client-b ─┴─ node (agent, BPF) tdlext0 10.197.0.1/24 ───┤ and 10.197.1.1 … 10.197.1.<extra>/24 (crr server)
//
// On IPv6 (family 6 or 'dual', with --ipv6-masquerade) every address also has
// its family.ts mirror (fd74:10:197::1/120 on the node's device, …), the pods
// get IPv6 addresses, and the outside has no route to their IPv6 CIDR either.
import type { MetricsRow } from '../../src/datapath/bpf/inspect.js';
import { type Family, hostPort, type IpFamily, ipIn, podCidrsOf, versionsOf } from './family.js';
import { CrrServer, type CrrClientOptions, type CrrResult, runCrrClient } from './crr.js';
import { addPod, type DatapathNode, type Pod, startDatapathNode } from './datapathNode.js';
import { bpfMetrics, dropCounts, tcpCounters, type TcpCounters } from './datapathObserve.js';
import type { NetnsPool } from './netns.js';
import { run, runOk } from './run.js';
import { ServiceAgentProcess, type SessionResult, type ShotResult } from './serviceProcess.js';

/** The node's address on its masquerade device (what the outside sees as the source), and the outside host's. */
export const MASQ_NODE_IP = '10.197.0.1';
export const MASQ_OUTSIDE_IP = '10.197.0.10';
/** The outside host's further addresses (`extraOutsideAddresses` of them), routed by the node through it. */
export const MASQ_EXTRA_NET = '10.197.1';
/** The node's device towards the outside: it has a global address, so the agent finds it and masquerades on it. */
export const MASQ_DEVICE = 'tdlext0';
/** The crr server's port on every outside address. */
export const CRR_PORT = 7000;
/** The service agent's TCP and UDP ports on the outside host (an answer names the address it saw the client as). */
export const ECHO_TCP_PORT = 8080;
export const ECHO_UDP_PORT = 5353;
export const POD_NAMES = ['client-a', 'client-b'] as const;
export type PodName = (typeof POD_NAMES)[number];

export interface MasqueradeSceneOptions {
  nodeName: string;
  /** A /24 (the router takes .1). */
  podCidr: string;
  /** Agent flags beyond the scene's own, e.g. ['--bpf-nat-max', '64', '--bpf-ct-tcp-max', '1024']. */
  agentArgs?: string[];
  /** How many addresses besides MASQ_OUTSIDE_IP the outside host holds (10.197.1.1 …), each with a crr server (default 0, at most 250). */
  extraOutsideAddresses?: number;
  /** The pods' address family (default 4); IPv6 runs the agent with --ipv6-masquerade. */
  family?: Family;
  /** The agent's default map sizes (AgentProcessOptions.defaultMapSizes): for traffic that fills the test sizes. */
  defaultMapSizes?: boolean;
}

/** Connections held open from a pod, each answering again on demand. */
export interface HeldConnections {
  /** What opening each connection gave (its first round). */
  opened: SessionResult[];
  /** One more request/answer round on every connection that opened; what each gave. */
  echoAll(timeoutMs?: number): Promise<SessionResult[]>;
  close(): Promise<void>;
}

export interface MasqueradeScene {
  node: DatapathNode;
  pods: Record<PodName, Pod>;
  /** The outside's addresses: `addresses` IPv4's (as before), `addressesOf` either version's (MASQ_OUTSIDE_IP's mirror first). */
  outside: { netns: string; netnsPath: string; addresses: string[]; addressesOf(v: IpFamily): string[] };
  /** The IP versions the pods have (family.ts versionsOf). */
  versions: IpFamily[];
  /** The node's address on its masquerade device in a version: what the outside sees as the source. */
  nodeIp(v: IpFamily): string;
  /** The crr client run in a pod; destinations default to MASQ_OUTSIDE_IP:CRR_PORT. */
  crr(pod: PodName, opts: Omit<CrrClientOptions, 'destinations'> & { destinations?: string[] }): Promise<CrrResult>;
  /** `count` TCP connections from a pod to the outside's echo port (dst MASQ_OUTSIDE_IP unless given), opened one after the other and held (a connection expected to be refused costs its whole timeoutMs, default 2000). */
  holdConnections(pod: PodName, count: number, opts?: { dst?: string; timeoutMs?: number }): Promise<HeldConnections>;
  /**
   * `count` UDP datagrams from a pod to MASQ_OUTSIDE_IP's echo port, each from a new source port, each waiting for its answer.
   * (Only that address: the echo server's socket is unbound, so it answers from the outside's primary address.)
   */
  udpShots(pod: PodName, count: number, opts?: { concurrency?: number; timeoutMs?: number; version?: IpFamily }): Promise<ShotResult[]>;
  /** `ping` from a pod: whether every echo was answered, and ping's output. */
  ping(pod: PodName, dst: string, count?: number): Promise<{ ok: boolean; output: string }>;
  /** The datapath's drop counters (`tendril bpf metrics`), packets per `REASON/direction`, forwarded packets left out. */
  drops(): Promise<Record<string, number>>;
  metrics(): Promise<MetricsRow[]>;
  /** TCP counters of a pod's namespace (SYN retransmits: a connection attempt lost on the way). */
  tcpCounters(pod: PodName | 'outside'): Promise<TcpCounters>;
  cleanup(): Promise<void>;
}

/** Drop counters that rose between two readings of `drops()`, by how much. */
export function dropsBetween(before: Record<string, number>, after: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(after)) if (v > (before[k] ?? 0)) out[k] = v - (before[k] ?? 0);
  return out;
}

export async function startMasqueradeScene(pool: NetnsPool, opts: MasqueradeSceneOptions): Promise<MasqueradeScene> {
  const extra = opts.extraOutsideAddresses ?? 0;
  if (!Number.isInteger(extra) || extra < 0 || extra > 250) throw new Error(`extraOutsideAddresses must be 0..250, not ${extra}`);
  const addresses = [MASQ_OUTSIDE_IP, ...Array.from({ length: extra }, (_, i) => `${MASQ_EXTRA_NET}.${i + 1}`)];
  const family = opts.family ?? 4;
  const versions = versionsOf(family);
  const v6 = versions.includes(6);
  const addressesOf = (v: IpFamily) => addresses.map((a) => ipIn(v, a));
  const agents: ServiceAgentProcess[] = [];
  const servers: CrrServer[] = [];
  let node: DatapathNode | undefined;
  const cleanup = async () => {
    for (const s of servers.splice(0)) await s.stop();
    for (const a of agents.splice(0)) await a.stop();
    await node?.cleanup();
    await pool.cleanup();
  };
  try {
    const out = await pool.add('out');
    const agentArgs = [...(v6 ? ['--ipv6-masquerade'] : []), ...(opts.agentArgs ?? [])];
    node = await startDatapathNode(pool, {
      nodeName: opts.nodeName,
      podCidr: opts.podCidr,
      ...(family !== 4 ? { podCidrs: podCidrsOf(family, opts.podCidr) } : {}),
      ...(agentArgs.length > 0 ? { extraArgs: agentArgs } : {}),
      ...(opts.defaultMapSizes === true ? { defaultMapSizes: true } : {}),
      // Before the agent starts: it takes its devices (and their addresses) from what is there.
      beforeStart: async (n) => {
        await runOk(['ip', '-n', n, 'link', 'add', MASQ_DEVICE, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', out.path]);
        await runOk(['ip', '-n', n, 'addr', 'add', `${MASQ_NODE_IP}/24`, 'dev', MASQ_DEVICE]);
        await runOk(['ip', '-n', n, 'link', 'set', MASQ_DEVICE, 'up']);
        await runOk(['ip', '-n', out.name, 'addr', 'add', `${MASQ_OUTSIDE_IP}/24`, 'dev', 'eth0']);
        if (extra > 0) {
          await runOk(['ip', '-n', out.name, '-batch', '-'], { input: addresses.slice(1).map((a) => `addr add ${a}/24 dev eth0\n`).join('') });
          await runOk(['ip', '-n', n, 'route', 'add', `${MASQ_EXTRA_NET}.0/24`, 'via', MASQ_OUTSIDE_IP]);
        }
        if (v6) {
          // nodad: usable at once (the agent takes a device's IPv6 address only once it is no longer tentative).
          await runOk(['ip', '-n', n, 'addr', 'add', `${ipIn(6, MASQ_NODE_IP)}/120`, 'dev', MASQ_DEVICE, 'nodad']);
          const v6Addresses = addressesOf(6);
          await runOk(['ip', '-n', out.name, '-batch', '-'], { input: v6Addresses.map((a, i) => `addr add ${a}/${i === 0 ? 120 : 128} dev eth0 nodad\n`).join('') });
          if (extra > 0) await runOk(['ip', '-n', n, '-6', 'route', 'add', `${ipIn(6, `${MASQ_EXTRA_NET}.0`)}/120`, 'via', ipIn(6, MASQ_OUTSIDE_IP)]);
        }
        await runOk(['ip', '-n', out.name, 'link', 'set', 'eth0', 'up']);
      },
    });
    const n = node;
    // A server that keeps up: the datapath must be what limits a run.
    for (const [k, v] of [
      ['net.core.somaxconn', '8192'],
      ['net.ipv4.tcp_max_syn_backlog', '8192'],
    ]) {
      await runOk(['nsenter', `--net=${out.path}`, '--', 'sysctl', '-q', '-w', `${k}=${v}`]);
    }
    servers.push(await CrrServer.start(out.path, [`0.0.0.0:${CRR_PORT}`, ...(v6 ? [`[::]:${CRR_PORT}`] : [])]));
    agents.push(await ServiceAgentProcess.start(out.path, { name: 'outside', tcpPorts: [ECHO_TCP_PORT], udpPorts: [ECHO_UDP_PORT], versions: v6 ? [4, 6] : [4] }));
    const pods = {} as Record<PodName, Pod>;
    const podAgents = {} as Record<PodName, ServiceAgentProcess>;
    for (const name of POD_NAMES) {
      pods[name] = await addPod(pool, n, { name, namespace: 'tdl-masq', labels: { app: name } });
      const a = await ServiceAgentProcess.start(pods[name].netnsPath, { name, tcpPorts: [], udpPorts: [] });
      agents.push(a);
      podAgents[name] = a;
    }
    // The node resolves a pod's address from its lxc device's link-local one, tentative for a second or two (DAD):
    // until then the first reply towards a pod waits on a retried solicitation, IPv6's alone.
    if (v6) await untilNoTentativeAddress(n.node);
    return {
      node: n,
      pods,
      outside: { netns: out.name, netnsPath: out.path, addresses, addressesOf },
      versions,
      nodeIp: (v) => ipIn(v, MASQ_NODE_IP),
      crr: (pod, o) => runCrrClient(pods[pod].netnsPath, { ...o, destinations: o.destinations ?? [hostPort(MASQ_OUTSIDE_IP, CRR_PORT)] }),
      holdConnections: async (pod, count, o = {}) => {
        const agent = podAgents[pod];
        const target = { dst: o.dst ?? MASQ_OUTSIDE_IP, port: ECHO_TCP_PORT };
        const held: Array<{ handle: number; session: SessionResult }> = [];
        for (let i = 0; i < count; i++) held.push(await agent.tcpOpen(target, o.timeoutMs ?? 2000));
        const open = held.filter((h) => h.session.outcome === 'open');
        return {
          opened: held.map((h) => h.session),
          echoAll: async (timeoutMs = 2000) => {
            const out2: SessionResult[] = [];
            for (const h of open) out2.push(await agent.tcpAsk(h.handle, timeoutMs));
            return out2;
          },
          close: async () => {
            for (const h of held) await agent.tcpClose(h.handle);
          },
        };
      },
      udpShots: (pod, count, o = {}) =>
        podAgents[pod].udpShots({ dst: ipIn(o.version ?? 4, MASQ_OUTSIDE_IP), port: ECHO_UDP_PORT }, { count, ...(o.concurrency !== undefined ? { concurrency: o.concurrency } : {}), ...(o.timeoutMs !== undefined ? { timeoutMs: o.timeoutMs } : {}) }),
      ping: async (pod, dst, count = 3) => {
        const r = await run(['nsenter', `--net=${pods[pod].netnsPath}`, '--', 'ping', '-n', '-c', String(count), '-i', '0.2', '-W', '1', dst]);
        return { ok: r.code === 0, output: r.stdout + r.stderr };
      },
      drops: async () => dropCounts(await bpfMetrics(n)),
      metrics: () => bpfMetrics(n),
      tcpCounters: (pod) => tcpCounters(pod === 'outside' ? out.path : pods[pod].netnsPath),
      cleanup,
    };
  } catch (err) {
    await cleanup();
    throw err;
  }
}

/** Waits (at most 5 s) until no IPv6 address of the namespace is tentative (duplicate address detection done). */
async function untilNoTentativeAddress(netns: string): Promise<void> {
  const deadline = Date.now() + 5000;
  for (;;) {
    const tentative = (await runOk(['ip', '-n', netns, '-6', '-o', 'addr', 'show', 'tentative'])).trim();
    if (tentative === '') return;
    if (Date.now() > deadline) throw new Error(`IPv6 addresses still tentative in ${netns} after 5 s: ${tentative}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
