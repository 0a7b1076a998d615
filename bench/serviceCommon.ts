// What the service benchmarks (service-scale, service-throughput, service-program)
// share: the bench's services (ClusterIPs, backends), programming them through the
// agent's API as a controller would (a bounded number of requests in flight), the
// kube-proxy-style iptables baseline (its ruleset and its routed-veth pods), and
// the agent's memory (RSS and its load-balancing maps).
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { AgentClient } from '../src/client/agentClient.js';
import { MapName } from '../src/datapath/bpf/constants.js';
import type { ServiceSpec } from '../src/service/types.js';
import { exec } from './benchProcess.js';
import { inNs } from './policyDatapath.js';

export interface BenchBackend {
  ip: string;
  port: number;
}

/** One ClusterIP service of a bench: API ID, frontend, backends. */
export interface BenchService {
  id: number;
  ip: string;
  port: number;
  backends: BenchBackend[];
}

/** Service `id`'s ClusterIP, in 10.96.0.0/16 (every ID 1..65535 has its own). */
export const clusterIp = (id: number): string => `10.96.${id >> 8}.${id & 255}`;

/**
 * Backend `j` of service `id` when it is not a real pod: an address of
 * 10.160.0.0/11 that no namespace of the bench has (a host byte of 1..250, so
 * never a network or broadcast address), distinct for every (id, j), as pods are.
 */
export function placeholderBackend(id: number, j: number, port: number): BenchBackend {
  const n = id * 3 + j;
  return { ip: `10.${160 + Math.floor(n / 62_500)}.${Math.floor(n / 250) % 250}.${(n % 250) + 1}`, port };
}

/** Service `id`'s IPv6 ClusterIP, in fd00:96::/112 (every ID 1..65535 has its own). */
export const clusterIp6 = (id: number): string => `fd00:96::${id.toString(16)}`;

/** placeholderBackend in IPv6: an address of fd00:160::/64 no namespace of the bench has, distinct for every (id, j). */
export function placeholderBackend6(id: number, j: number, port: number): BenchBackend {
  return { ip: `fd00:160::${(id * 3 + j + 1).toString(16)}`, port };
}

/**
 * benchServices in IPv6, IDs offset by `firstId - 1` (service IDs are one
 * number space across families: a node holding both sets needs them apart);
 * the last one (the measured one) is backed by `real`.
 */
export function benchServices6(count: number, port: number, backendPort: number, real: BenchBackend[], firstId: number): BenchService[] {
  const out: BenchService[] = [];
  for (let i = 1; i <= count; i++) {
    const backends = i === count ? real : [0, 1, 2].map((j) => placeholderBackend6(i, j, backendPort));
    out.push({ id: firstId + i - 1, ip: clusterIp6(i), port, backends });
  }
  return out;
}

/**
 * `count` services with IDs 1..count, each on port `port` with 3 backends on
 * `backendPort`; the last one (ID `count`: the one a bench measures, and the last
 * rule of the baseline's service chain) is backed by `real` when given, the
 * others by placeholder addresses.
 */
export function benchServices(count: number, port: number, backendPort: number, real?: BenchBackend[]): BenchService[] {
  const out: BenchService[] = [];
  for (let id = 1; id <= count; id++) {
    const backends = id === count && real ? real : [0, 1, 2].map((j) => placeholderBackend(id, j, backendPort));
    out.push({ id, ip: clusterIp(id), port, backends });
  }
  return out;
}

/** The PUT /service/{id} body of a bench service: TCP ClusterIP, active backends of weight 1, the API's defaults spelled out. */
export function serviceSpec(s: BenchService): ServiceSpec {
  return {
    'frontend-address': { ip: s.ip, port: s.port, protocol: 'TCP' },
    'backend-addresses': s.backends.map((b) => ({ ip: b.ip, port: b.port, weight: 1, state: 'active' })),
    flags: { type: 'ClusterIP', trafficPolicy: 'Cluster', sessionAffinity: false, sessionAffinityTimeout: 10800 },
  };
}

/**
 * PUTs every service, `concurrency` requests in flight (a controller's worker
 * pool), each request waiting for the agent's answer; resolves with the wall
 * time in ms once the last one is answered, each request's own time pushed to
 * `requestMs` when given. The first refusal fails the run.
 */
export async function programServices(client: AgentClient, services: readonly BenchService[], concurrency = 16, requestMs?: number[]): Promise<number> {
  let next = 0;
  let failed: Error | undefined;
  const t0 = performance.now();
  const worker = async () => {
    while (next < services.length && !failed) {
      const s = services[next++]!;
      try {
        const r0 = performance.now();
        await client.putService(s.id, serviceSpec(s));
        requestMs?.push(performance.now() - r0);
      } catch (err) {
        failed ??= new Error(`PUT /service/${s.id}: ${(err as Error).message}`);
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  if (failed) throw failed;
  return performance.now() - t0;
}

/**
 * The same services through PATCH /service in batches of `perBatch` (the
 * document's most), `inFlight` batches at a time so the agent parses the next
 * while it writes one; the wall time in ms once the last is answered. A change
 * that failed fails the run.
 */
export async function applyServicesInBatches(client: AgentClient, services: readonly BenchService[], perBatch = 250, inFlight = 2): Promise<number> {
  const batches: BenchService[][] = [];
  for (let i = 0; i < services.length; i += perBatch) batches.push(services.slice(i, i + perBatch));
  let next = 0;
  const t0 = performance.now();
  const worker = async () => {
    while (next < batches.length) {
      const batch = batches[next++]!;
      const r = await client.applyServices({ changes: batch.map((s) => ({ upsert: { ...serviceSpec(s), id: s.id } })) });
      const failed = r.results.find((x) => x.result === 'failed');
      if (failed) throw new Error(`PATCH /service: service ${failed.id}: ${failed.error?.code}: ${failed.error?.message}`);
    }
  };
  await Promise.all(Array.from({ length: inFlight }, worker));
  return performance.now() - t0;
}

/** What GET /service says of the services: how many, and how many the datapath holds as they are. */
export async function serviceCounts(client: AgentClient): Promise<{ services: number; realized: number }> {
  const list = await client.listServices();
  return { services: list.length, realized: list.filter((s) => s.realized).length };
}

/**
 * iptables-restore input for the baseline, shaped like kube-proxy's iptables mode
 * (nat table; our own chain names): PREROUTING and OUTPUT jump to a services
 * chain with one rule per service (`-d <ClusterIP> -p tcp --dport <port>`), in
 * the order given, each jumping to the service's chain; that chain picks an
 * endpoint with `-m statistic --mode random --probability 1/(n-i)` rules (the last
 * endpoint unconditional) jumping to per-endpoint chains, which mark hairpin
 * traffic for masquerade and DNAT to the endpoint. POSTROUTING masquerades what
 * was marked. The first packet of every connection walks the services chain
 * until its service's rule: the service given last walks all of them.
 */
export function kubeProxyStyleRuleset(services: readonly BenchService[]): string {
  const chains = ['TDL-SERVICES', 'TDL-POSTROUTING', 'TDL-MARK-MASQ'];
  const rules: string[] = [
    '-A PREROUTING -j TDL-SERVICES',
    '-A OUTPUT -j TDL-SERVICES',
    '-A POSTROUTING -j TDL-POSTROUTING',
    '-A TDL-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN',
    '-A TDL-POSTROUTING -j MARK --xor-mark 0x4000',
    '-A TDL-POSTROUTING -j MASQUERADE',
    '-A TDL-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000',
  ];
  for (const s of services) rules.push(`-A TDL-SERVICES -d ${s.ip}/32 -p tcp -m tcp --dport ${s.port} -j TDL-SVC-${s.id}`);
  for (const s of services) {
    chains.push(`TDL-SVC-${s.id}`);
    const n = s.backends.length;
    s.backends.forEach((b, i) => {
      const sep = `TDL-SEP-${s.id}-${i}`;
      chains.push(sep);
      rules.push(i < n - 1 ? `-A TDL-SVC-${s.id} -m statistic --mode random --probability ${(1 / (n - i)).toFixed(11)} -j ${sep}` : `-A TDL-SVC-${s.id} -j ${sep}`);
      rules.push(`-A ${sep} -s ${b.ip}/32 -j TDL-MARK-MASQ`, `-A ${sep} -p tcp -m tcp -j DNAT --to-destination ${b.ip}:${b.port}`);
    });
  }
  return ['*nat', ':PREROUTING ACCEPT [0:0]', ':INPUT ACCEPT [0:0]', ':OUTPUT ACCEPT [0:0]', ':POSTROUTING ACCEPT [0:0]', ...chains.map((c) => `:${c} - [0:0]`), ...rules, 'COMMIT', ''].join('\n');
}

/**
 * Pods of the baseline: each namespace in `pods` (existing, loopback up) gets a
 * veth pair to `node`, 10.<octet>.<k+1>.2/24 behind the node's 10.<octet>.<k+1>.1,
 * and its default route through the node, which forwards — a routed-veth node
 * like tendril's, with no eBPF. Resolves with the pods' addresses.
 */
export async function routedVethPods(node: string, pods: readonly string[], octet: number): Promise<string[]> {
  await exec(inNs(node, ['sysctl', '-q', '-w', 'net.ipv4.ip_forward=1']));
  const ips: string[] = [];
  for (const [k, ns] of pods.entries()) {
    const [gw, ip, hostIf] = [`10.${octet}.${k + 1}.1`, `10.${octet}.${k + 1}.2`, `vpod${k}`];
    await exec(['ip', '-n', node, 'link', 'add', hostIf, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', `/var/run/netns/${ns}`]);
    await exec(['ip', '-n', node, 'addr', 'add', `${gw}/24`, 'dev', hostIf]);
    await exec(['ip', '-n', node, 'link', 'set', hostIf, 'up']);
    await exec(['ip', '-n', ns, 'addr', 'add', `${ip}/24`, 'dev', 'eth0']);
    await exec(['ip', '-n', ns, 'link', 'set', 'eth0', 'up']);
    await exec(['ip', '-n', ns, 'route', 'add', 'default', 'via', gw]);
    ips.push(ip);
  }
  return ips;
}

/** A process's resident memory in bytes (VmRSS of /proc/<pid>/status). */
export async function rssBytes(pid: number): Promise<number> {
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(await readFile(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no VmRSS in /proc/${pid}/status`);
  return Number(m[1]) * 1024;
}

/** The load-balancing maps the agent pins (Maglev tables are inner maps of LB_MAGLEV, counted apart). */
export const LB_MAPS = [MapName.LB_SERVICES, MapName.LB_BACKENDS, MapName.LB_REVNAT, MapName.LB_AFFINITY, MapName.LB_MAGLEV, MapName.LB_MEMBERS] as const;

/**
 * Memory the kernel charges each pinned load-balancing map of an agent (bpftool's
 * bytes_memlock: the map's fdinfo memlock, which kernels since 6.4 compute from
 * what the map actually holds, so a hash map allocated on use grows with its
 * entries). A map the agent has not pinned is left out.
 */
export async function lbMapsMemory(bpffsRoot: string): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const name of LB_MAPS) {
    try {
      const m = JSON.parse(await exec(['bpftool', 'map', 'show', 'pinned', join(bpffsRoot, 'tendril', name), '-j'])) as { bytes_memlock?: number };
      out[name] = m.bytes_memlock ?? 0;
    } catch {
      // not pinned by this agent
    }
  }
  return out;
}

export const mib = (bytes: number): string => `${(bytes / 1024 / 1024).toFixed(1)} MiB`;

/**
 * Runs `cleanup` (once) when the bench is interrupted (SIGINT, SIGTERM) and then
 * exits, so namespaces, pins and agents do not outlive an interrupted run as they
 * would if only `finally` blocks cleaned up; the returned function removes the
 * handlers once the bench has cleaned up itself.
 */
export function cleanupOnSignal(cleanup: () => Promise<void>): () => void {
  const handler = (signal: NodeJS.Signals) => {
    console.error(`bench: ${signal}, cleaning up`);
    void cleanup().finally(() => process.exit(signal === 'SIGINT' ? 130 : 143));
  };
  process.once('SIGINT', handler);
  process.once('SIGTERM', handler);
  return () => {
    process.off('SIGINT', handler);
    process.off('SIGTERM', handler);
  };
}

/** `fn` made safe to call more than once (from `finally` and from a signal): the first call's promise. */
export function once(fn: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | undefined;
  return () => (running ??= fn());
}

/**
 * Pins every process in namespace `ns` (all threads) to `cpu`. On a machine of a
 * few CPUs, where the scheduler happens to put a client and its server (same CPU
 * or not) changes a connection's latency more than what a bench compares; pinning
 * every series' clients to one CPU and servers to another gives them all the same
 * placement.
 */
export async function pinNamespaceProcesses(ns: string, cpu: number): Promise<void> {
  const pids = (await exec(['ip', 'netns', 'pids', ns])).split('\n').filter((p) => /^\d+$/.test(p));
  for (const pid of pids) await exec(['taskset', '-a', '-p', '-c', String(cpu), pid]);
}
