// The --bpf-*-max flags size the IPv6 tables too, on real packets: an agent
// started with --bpf-ct-tcp-max 16 and --bpf-lb-service-max 256 creates
// tendril_ct6_tcp and tendril_lb6_svc at those sizes (bpftool reads the
// pins), and an IPv6 pod holding more connections than the IPv6 TCP
// conntrack table has room for gets CT_FULL for the rest while every
// established connection still answers; the datapath metrics show the
// table's fill under its own name.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { MapName } from '../../src/datapath/bpf/constants.js';
import { bpfMetrics, dropCounts } from '../support/datapathObserve.js';
import { NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';
import { run } from '../support/run.js';
import { type ServiceScene, startServiceScene } from '../support/serviceScene.js';

requireRoot('the IPv6 map size tests');

const CT_MAX = 16;
const LB_MAX = 256;
const TCP_PORT = 8080;
const pool = new NetnsPool('svm6');
let scene: ServiceScene | undefined;

before(async () => {
  scene = await startServiceScene(pool, {
    nodeName: 'tdl-node-svm6',
    podCidr: '10.244.0.0/24',
    family: 6,
    namespace: 'tdl-svm',
    pods: [{ name: 'server' }, { name: 'client' }],
    tcpPorts: [TCP_PORT],
    udpPorts: [],
    extraAgentArgs: ['--bpf-ct-tcp-max', String(CT_MAX), '--bpf-lb-service-max', String(LB_MAX)],
  });
});

after(async () => {
  if (scene) await scene.cleanup();
  else await pool.cleanup();
});

async function maxEntries(map: string): Promise<number> {
  const pin = `${scene!.node.bpffsRoot}/tendril/${map}`;
  const r = await run(['bpftool', '-j', 'map', 'show', 'pinned', pin]);
  assert.equal(r.code, 0, `bpftool map show ${pin}: ${r.stderr}`);
  return (JSON.parse(r.stdout) as { max_entries: number }).max_entries;
}

test('--bpf-ct-tcp-max and --bpf-lb-service-max size the IPv6 tables as the IPv4 ones', async () => {
  assert.deepEqual(
    { ct4: await maxEntries(MapName.CT_TCP), ct6: await maxEntries(MapName.CT6_TCP), lb4: await maxEntries(MapName.LB_SERVICES), lb6: await maxEntries(MapName.LB6_SERVICES) },
    { ct4: CT_MAX, ct6: CT_MAX, lb4: LB_MAX, lb6: LB_MAX },
  );
});

test('a full IPv6 TCP conntrack table refuses new flows (CT_FULL); every established connection still answers', async () => {
  const client = scene!.agent('client');
  const dst = scene!.podIp('server', 6);
  const before = dropCounts(await bpfMetrics(scene!.node));
  const held: number[] = [];
  let refused = 0;
  for (let i = 0; i < CT_MAX + 8; i++) {
    const { handle, session } = await client.tcpOpen({ dst, port: TCP_PORT }, 800);
    if (session.outcome === 'open') held.push(handle);
    else refused++;
  }
  const after = dropCounts(await bpfMetrics(scene!.node));
  const ctFull = (m: Record<string, number>) => Object.entries(m).filter(([k]) => k.startsWith('CT_FULL')).reduce((s, [, v]) => s + v, 0);
  try {
    assert.ok(held.length <= CT_MAX && held.length >= CT_MAX / 2, `as many connections opened as the table has entries for: ${held.length}`);
    assert.ok(refused > 0 && ctFull(after) > ctFull(before), `the rest were dropped as CT_FULL: ${refused} refused, drops ${JSON.stringify(before)} -> ${JSON.stringify(after)}`);
    for (const h of held) assert.equal((await client.tcpAsk(h, 1500)).outcome, 'open', `held connection ${h} still answers`);
    const metrics = await scene!.node.agent.client.metrics();
    const fill = new RegExp(`^tendril_datapath_map_pressure\\{map="${MapName.CT6_TCP}"\\} (\\S+)$`, 'm').exec(metrics);
    assert.ok(fill && Number(fill[1]) > 0.5, `the IPv6 table's fill in the metrics: ${fill?.[0] ?? 'none'}`);
  } finally {
    for (const h of held) await client.tcpClose(h);
  }
});
