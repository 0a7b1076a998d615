// flows-memory's measurement, in a process of its own (run with --expose-gc):
// a FlowRing filled with distinct flows recorded as the agent's monitor hub
// records them (header read, numbers resolved by reference), heap and RSS
// before and after. Prints one JSON line.
import { EventType, PolicyVerdict, TracePoint, TrafficDirection } from '../src/datapath/bpf/constants.js';
import { datapathEvent, type DatapathEvent } from '../src/datapath/bpf/layout.js';
import { ruleCookie } from '../src/datapath/bpf/ruleCookie.js';
import { encode } from '../src/datapath/kernel/bpf/codec.js';
import { FlowRing } from '../src/flow/index.js';
import { agentMonitorContext, captureRefs, InterfaceNames, newEventRefs, newRecordHeader, policyRuleOrigins, readRecordHeader } from '../src/monitor/index.js';
import { parseIp } from '../src/netip/index.js';
import { parsePolicyText } from '../src/policy/index.js';

const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with --expose-gc');

const FLOWS = Number(process.argv[2] ?? 100_000);
const PODS = 200;
const NAMESPACES = 20;

/** A pod's identity labels as Kubernetes gives them (the identity-relevant ones). */
const labels = new Map<number, string[]>();
const pods = new Map<number, { namespace: string; name: string }>();
for (let i = 0; i < PODS; i++) {
  const ns = `team-${i % NAMESPACES}`;
  const app = `svc-${i % 50}`;
  labels.set(30_000 + i, [`k8s:app=${app}`, `k8s:io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name=${ns}`, 'k8s:io.cilium.k8s.policy.cluster=default', 'k8s:io.cilium.k8s.policy.serviceaccount=default', `k8s:io.kubernetes.pod.namespace=${ns}`]);
  pods.set(100 + i, { namespace: ns, name: `${app}-7d9f8b6c5-${(i * 7919).toString(36).padStart(5, 'x').slice(-5)}` });
}
// One NetworkPolicy per namespace, an ingress rule per app.
const policies = parsePolicyText(
  Array.from({ length: NAMESPACES }, (_, n) =>
    JSON.stringify({
      apiVersion: 'networking.k8s.io/v1',
      kind: 'NetworkPolicy',
      metadata: { name: `allow-apps`, namespace: `team-${n}` },
      spec: { podSelector: {}, policyTypes: ['Ingress'], ingress: Array.from({ length: 5 }, (_, r) => ({ from: [{ podSelector: { matchLabels: { app: `svc-${r}` } } }], ports: [{ port: 8080 + r, protocol: 'TCP' }] })) },
    }),
  ).join('\n---\n'),
);
const cookies = policyRuleOrigins(policies).map(ruleCookie);
const interfaces = new InterfaceNames(async () => Array.from({ length: PODS }, (_, i) => ({ index: 1000 + i, name: `lxc${(i * 2654435761).toString(16).slice(0, 11)}` })));
await interfaces.refresh();
const context = agentMonitorContext({ identityLabels: (id) => labels.get(id), policies: () => policies, policyRevision: () => 1, interfaces, endpointPod: (id) => pods.get(id) });

let seed = 42;
const rand = (n: number) => {
  seed = (Math.imul(seed, 1103515245) + 12345) & 0x7fffffff;
  return seed % n;
};

/** The i-th record: a verdict or a trace of a new connection between two pods, from a random port. */
function record(i: number): Buffer {
  const [src, dst] = [rand(PODS), rand(PODS)];
  const trace = i % 2 === 1;
  const e: DatapathEvent = {
    type: trace ? EventType.TRACE : EventType.POLICY_VERDICT,
    subtype: trace ? TracePoint.TO_ENDPOINT : PolicyVerdict.ALLOWED,
    direction: trace ? TrafficDirection.NONE : TrafficDirection.INGRESS,
    proto: 6,
    tcpFlags: 0x02,
    service: 0,
    ifindex: 1000 + dst,
    srcIdentity: 30_000 + src,
    dstIdentity: 30_000 + dst,
    srcEndpoint: 100 + src,
    dstEndpoint: 100 + dst,
    cookie: trace ? 0 : cookies[rand(cookies.length)]!,
    origLen: 74,
    sport: 32768 + rand(28000),
    dport: 8080 + rand(5),
    saddr: parseIp(`10.0.${src >> 8}.${src & 255}`),
    daddr: parseIp(`10.0.${dst >> 8}.${dst & 255}`),
    tsNs: process.hrtime.bigint(),
  };
  return encode(datapathEvent, e);
}

const ring = new FlowRing({ capacity: FLOWS, node: 'tdl-bench' });
gc();
gc();
const before = process.memoryUsage();
const started = performance.now();
const header = newRecordHeader();
const refs = newEventRefs();
for (let i = 0; ring.stats().size < FLOWS && i < FLOWS * 2; i++) {
  const r = record(i);
  if (readRecordHeader(r, header)) ring.record(r, header, captureRefs(header, context, refs));
}
const seconds = (performance.now() - started) / 1000;
gc();
gc();
const after = process.memoryUsage();
process.stdout.write(`${JSON.stringify({ flows: FLOWS, held: ring.stats().size, heapBytes: after.heapUsed - before.heapUsed, rssBytes: after.rss - before.rss, seconds })}\n`);
