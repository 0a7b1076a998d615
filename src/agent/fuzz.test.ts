// Fuzzes the agent's API and its CNI handler (POST /v1/cni) with fast-check:
// a real agent on the observed fake datapath, every response checked against
// api/openapi.yaml, and after every call the invariants a careless or hostile
// caller must never break:
//   - no 5xx (nor CNI code 999) for a client's error;
//   - a refused call creates and deletes nothing: links, host routes, the
//     node's addresses, endpoints, IPAM allocations;
//   - no interface is deleted that the agent does not own (one of an endpoint
//     the call removed, or the call's own attachment's leftovers), and the
//     node's own links and other software's never;
//   - a GC of another network deletes none of this network's endpoints;
//   - every endpoint has its host link, its pod side and its addresses (no
//     two share one), none carries a reserved identity or label, no lxc link
//     lacks an endpoint, and the router's address stays allocated.
// Calls are generated from a seed and run in sequence against one agent, so
// state accumulates and a violation is reproduced by TENDRIL_FUZZ_SEED (and
// the call printed with it). TENDRIL_FUZZ_RUNS raises the number of calls.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import fc from 'fast-check';
import { VALIDATE_RESPONSES_ENV } from '../api/types.js';
import { CniError } from '../cni/errors.js';
import { AgentClient, AgentResponseError, AgentUnreachableError } from '../client/agentClient.js';
import { hostInterfaceName } from '../datapath/linux/links.js';
import { ReservedIdentity } from '../identity/constants.js';
import { linkKey, type LinkKey, type ObservedNodeAgent, startObservedNodeAgent } from './testing/observedDatapath.js';

const RUNS = Number(process.env.TENDRIL_FUZZ_RUNS ?? 400);
const SEED = Number(process.env.TENDRIL_FUZZ_SEED ?? Date.now() % 2 ** 31);
const NET = 'tdlfuzz';
const POD_CIDR = '10.77.0.0/22';
const PODS = [0, 1, 2, 3, 4, 5, 6].map((i) => `/var/run/netns/tdlfz${i}`);
const FIFO = '/var/run/netns/tdlfzfifo';
const MISSING = '/var/run/netns/tdlfzmissing';
const CIDS = ['tdl-c0', 'tdl-c1', 'tdl-c2', 'tdl-c3', 'tdl-c4', 'tdl-c5'];
/** Another program's veth pair on the node (not adopted): never the agent's to delete. */
const FOREIGN = { host: 'tdlforeign0', netns: PODS[6]!, pod: 'eth7' };
/** A veth pair made by someone else and adopted through PUT /endpoint. */
const ADOPTED = { host: 'tdladopt0', netns: PODS[5]!, pod: 'eth0', containerId: 'tdl-adopted' };

let node: ObservedNodeAgent | undefined;
let client: AgentClient;
let router = '';
let adoptable = '';
const ADOPTABLE_OWNER = 'tdl-fzadopt';

before(async () => {
  process.env[VALIDATE_RESPONSES_ENV] = '1';
  node = await startObservedNodeAgent({ nodeName: 'tdl-fuzz', podCidr: POD_CIDR, nodeLinks: ['eth0'] });
  client = new AgentClient({ socketPath: node.config.socket, timeoutMs: 20_000 });
  const dp = node.datapath;
  for (const p of PODS) dp.addNetns(p);
  dp.addNonNetnsFile(FIFO);
  dp.createVethPair(FOREIGN.host, FOREIGN.netns, FOREIGN.pod);
  dp.createVethPair(ADOPTED.host, ADOPTED.netns, ADOPTED.pod);
  const a = await client.postIpam({ owner: ADOPTED.containerId });
  router = a.hostAddressing.ipv4 ?? '';
  await client.putEndpoint(`container-id:${ADOPTED.containerId}`, {
    containerId: ADOPTED.containerId,
    ifName: ADOPTED.pod,
    netns: ADOPTED.netns,
    hostIfName: ADOPTED.host,
    addresses: [a.address.ip],
    labels: ['k8s:app=adopted'],
  });
  // An address the fuzzed adoptions may name: the only thing between them and the node's links is the agent's checks.
  adoptable = (await client.postIpam({ owner: ADOPTABLE_OWNER })).address.ip;
  for (let i = 0; i < 4; i++) await client.cni(cniCall('ADD', CIDS[i]!, PODS[i]!, `K8S_POD_NAMESPACE=default;K8S_POD_NAME=p${i};TENDRIL_LABELS=app=fz${i}`));
});

after(async () => {
  await node?.stop();
});

// ---- generators ------------------------------------------------------------------

function conf(version = '1.1.0', extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ cniVersion: version, name: NET, type: 'tendril-cni', ...extra });
}

type CniBody = Parameters<AgentClient['cni']>[0];

/** A CNI call; `command` may be one the schema refuses. */
function cniCall(command: string, containerId: string, netns: string, args = 'K8S_POD_NAMESPACE=default;K8S_POD_NAME=fz', ifName = 'eth0', config = conf()): CniBody & Record<string, unknown> {
  return { command: command as CniBody['command'], containerId, netns, ifName, args, path: '/opt/cni/bin', config };
}

const BIG = 'a'.repeat(70_000);
const HUGE_CONFIG = JSON.stringify({ cniVersion: '1.1.0', name: NET, type: 'tendril-cni', pad: 'x'.repeat(1_100_000) });

/** Strings that have broken parsers and path handling before. */
const HOSTILE = [
  '',
  ' ',
  '\0',
  'a\0b',
  'eth0\0',
  '..',
  '../../etc/passwd',
  '/var/run/netns/../../../proc/self/ns/net',
  '/proc/self/ns/net',
  '/proc/thread-self/ns/net',
  '/proc/1/ns/net',
  `/proc/${process.pid}/ns/net`,
  '/dev/null',
  '/',
  '//',
  'relative/netns',
  'eth0 ',
  'eth0/x',
  'eth0:1',
  'a'.repeat(16),
  'a'.repeat(300),
  BIG,
  'lo',
  'eth0',
  'tendril_host',
  'tendril_net',
  FOREIGN.host,
  ADOPTED.host,
  '💥',
  '\u202e\u0000\ud800',
  'é'.repeat(8),
  '-1',
  '0',
  '4294967295',
  '18446744073709551616',
  '1e309',
  'NaN',
  'null',
  'true',
  '%00',
  '%2e%2e%2f',
  '$(reboot)',
  '`id`;rm -rf /',
  'reserved:host',
  'reserved:health',
  'reserved:world',
  'reserved:init',
  'cidr:0.0.0.0/0',
  'k8s:app=x',
  '10.77.0.1',
  '10.77.0.0',
  '10.77.3.255',
  'fd00::5',
  '::',
  '0.0.0.0',
  '255.255.255.255',
  'container-id:tdl-c0',
  'pod-name:default:p0',
];

const hostile = fc.constantFrom(...HOSTILE);
const anyString = fc.oneof(hostile, fc.string({ unit: 'binary', maxLength: 40 }), fc.string({ maxLength: 12 }));
const maybe = <T>(a: fc.Arbitrary<T>) => fc.option(a, { nil: undefined, freq: 5 });

const cidArb = fc.oneof({ weight: 6, arbitrary: fc.constantFrom(...CIDS, ADOPTED.containerId) }, { weight: 2, arbitrary: anyString });
const netnsArb = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom(...PODS) },
  { weight: 3, arbitrary: fc.constantFrom('/proc/self/ns/net', '/proc/1/ns/net', FIFO, MISSING, '') },
  { weight: 2, arbitrary: anyString },
);
const ifNameArb = fc.oneof({ weight: 6, arbitrary: fc.constantFrom('eth0', 'eth0', 'eth0', 'eth1', 'eth7', 'lo', 'tendril_host', 'net1') }, { weight: 2, arbitrary: anyString });
const labelArb = fc.oneof(hostile, fc.constantFrom('app=web', 'k8s:tier=db', 'container:x=y', 'reserved:host', 'reserved:health', 'cidr:10.0.0.0/8', 'unspec:a=b', 'any:a'), fc.string({ maxLength: 20 }));
const argsArb = fc.oneof(
  fc.constant(''),
  fc.constantFrom(
    'K8S_POD_NAMESPACE=default;K8S_POD_NAME=fz',
    'IgnoreUnknown=1;BOGUS=1',
    'BOGUS=1',
    'IP=10.77.0.1',
    'IP=10.77.0.50',
    'IP=10.77.0.0',
    'IP=10.77.3.255',
    'IP=fd00::5',
    'IP=10.77.0.60,10.77.0.61',
    'IP=nonsense',
    'TENDRIL_LABELS=reserved:host',
    'TENDRIL_LABELS=cidr:0.0.0.0/0',
    'K8S_POD_NAMESPACE=;K8S_POD_NAME=',
    '=;=;;',
  ),
  fc.array(fc.tuple(anyString, anyString), { maxLength: 4 }).map((kv) => kv.map(([k, v]) => `${k}=${v}`).join(';')),
  anyString,
);

/** A JSON value of any shape, as a client might send anything. */
const jsonValue = fc.jsonValue({ maxDepth: 3 });

/** A valid object with one thing wrong (or none): a key removed, retyped, added, or the whole replaced. */
function nearValid(valid: Record<string, unknown>): fc.Arbitrary<unknown> {
  const keys = Object.keys(valid);
  return fc.oneof(
    { weight: 1, arbitrary: fc.constant(valid) },
    {
      weight: 3,
      arbitrary: fc.constantFrom(...keys).map((k) => {
        const copy = { ...valid };
        delete copy[k];
        return copy;
      }),
    },
    { weight: 4, arbitrary: fc.tuple(fc.constantFrom(...keys), fc.oneof(hostile, jsonValue, labelArb.map((l) => [l]))).map(([k, v]) => ({ ...valid, [k]: v })) },
    { weight: 2, arbitrary: fc.tuple(anyString, jsonValue).map(([k, v]) => ({ ...valid, [k]: v })) },
    { weight: 1, arbitrary: jsonValue },
  );
}

const configArb: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom('0.3.1', '0.4.0', '1.0.0', '1.1.0').map((v) => conf(v)) },
  {
    weight: 6,
    arbitrary: nearValid({
      cniVersion: '1.1.0',
      name: NET,
      type: 'tendril-cni',
      labels: ['app=x'],
      args: { tendril: { labels: ['reserved:host'] } },
      'cni.dev/valid-attachments': [{ containerID: 'tdl-c0', ifname: 'eth0' }],
      prevResult: { cniVersion: '1.1.0', ips: [{ address: '10.77.0.9/32' }] },
      dns: { nameservers: ['10.0.0.1'] },
    }).map((v) => JSON.stringify(v)),
  },
  { weight: 2, arbitrary: anyString },
  { weight: 1, arbitrary: fc.constantFrom(HUGE_CONFIG, '{', '[]', 'null', '{"cniVersion":"9.9.9","name":"x"}', '{"cniVersion":"1.1.0","name":"a/b"}', '{"cniVersion":"1.1.0"}') },
  { weight: 1, arbitrary: jsonValue },
);

interface CniFuzz {
  kind: 'cni';
  body: Record<string, unknown> | unknown;
}
interface ApiFuzz {
  kind: 'api';
  method: string;
  path: string;
  body: unknown;
  headers: Record<string, string>;
}
/** A call that is right by the spec, so the agent has pods and allocations to break. */
interface ValidCall {
  kind: 'valid';
  verb: 'ADD' | 'DEL' | 'CHECK' | 'GC';
  slot: number;
}
type FuzzCall = CniFuzz | ApiFuzz | ValidCall;

const cniFuzz: fc.Arbitrary<CniFuzz> = fc.oneof(
  {
    weight: 12,
    arbitrary: fc
      .record({
        command: fc.oneof({ weight: 8, arbitrary: fc.constantFrom('ADD', 'DEL', 'CHECK', 'GC', 'STATUS') }, { weight: 1, arbitrary: fc.constantFrom('VERSION', 'add', '', 'ADD\0') }),
        containerId: maybe(cidArb),
        netns: maybe(netnsArb),
        ifName: maybe(ifNameArb),
        args: maybe(argsArb),
        path: maybe(fc.oneof(fc.constant('/opt/cni/bin'), anyString)),
        config: fc.oneof({ weight: 9, arbitrary: configArb }, { weight: 1, arbitrary: jsonValue }),
      })
      .map((r) => ({ kind: 'cni' as const, body: Object.fromEntries(Object.entries(r).filter(([, v]) => v !== undefined)) })),
  },
  // A re-ADD of a live attachment with one thing wrong: the refusal must leave the live endpoint alone.
  { weight: 3, arbitrary: nearValid(cniCall('ADD', 'tdl-c1', PODS[1]!)).map((body) => ({ kind: 'cni' as const, body })) },
  { weight: 1, arbitrary: jsonValue.map((body) => ({ kind: 'cni' as const, body })) },
  // GC of another network (or of this one in an old version) with no valid attachments: it must leave this network's endpoints.
  {
    weight: 1,
    arbitrary: fc
      .tuple(fc.constantFrom('other', 'tdlfuzz2', ''), fc.constantFrom('1.1.0', '1.0.0'))
      .map(([name, version]) => ({ kind: 'cni' as const, body: cniCall('GC', '', '', '', '', JSON.stringify({ cniVersion: version, name, type: 'tendril-cni', 'cni.dev/valid-attachments': [] })) })),
  },
  // A spec-valid call aimed at a wrong place: a namespace that is missing, no namespace, the node's, or another pod's.
  {
    weight: 2,
    arbitrary: fc
      .tuple(fc.constantFrom('ADD', 'DEL', 'CHECK'), fc.constantFrom(...CIDS), fc.constantFrom(MISSING, FIFO, '/', '/dev/null', '/proc/self/ns/net', '/proc/thread-self/ns/net', ...PODS), fc.constantFrom('eth0', 'eth7'))
      .map(([command, cid, netns, ifName]) => ({ kind: 'cni' as const, body: cniCall(command, cid, netns, undefined, ifName) })),
  },
);

/** Percent-encodes every byte of the UTF-8 form (a lone surrogate becomes U+FFFD, which encodeURIComponent refuses). */
const pct = (s: string) => [...Buffer.from(s, 'utf8')].map((b) => `%${b.toString(16).padStart(2, '0')}`).join('');

const segArb = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom('1', '2', '3', '4', '5', '65535', '0', 'container-id:tdl-c1', 'container-id:tdl-adopted', 'container-id:tdl-fzadopt', 'container-id:tdl-fzadopt', 'pod-name:default:p2', 'ipv4:10.77.0.2', '10.77.0.1', '10.77.0.2', '10.77.0.200', '256', '257', '4294967295') },
  { weight: 3, arbitrary: hostile.map(pct) },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 20 }).map(pct) },
);

const queryArb = fc
  .array(fc.tuple(fc.constantFrom('owner', 'family', 'pool', 'all', 'name', 'namespace', 'label', 'bogus'), fc.oneof(fc.constantFrom('tdl-fz', 'ipv4', 'ipv6', 'true', 'default', 'app=x'), anyString)), { maxLength: 3 })
  .map((kv) => (kv.length === 0 ? '' : `?${kv.map(([k, v]) => `${k}=${pct(v)}`).join('&')}`));

const bodyFor: Record<string, fc.Arbitrary<unknown>> = {
  '/config': nearValid({ logLevel: 'info', ipamExpirationMs: 60_000 }),
  // Valid but for a host interface that does not exist; mutations name the uplink, the agent's devices, another program's veth.
  '/endpoint/{x}': fc.constant(null).chain(() => nearValid({ containerId: ADOPTABLE_OWNER, ifName: 'eth0', netns: PODS[6]!, hostIfName: 'tdlfznothere', addresses: [adoptable], labels: ['app=x'] })),
  '/endpoint/{x}/labels': nearValid({ add: ['tier=x'], delete: ['app'] }),
  '/policy': nearValid({ text: 'apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: fz, namespace: default}\nspec: {podSelector: {}}\n' }),
  '/policy/trace': nearValid({ src: ['app=a'], dst: ['app=b'], dport: '80/tcp' }),
  '/cni': nearValid(cniCall('DEL', 'tdl-c5', PODS[4]!)),
};

const apiFuzz: fc.Arbitrary<ApiFuzz> = fc
  .record({
    method: fc.oneof({ weight: 9, arbitrary: fc.constantFrom('GET', 'POST', 'PUT', 'PATCH', 'DELETE') }, { weight: 1, arbitrary: fc.constantFrom('HEAD', 'OPTIONS', 'TRACE') }),
    template: fc.constantFrom('/healthz', '/config', '/ipam', '/ipam/{x}', '/endpoint', '/endpoint/{x}', '/endpoint/{x}/labels', '/endpoint/{x}/policy', '/identity', '/identity/{x}', '/ip', '/policy', '/policy/selectors', '/policy/trace', '/node', '/node/{x}', '/cni', '/{x}', '/endpoint/{x}/{x}'),
    seg: segArb,
    query: queryArb,
    expiration: maybe(fc.constantFrom('true', 'false', 'yes', '')),
    bodyKind: fc.constantFrom('schema', 'schema', 'json', 'none'),
    json: jsonValue,
  })
  .chain((r) => {
    const near = bodyFor[r.template] ?? jsonValue;
    return near.map((nb): ApiFuzz => {
      const headers: Record<string, string> = r.expiration === undefined ? {} : { expiration: r.expiration };
      const body = r.bodyKind === 'none' ? undefined : r.bodyKind === 'json' ? r.json : nb;
      return { kind: 'api' as const, method: r.method, path: r.template.replaceAll('{x}', r.seg) + r.query, body, headers };
    });
  })
  // Below node's 16 KiB header limit: past it node's HTTP server answers 431 before the agent sees the request.
  .filter((c) => c.path.length <= 8192);

const validCall: fc.Arbitrary<ValidCall> = fc.record({
  kind: fc.constant('valid' as const),
  verb: fc.constantFrom('ADD', 'ADD', 'ADD', 'DEL', 'DEL', 'CHECK', 'GC'),
  slot: fc.nat({ max: CIDS.length - 1 }),
});

const fuzzCall: fc.Arbitrary<FuzzCall> = fc.oneof({ weight: 5, arbitrary: cniFuzz }, { weight: 4, arbitrary: apiFuzz }, { weight: 2, arbitrary: validCall });

// ---- observation ---------------------------------------------------------------------

interface EndpointView {
  id: number;
  containerId: string;
  ifName: string;
  netns: string;
  hostIfName: string;
  addresses: string[];
  labels: string[];
  identity: number | undefined;
}

interface World {
  links: Set<LinkKey>;
  hostRoutes: string[];
  nodeAddressing: string;
  endpoints: Map<number, EndpointView>;
  /** `owner=ip` → expiresAt (undefined once confirmed). */
  allocations: Map<string, number | undefined>;
}

/**
 * Node's HTTP client keeps sockets alive; one the agent closed after refusing a
 * request it could not parse (a 431 for a huge path) may be handed out again
 * and fail at once. That is the client's doing: ask once more.
 */
async function again<T>(read: () => Promise<T>): Promise<T> {
  try {
    return await read();
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== 'EPIPE' && code !== 'ECONNRESET') throw err;
    return read();
  }
}

async function observe(n: ObservedNodeAgent): Promise<World> {
  const eps = await again(() => client.listEndpoints());
  const ipam = await again(() => client.listIpam());
  return {
    links: n.datapath.links(),
    hostRoutes: n.datapath.hostRoutes().map((r) => `${r.dst} dev ${r.dev} src ${r.src ?? ''}`).sort(),
    nodeAddressing: JSON.stringify(n.datapath.node()),
    endpoints: new Map(eps.map((e) => [e.id, { id: e.id, containerId: e.containerId, ifName: e.ifName, netns: e.netns, hostIfName: e.hostIfName, addresses: e.addresses.map((a) => a.ip), labels: e.labels, identity: e.identity }])),
    allocations: new Map(ipam.allocations.map((a) => [`${a.owner}=${a.ip}`, a.expiresAt])),
  };
}

/** The node's links the agent must never delete: its own uplink and devices, and another program's veth. */
const PROTECTED = new Set([linkKey('', 'lo'), linkKey('', 'eth0'), linkKey('', 'tendril_host'), linkKey('', 'tendril_net'), linkKey('', FOREIGN.host), linkKey(FOREIGN.netns, FOREIGN.pod), ...PODS.map((p) => linkKey(p, 'lo'))]);

interface Outcome {
  /** The call was answered and refused (4xx/5xx, or CNI exit code 1). */
  refused: boolean;
  /** Why a refusal counts as the agent's own failure (5xx, CNI 999), if it does. */
  serverFault?: string;
  summary: string;
}

async function send(call: FuzzCall, world: World): Promise<Outcome> {
  try {
    if (call.kind === 'api') {
      await client.request(call.method, call.path, call.body, call.headers);
      return { refused: false, summary: 'accepted' };
    }
    const body = call.kind === 'cni' ? call.body : validBody(call, world);
    if (body === null || typeof body !== 'object' || Array.isArray(body)) {
      await client.request('POST', '/cni', body);
      return { refused: false, summary: 'accepted' };
    }
    await client.cni(body as CniBody);
    return { refused: false, summary: 'exit 0' };
  } catch (err) {
    if (err instanceof AgentResponseError) {
      const fault = err.status >= 500 && !(err.status === 503 && err.body.code === 'IPAM_EXHAUSTED') ? `HTTP ${err.status} ${err.body.code}: ${err.message}` : undefined;
      return { refused: true, ...(fault ? { serverFault: fault } : {}), summary: `HTTP ${err.status} ${err.body.code}` };
    }
    if (err instanceof CniError) {
      return { refused: true, ...(err.code === 999 ? { serverFault: `CNI 999: ${err.msg} ${err.details ?? ''}` } : {}), summary: `CNI ${err.code}` };
    }
    if (err instanceof AgentUnreachableError) throw err;
    // Node's HTTP client refuses to send some paths and header values itself: nothing reached the agent.
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ERR_UNESCAPED_CHARACTERS' || code === 'ERR_INVALID_CHAR') return { refused: true, summary: 'not sent' };
    // A body over the operation's limit is answered 413 and the connection closed while the client still writes.
    if (code === 'EPIPE' || code === 'ECONNRESET') return { refused: true, summary: `connection closed (${code})` };
    return { refused: true, serverFault: `unexpected answer: ${(err as Error).message}`, summary: 'broken answer' };
  }
}

/** The body of a spec-valid call, against the current state (GC names every live attachment). */
function validBody(call: ValidCall, world: World): CniBody {
  const cid = CIDS[call.slot]!;
  const ep = [...world.endpoints.values()].find((e) => e.containerId === cid);
  // A fresh ADD goes to the slot's namespace, where its eth0 is free unless another slot took it.
  const netns = ep?.netns ?? PODS[call.slot % 5]!;
  switch (call.verb) {
    case 'ADD':
      return cniCall('ADD', cid, netns, `K8S_POD_NAMESPACE=default;K8S_POD_NAME=v${call.slot};TENDRIL_LABELS=app=v${call.slot}`);
    case 'DEL':
      return cniCall('DEL', cid, netns);
    case 'CHECK':
      return cniCall('CHECK', cid, netns);
    case 'GC': {
      const valid = [...world.endpoints.values()].map((e) => ({ containerID: e.containerId, ifname: e.ifName }));
      return cniCall('GC', '', '', '', '', conf('1.1.0', { 'cni.dev/valid-attachments': valid }));
    }
  }
}

/** The links a call may remove: those of endpoints it removed, and its own attachment's host end and that end's peer. */
function mayRemove(call: FuzzCall, before: World, after: World, removed: LinkKey[]): Set<LinkKey> {
  const allowed = new Set<LinkKey>();
  for (const ep of before.endpoints.values()) {
    if (after.endpoints.has(ep.id)) continue;
    allowed.add(linkKey('', ep.hostIfName));
    allowed.add(node!.datapath.keyIn(ep.netns, ep.ifName));
  }
  const body = call.kind === 'cni' ? call.body : undefined;
  if (body && typeof body === 'object' && !Array.isArray(body)) {
    const b = body as Record<string, unknown>;
    if (typeof b.containerId === 'string' && typeof b.ifName === 'string') {
      let own = '';
      try {
        own = linkKey('', hostInterfaceName(b.containerId, b.ifName));
      } catch {
        own = '';
      }
      // The pod end of its own leftover host end dies with it (a veth pair); nothing else in the pod.
      if (own !== '' && removed.includes(own)) {
        allowed.add(own);
        if (typeof b.netns === 'string') allowed.add(node!.datapath.keyIn(b.netns, b.ifName));
      }
    }
  }
  return allowed;
}

/** The network a CNI GC call names (undefined for any other call, or a netconf that does not parse). */
function gcNetwork(call: FuzzCall): string | undefined {
  if (call.kind !== 'cni' || call.body === null || typeof call.body !== 'object') return undefined;
  const b = call.body as Record<string, unknown>;
  if (b.command !== 'GC' || typeof b.config !== 'string') return undefined;
  try {
    const name = (JSON.parse(b.config) as Record<string, unknown> | null)?.name;
    return typeof name === 'string' ? name : '';
  } catch {
    return undefined;
  }
}

function checkCall(call: FuzzCall, outcome: Outcome, before: World, after: World, removed: LinkKey[]): string[] {
  const v: string[] = [];
  if (outcome.serverFault) v.push(`server fault on a client's call: ${outcome.serverFault}`);
  for (const k of removed) if (PROTECTED.has(k)) v.push(`deleted ${k}, which the agent does not own`);
  const allowed = mayRemove(call, before, after, removed);
  for (const k of removed) if (!PROTECTED.has(k) && !allowed.has(k)) v.push(`deleted or replaced ${k}, which belongs to no endpoint this call removed`);
  const gone = [...before.endpoints.keys()].filter((id) => !after.endpoints.has(id));
  const gcOf = gcNetwork(call);
  if (gcOf !== undefined && gcOf !== NET && gone.length > 0) v.push(`GC of network ${JSON.stringify(gcOf)} deleted endpoints ${gone.join(', ')} of network ${NET}`);
  if (outcome.refused) {
    const created = [...after.links].filter((k) => !before.links.has(k));
    if (created.length > 0) v.push(`refused call created links ${created.join(', ')}`);
    if (removed.length > 0) v.push(`refused call removed links ${removed.join(', ')}`);
    const goneEps = [...before.endpoints.keys()].filter((id) => !after.endpoints.has(id));
    const newEps = [...after.endpoints.keys()].filter((id) => !before.endpoints.has(id));
    if (goneEps.length > 0) v.push(`refused call deleted endpoints ${goneEps.join(', ')}`);
    if (newEps.length > 0) v.push(`refused call created endpoints ${newEps.join(', ')}`);
    const now = Date.now();
    for (const [k] of after.allocations) if (!before.allocations.has(k)) v.push(`refused call allocated ${k}`);
    for (const [k, exp] of before.allocations) if (!after.allocations.has(k) && !(exp !== undefined && exp <= now + 1000)) v.push(`refused call released ${k}`);
    const lostRoutes = before.hostRoutes.filter((r) => !after.hostRoutes.includes(r));
    const newRoutes = after.hostRoutes.filter((r) => !before.hostRoutes.includes(r));
    if (lostRoutes.length + newRoutes.length > 0) v.push(`refused call changed host routes: removed [${lostRoutes.join(', ')}], added [${newRoutes.join(', ')}]`);
    if (after.nodeAddressing !== before.nodeAddressing) v.push(`refused call changed the node's addressing: ${before.nodeAddressing} -> ${after.nodeAddressing}`);
  }
  return v;
}

/** What must hold after any call. */
function checkWorld(w: World): string[] {
  const v: string[] = [];
  const hostLinks = new Map<string, number>();
  const podSides = new Map<string, number>();
  const ips = new Map<string, number>();
  for (const ep of w.endpoints.values()) {
    const host = linkKey('', ep.hostIfName);
    const pod = node!.datapath.keyIn(ep.netns, ep.ifName);
    if (!w.links.has(host)) v.push(`endpoint ${ep.id} (${ep.containerId}) has lost its host link ${ep.hostIfName}`);
    if (!w.links.has(pod)) v.push(`endpoint ${ep.id} (${ep.containerId}) has lost its pod side ${pod}`);
    if (PROTECTED.has(host)) v.push(`endpoint ${ep.id} (${ep.containerId}) took ${ep.hostIfName} as its host link`);
    for (const [seen, key] of [
      [hostLinks, host],
      [podSides, pod],
    ] as const) {
      const other = seen.get(key);
      if (other !== undefined) v.push(`endpoints ${other} and ${ep.id} share ${key}`);
      seen.set(key, ep.id);
    }
    for (const ip of ep.addresses) {
      const owner = ep.ifName === 'eth0' ? ep.containerId : `${ep.containerId}:${ep.ifName}`;
      if (!w.allocations.has(`${owner}=${ip}`)) v.push(`endpoint ${ep.id} holds ${ip}, which IPAM does not give ${owner}`);
      const other = ips.get(ip);
      if (other !== undefined) v.push(`endpoints ${other} and ${ep.id} share ${ip}`);
      ips.set(ip, ep.id);
    }
    const reservedLabel = ep.labels.find((l) => /^(reserved|cidr):/.test(l) && l !== 'reserved:init');
    if (reservedLabel) v.push(`endpoint ${ep.id} (${ep.containerId}) carries ${reservedLabel}`);
    if (ep.identity !== undefined && ep.identity < 256 && ep.identity !== ReservedIdentity.Init) v.push(`endpoint ${ep.id} (${ep.containerId}) has reserved identity ${ep.identity}`);
  }
  for (const k of w.links) {
    const [ns, name] = k.split('|') as [string, string];
    if (ns === '' && /^lxc[0-9a-f]{12}$/.test(name) && !hostLinks.has(k)) v.push(`host link ${name} belongs to no endpoint`);
  }
  if (router !== '' && ![...w.allocations.keys()].some((k) => k.endsWith(`=${router}`))) v.push(`the router address ${router} is no longer allocated`);
  return v;
}

/** One line that names the call, short enough to read. */
function describeCall(call: FuzzCall): string {
  const text = JSON.stringify(call, (_k, val: unknown) => (typeof val === 'string' && val.length > 120 ? `${val.slice(0, 60)}…(${val.length} chars)` : val));
  return text.length > 900 ? `${text.slice(0, 900)}…` : text;
}

test(`fuzz: ${RUNS} API and CNI calls (seed ${SEED}) break no invariant`, async (t) => {
  const n = node!;
  const calls = fc.sample(fuzzCall, { numRuns: RUNS, seed: SEED });
  const violations = new Map<string, { count: number; first: string }>();
  const counts = { refused: 0, accepted: 0, valid: 0 };
  let world = await observe(n);
  for (const v of checkWorld(world)) violations.set(`initial: ${v}`, { count: 1, first: 'setup' });
  for (const [i, call] of calls.entries()) {
    const mark = n.datapath.removed.length;
    let outcome: Outcome;
    let after: World;
    try {
      outcome = await send(call, world);
      after = await observe(n);
    } catch (err) {
      throw new Error(`call #${i} ${describeCall(call)} broke the exchange with the agent (seed ${SEED}): ${(err as Error).message}`, { cause: err });
    }
    const removed = n.datapath.removed.slice(mark);
    if (call.kind === 'valid') counts.valid++;
    if (outcome.refused) counts.refused++;
    else counts.accepted++;
    for (const v of [...checkCall(call, outcome, world, after, removed), ...checkWorld(after)]) {
      // Grouped by kind (numbers and names stripped), each with the first call that showed it.
      const kind = v.replace(/\d+/g, 'N').replace(/lxc[0-9a-f]+/g, 'lxc…').slice(0, 160);
      const seen = violations.get(kind);
      if (seen) seen.count++;
      else violations.set(kind, { count: 1, first: `#${i} ${describeCall(call)} → ${outcome.summary}: ${v}` });
    }
    world = after;
  }
  t.diagnostic(`seed ${SEED}: ${calls.length} calls (${counts.valid} spec-valid), ${counts.accepted} accepted, ${counts.refused} refused; ${violations.size} kinds of violation`);
  const report = [...violations.values()].map((x) => `${x.count}× ${x.first}`);
  assert.deepEqual(report, [], `invariants broken (reproduce with TENDRIL_FUZZ_SEED=${SEED} TENDRIL_FUZZ_RUNS=${RUNS}):\n${report.join('\n')}`);
});
