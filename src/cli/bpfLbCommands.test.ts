// `tendril bpf lb list` and `tendril bpf nat list` as processes against an
// agent API (responses checked against api/openapi.yaml) serving real
// load-balancer, SNAT and device maps pinned in a bpffs directory of the
// test's own: the cilium-like tables, the other maps by flag, -o json, and
// the answer without the eBPF datapath.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { requireRoot } from '../../test/support/root.js';
import { type BpfApiServer, startBpfApiServer } from '../agent/testing/bpfApiServer.js';
import { BackendState, LbScope, MapName, NatDirection, NatFlag, ServiceFlag, DeviceFlag } from '../datapath/bpf/constants.js';
import { deviceInfo, lb4AffinityKey, lb4AffinityValue, lb4Backend, lb4Key, lb4ReverseNat, lb4Service, lb6AffinityKey, lb6Backend, lb6Key, lb6ReverseNat, nat4Entry, nat4Key, nat6Entry, nat6Key } from '../datapath/bpf/layout.js';
import { BpfMap, codec, MapOfMaps, RawMap } from '../datapath/kernel/bpf/index.js';
import { parseIp } from '../netip/index.js';
import { runCli } from './testing/cliProcess.js';

requireRoot('the bpf lb/nat CLI tests');

const tendril = runCli;

let server: BpfApiServer;
let sock: string;
const opened: Array<{ close(): void }> = [];

/** Creates a map and pins it where the datapath pins its own (the pin directory goes with the server's maps). */
async function pinned<T extends { pin(path: string): void; close(): void }>(name: string, make: () => Promise<T>): Promise<T> {
  const m = await make();
  opened.push(m);
  m.pin(join(server.maps.pinDir, name));
  return m;
}

before(async () => {
  server = await startBpfApiServer({ nodeName: 'tdl-bpflbcli', podCidr: '10.96.128.0/24' });
  sock = server.socket;
  const ip = parseIp;
  const services = await pinned(MapName.LB_SERVICES, () => BpfMap.create({ name: MapName.LB_SERVICES, type: 'HASH', maxEntries: 64 }, lb4Key, lb4Service));
  const backends = await pinned(MapName.LB_BACKENDS, () => BpfMap.create({ name: MapName.LB_BACKENDS, type: 'HASH', maxEntries: 64 }, codec.u32, lb4Backend));
  const revNat = await pinned(MapName.LB_REVNAT, () => BpfMap.create({ name: MapName.LB_REVNAT, type: 'HASH', maxEntries: 64 }, codec.u16, lb4ReverseNat));
  const affinity = await pinned(MapName.LB_AFFINITY, () => BpfMap.create({ name: MapName.LB_AFFINITY, type: 'LRU_HASH', maxEntries: 64 }, lb4AffinityKey, lb4AffinityValue));
  const template = await RawMap.create({ name: 'tdl_mag_tmpl', type: 'ARRAY', keySize: 4, valueSize: 4, maxEntries: 7 });
  opened.push(template);
  const maglev = await pinned(MapName.LB_MAGLEV, () => MapOfMaps.create({ name: MapName.LB_MAGLEV, type: 'HASH_OF_MAPS', maxEntries: 16, innerMap: template }, codec.u32));
  const snat = await pinned(MapName.SNAT, () => BpfMap.create({ name: MapName.SNAT, type: 'LRU_HASH', maxEntries: 64 }, nat4Key, nat4Entry));
  const snat6 = await pinned(MapName.SNAT6, () => BpfMap.create({ name: MapName.SNAT6, type: 'HASH', maxEntries: 64 }, nat6Key, nat6Entry));
  const devices = await pinned(MapName.DEVICES, () => BpfMap.create({ name: MapName.DEVICES, type: 'HASH', maxEntries: 8 }, codec.u32, deviceInfo));
  const services6 = await pinned(MapName.LB6_SERVICES, () => BpfMap.create({ name: MapName.LB6_SERVICES, type: 'HASH', maxEntries: 64 }, lb6Key, lb4Service));
  const backends6 = await pinned(MapName.LB6_BACKENDS, () => BpfMap.create({ name: MapName.LB6_BACKENDS, type: 'HASH', maxEntries: 64 }, codec.u32, lb6Backend));
  const revNat6 = await pinned(MapName.LB6_REVNAT, () => BpfMap.create({ name: MapName.LB6_REVNAT, type: 'HASH', maxEntries: 64 }, codec.u16, lb6ReverseNat));
  await pinned(MapName.LB6_AFFINITY, () => BpfMap.create({ name: MapName.LB6_AFFINITY, type: 'LRU_HASH', maxEntries: 64 }, lb6AffinityKey, lb4AffinityValue));

  // Service 1: a ClusterIP with two backends and a Maglev table; service 2: a NodePort, Local, with two scopes and affinity.
  const fe1 = { address: ip('10.96.0.10'), dport: 80, proto: 6 };
  services.set({ ...fe1, backendSlot: 0, scope: LbScope.EXTERNAL }, { backendId: 0, affinityTimeout: 0, count: 2, revNatIndex: 1, flags: ServiceFlag.MAGLEV });
  services.set({ ...fe1, backendSlot: 1, scope: LbScope.EXTERNAL }, { backendId: 11, affinityTimeout: 0, count: 0, revNatIndex: 1, flags: 0 });
  services.set({ ...fe1, backendSlot: 2, scope: LbScope.EXTERNAL }, { backendId: 12, affinityTimeout: 0, count: 0, revNatIndex: 1, flags: 0 });
  const fe2 = { address: ip('0.0.0.0'), dport: 30080, proto: 17 };
  const svc2Flags = ServiceFlag.NODEPORT | ServiceFlag.LOCAL_TRAFFIC | ServiceFlag.TWO_SCOPES | ServiceFlag.AFFINITY;
  services.set({ ...fe2, backendSlot: 0, scope: LbScope.EXTERNAL }, { backendId: 0, affinityTimeout: 60, count: 0, revNatIndex: 2, flags: svc2Flags });
  services.set({ ...fe2, backendSlot: 0, scope: LbScope.INTERNAL }, { backendId: 0, affinityTimeout: 60, count: 1, revNatIndex: 2, flags: svc2Flags });
  services.set({ ...fe2, backendSlot: 1, scope: LbScope.INTERNAL }, { backendId: 13, affinityTimeout: 0, count: 0, revNatIndex: 2, flags: 0 });
  backends.set(11, { address: ip('10.96.128.5'), port: 8080, proto: 6, state: BackendState.ACTIVE });
  backends.set(12, { address: ip('10.96.128.6'), port: 8080, proto: 6, state: BackendState.TERMINATING });
  revNat.set(1, { address: ip('10.96.0.10'), port: 80 });
  revNat.set(2, { address: ip('0.0.0.0'), port: 30080 });
  affinity.set({ client: ip('10.96.128.9'), revNatIndex: 2 }, { lastUsedNs: process.hrtime.bigint() - 5_000_000_000n, backendId: 13 });
  // Service 3: an IPv6 ClusterIP with one backend.
  const fe3 = { address: ip('fd00:96::10'), dport: 80, proto: 6 };
  services6.set({ ...fe3, backendSlot: 0, scope: LbScope.EXTERNAL }, { backendId: 0, affinityTimeout: 0, count: 1, revNatIndex: 3, flags: 0 });
  services6.set({ ...fe3, backendSlot: 1, scope: LbScope.EXTERNAL }, { backendId: 14, affinityTimeout: 0, count: 0, revNatIndex: 3, flags: 0 });
  backends6.set(14, { address: ip('fd00:128::5'), port: 8080, proto: 6, state: BackendState.ACTIVE });
  revNat6.set(3, { address: ip('fd00:96::10'), port: 80 });
  const inner = await RawMap.create({ name: 'tdl_mag_1', type: 'ARRAY', keySize: 4, valueSize: 4, maxEntries: 7 });
  await maglev.set(1, inner);
  inner.close();

  const now = process.hrtime.bigint();
  const tuple = { saddr: ip('10.96.128.5'), daddr: ip('192.0.2.1'), sport: 40000, dport: 443, proto: 6 };
  snat.set({ ...tuple, dir: NatDirection.EGRESS }, { createdNs: now - 3_000_000_000n, toAddr: ip('192.0.2.100'), toPort: 61000, flags: NatFlag.MASQUERADE });
  snat.set({ saddr: ip('192.0.2.1'), daddr: ip('192.0.2.100'), sport: 443, dport: 61000, proto: 6, dir: NatDirection.INGRESS }, { createdNs: now - 3_000_000_000n, toAddr: ip('10.96.128.5'), toPort: 40000, flags: NatFlag.MASQUERADE });
  snat6.set(
    { saddr: ip('fd10::5'), daddr: ip('2001:db8::1'), sport: 40000, dport: 443, proto: 6, dir: NatDirection.EGRESS },
    { createdNs: now - 3_000_000_000n, toAddr: ip('fd00:77::1'), toPort: 61001, flags: NatFlag.MASQUERADE },
  );
  devices.set(1, { ipv4: ip('192.0.2.100'), ipv6: ip('fd00:77::1'), flags: DeviceFlag.MASQUERADE, mac: '02:00:00:00:00:01' });
});

after(async () => {
  for (const m of opened) m.close();
  await server?.stop();
});

describe('tendril bpf lb list', () => {
  test('a frontend per block: slot 0 with the service ID and count, then each slot\'s backend', async () => {
    const r = await tendril(['bpf', 'lb', 'list', '--socket', sock]);
    assert.equal(r.code, 0, r.stderr);
    const lines = r.stdout.trimEnd().split('\n');
    assert.match(lines[0]!, /^SERVICE ADDRESS\s+SCOPE\s+BACKEND ADDRESS \(SERVICE ID\) \(SLOT\)\s+FLAGS$/);
    assert.match(lines[1]!, /^10\.96\.0\.10:80\/TCP\s+external\s+0\.0\.0\.0:0 \(1\) \(0\) \[2 backends\]\s+maglev, maglev-table$/);
    assert.match(lines[2]!, /^\s+10\.96\.128\.5:8080 \(1\) \(1\)$/);
    assert.match(lines[3]!, /^\s+10\.96\.128\.6:8080 \(1\) \(2\) \[terminating\]$/);
    assert.match(lines[4]!, /^0\.0\.0\.0:30080\/UDP\s+external\s+0\.0\.0\.0:0 \(2\) \(0\) \[0 backends\]\s+nodeport, local-traffic, affinity, two-scopes, timeout 60s$/);
    assert.match(lines[5]!, /^0\.0\.0\.0:30080\/UDP\s+internal\s+0\.0\.0\.0:0 \(2\) \(0\) \[1 backend\]/);
    assert.match(lines[6]!, /^\s+backend 13 \(missing\) \(2\) \(1\)$/);
    assert.match(lines[7]!, /^\[fd00:96::10\]:80\/TCP\s+external\s+0\.0\.0\.0:0 \(3\) \(0\) \[1 backend\]\s+-$/);
    assert.match(lines[8]!, /^\s+\[fd00:128::5\]:8080 \(3\) \(1\)$/);
  });

  test('--backends, --revnat, --affinity: those maps; -o json: all of them', async () => {
    const be = await tendril(['bpf', 'lb', 'list', '--backends', '--socket', sock]);
    assert.equal(be.code, 0, be.stderr);
    assert.match(be.stdout, /^ID\s+ADDRESS\s+PROTO\s+STATE\n11\s+10\.96\.128\.5:8080\s+TCP\s+active\n12\s+10\.96\.128\.6:8080\s+TCP\s+terminating\n14\s+\[fd00:128::5\]:8080\s+TCP\s+active\n$/);
    const rev = await tendril(['bpf', 'lb', 'list', '--revnat', '--socket', sock]);
    assert.match(rev.stdout, /^ID\s+FRONTEND\n1\s+10\.96\.0\.10:80\n2\s+0\.0\.0\.0:30080\n3\s+\[fd00:96::10\]:80\n$/);
    const aff = await tendril(['bpf', 'lb', 'list', '--affinity', '--socket', sock]);
    assert.match(aff.stdout, /^SERVICE\s+CLIENT\s+BACKEND\s+IDLE\n2\s+10\.96\.128\.9\s+13\s+\d+s\n$/);
    const json = await tendril(['bpf', 'lb', 'list', '-o', 'json', '--socket', sock]);
    assert.equal(json.code, 0, json.stderr);
    const body = JSON.parse(json.stdout) as { services: Array<{ id: number; scope: string; maglevTable: boolean; slots: unknown[] }>; backends: unknown[]; reverseNat: unknown[]; affinity: unknown[] };
    assert.deepEqual(body.services.map((s) => [s.id, s.scope, s.maglevTable, s.slots.length]), [
      [1, 'external', true, 2],
      [2, 'external', false, 0],
      [2, 'internal', false, 1],
      [3, 'external', false, 1],
    ]);
    assert.equal(body.backends.length, 3);
    assert.equal(body.reverseNat.length, 3);
    assert.equal(body.affinity.length, 1);
  });
});

describe('tendril bpf nat list', () => {
  test('each mapping\'s two keys, and the devices SNAT uses; -o json the same', async () => {
    const r = await tendril(['bpf', 'nat', 'list', '--socket', sock]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^PROTO\s+DIR\s+TUPLE\s+TRANSLATION\s+FLAGS\s+AGE\n/);
    assert.match(r.stdout, /\nTCP\s+OUT\s+10\.96\.128\.5:40000 -> 192\.0\.2\.1:443\s+source 192\.0\.2\.100:61000\s+masquerade\s+\d+s\n/);
    assert.match(r.stdout, /\nTCP\s+IN\s+192\.0\.2\.1:443 -> 192\.0\.2\.100:61000\s+destination 10\.96\.128\.5:40000\s+masquerade\s+\d+s\n/);
    // IPv6 mappings (tendril_snat6) beside IPv4's, addresses in brackets.
    assert.match(r.stdout, /\nTCP\s+OUT\s+\[fd10::5\]:40000 -> \[2001:db8::1\]:443\s+source \[fd00:77::1\]:61001\s+masquerade\s+\d+s\n/);
    assert.match(r.stdout, /\nDEVICE\s+IPV4\s+IPV6\s+MAC\s+MASQUERADE\nlo \(1\)\s+192\.0\.2\.100\s+fd00:77::1\s+02:00:00:00:00:01\s+yes\n$/);
    const json = JSON.parse((await tendril(['bpf', 'nat', 'list', '-o', 'json', '--socket', sock])).stdout) as {
      mappings: Array<{ direction: string; flags: string[]; saddr: string }>;
      devices: Array<{ ifName?: string; ipv6?: string }>;
    };
    assert.deepEqual(json.mappings.map((m) => [m.direction, m.saddr, m.flags]), [
      ['egress', '10.96.128.5', ['masquerade']],
      ['egress', 'fd10::5', ['masquerade']],
      ['ingress', '192.0.2.1', ['masquerade']],
    ]);
    assert.equal(json.devices[0]?.ifName, 'lo');
    assert.equal(json.devices[0]?.ipv6, 'fd00:77::1');
  });

  test('without the eBPF datapath: exit code 1 and the agent\'s reason', async () => {
    for (const args of [['bpf', 'lb', 'list'], ['bpf', 'nat', 'list']]) {
      const r = await tendril([...args, '--socket', server.node.config.socket]);
      assert.equal(r.code, 1);
      assert.match(r.stderr, /agent: CONFLICT: the eBPF datapath is not running on this node/);
    }
  });
});
