// What a pod's device lets through besides the pod's IPv4, on real packets:
// ICMPv6 echo between a pod and the node (link-local, as ping -6 does)
// meets the pod's policy in the direction that opens it (the replies ride
// conntrack), a router advertisement a pod sends is refused, and a packet
// the node hands a pod's device for another pod's address never reaches the
// pod. Drops show in `tendril monitor` and `tendril bpf metrics` under their
// own reasons. One suite for every address
// family (family.ts; wrappers test/e2e/datapathPodDevice*.test.ts): the
// misdelivered packet is tried on each IP version of the pods' addresses.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { addPod, importPolicyAndWait, type DatapathNode, type Pod, startDatapathNode } from './datapathNode.js';
import { bpfMetrics, dropCounts, eventually, MonitorStream } from './datapathObserve.js';
import { addressIn, type Family, familyName, podCidrsOf, versionsOf } from './family.js';
import { NetnsPool } from './netns.js';
import { networkPolicy } from './policyDocuments.js';
import { requireRoot } from './root.js';
import { runOk } from './run.js';
import { DropReason } from '../../src/datapath/bpf/constants.js';
import type { MonitorEvent } from '../../src/monitor/types.js';

const NS = 'tdl-pd';
/** IPv4 template (family.ts mirrors it on IPv6). */
const POD_CIDR = '10.251.0.0/24';
/** The routing table (in the test's node namespace) of the wrong IPv6 route. */
const WRONG_ROUTE_TABLE = '4242';

/** The suite on one family; `tag` keeps the namespaces of concurrent runs apart. */
export function datapathPodDeviceSuite(family: Family, tag: string): void {
  requireRoot('the pod device tests');
  const pool = new NetnsPool(tag);
  let node: DatapathNode | undefined;
  const pods = new Map<string, Pod>();
  const pod = (app: string): Pod => {
    const p = pods.get(app);
    if (!p) throw new Error(`no pod ${app}`);
    return p;
  };

  before(async () => {
    try {
      const podCidrs = podCidrsOf(family, POD_CIDR);
      node = await startDatapathNode(pool, { nodeName: `tdl-node-pd-${familyName(family)}`, podCidr: podCidrs[0]!, podCidrs });
      for (const app of ['egressdeny', 'ingressdeny', 'open']) pods.set(app, await addPod(pool, node, { name: app, namespace: NS, labels: { app } }));
      await importPolicyAndWait(
        node,
        networkPolicy(NS, 'no-egress', 'podSelector: {matchLabels: {app: egressdeny}}\npolicyTypes: [Egress]') +
          networkPolicy(NS, 'no-ingress', 'podSelector: {matchLabels: {app: ingressdeny}}\npolicyTypes: [Ingress]'),
      );
    } catch (err) {
      await node?.cleanup();
      await pool.cleanup();
      throw err;
    }
  });

  after(async () => {
    await node?.cleanup();
    await pool.cleanup();
  });

  /** The link-local address of a device once duplicate address detection is done with it. */
  async function linkLocal(netns: string, ifName: string): Promise<string> {
    let found = '';
    await eventually(
      async () => {
        const out = JSON.parse(await runOk(['ip', '-n', netns, '-6', '-j', 'addr', 'show', 'dev', ifName, 'scope', 'link'])) as Array<{ addr_info: Array<{ local?: string; scope?: string; tentative?: boolean }> }>;
        // ip -j lists the addresses the filter left out as {}: only a real, settled link-local one counts.
        found = out[0]?.addr_info.find((a) => a.local !== undefined && a.scope === 'link' && !a.tentative)?.local ?? '';
        return found !== '';
      },
      10_000,
      `a usable link-local address on ${ifName} in ${netns}`,
    ).catch(async (err: Error) => {
      throw new Error(`${err.message}: ${await runOk(['ip', '-n', netns, '-6', 'addr', 'show', 'dev', ifName])}`);
    });
    return found;
  }

  /** Echo replies `ping -6` got for 3 requests from namespace `netns` to `target` over `ifName`. */
  async function ping6(netns: string, target: string, ifName: string): Promise<number> {
    const r = await pool.exec(netns, ['ping', '-6', '-n', '-c', '3', '-i', '0.2', '-W', '1', `${target}%${ifName}`]);
    const m = /(\d+) received/.exec(r.stdout);
    if (!m) throw new Error(`ping -6 ${target}%${ifName} in ${netns}: ${r.stdout}${r.stderr}`);
    return Number(m[1]);
  }

  test('ICMPv6 echo between a pod and the node meets the pod\'s policy; neighbour discovery keeps working', async () => {
    const monitor = MonitorStream.start(node!, ['--type', 'drop']);
    try {
      const replies: Record<string, number> = {};
      for (const app of ['egressdeny', 'ingressdeny', 'open']) {
        const p = pod(app);
        const nodeLl = await linkLocal(node!.node, p.endpoint.hostIfName);
        const podLl = await linkLocal(p.netns, 'eth0');
        replies[`${app} -> node`] = await ping6(p.netns, nodeLl, 'eth0');
        replies[`node -> ${app}`] = await ping6(node!.node, podLl, p.endpoint.hostIfName);
      }
      assert.deepEqual(replies, {
        // Egress denied: its requests are dropped; the node's requests pass, and the pod's replies
        // with them (IPv6 conntrack: a reply of a flow policy let in is no new egress flow).
        'egressdeny -> node': 0,
        'node -> egressdeny': 3,
        // Ingress denied: the node's requests are dropped; the pod's requests pass, and the node's replies with them.
        'ingressdeny -> node': 3,
        'node -> ingressdeny': 0,
        // Not selected by any policy: both ways, neighbour discovery included.
        'open -> node': 3,
        'node -> open': 3,
      });
      const drop = await monitor.waitFor((e) => e.type === 'drop' && e.drop?.reason === 'POLICY' && e.destination.ip !== undefined && e.destination.ip.startsWith('fe80:'), 5000, 'an ICMPv6 policy drop');
      assert.equal(drop.drop?.text, DropReason.POLICY.text);
    } finally {
      await monitor.stop();
    }
  });

  test('a router advertisement a pod sends is dropped as ICMP6_NOT_ALLOWED, even with its egress open', async () => {
    const monitor = MonitorStream.start(node!, ['--type', 'drop']);
    try {
      // A raw ICMPv6 socket: the kernel fills in the checksum. Type 134, hop limit 255 as a router would send it.
      const script = [
        'import socket',
        's = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)',
        's.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)',
        'idx = socket.if_nametoindex("eth0")',
        's.sendto(bytes([134, 0, 0, 0, 64, 0, 7, 8]) + bytes(8), ("ff02::1", 0, 0, idx))',
      ].join('\n');
      const refused = (e: MonitorEvent) => e.type === 'drop' && e.drop?.reason === 'ICMP6_NOT_ALLOWED';
      // Sent until the monitor, which only shows what happens after it subscribed, has seen one.
      await eventually(
        async () => {
          const r = await pool.exec(pod('open').netns, ['python3', '-c', script]);
          assert.equal(r.code, 0, r.stderr);
          await new Promise((res) => setTimeout(res, 200));
          return monitor.events.some(refused);
        },
        10_000,
        'the router advertisement\'s drop in tendril monitor',
      );
      const drop = monitor.events.find(refused)!;
      assert.deepEqual(drop.drop, { reason: 'ICMP6_NOT_ALLOWED', code: Math.abs(DropReason.ICMP6_NOT_ALLOWED.code), text: DropReason.ICMP6_NOT_ALLOWED.text });
      assert.ok((dropCounts(await bpfMetrics(node!))['ICMP6_NOT_ALLOWED/egress'] ?? 0) >= 1);
    } finally {
      await monitor.stop();
    }
  });

  for (const v of versionsOf(family)) {
    test(`a packet the node sends out one pod's device for another pod's IPv${v} address never reaches the pod: NOT_FOR_ENDPOINT`, async () => {
      const [victim, other] = [pod('open'), pod('ingressdeny')];
      const otherIp = addressIn(`${NS}/ingressdeny`, other.addresses, v);
      const [nftFamily, nftMatch] = v === 4 ? ['ip', 'ip daddr'] : ['ip6', 'ip6 daddr'];
      const device = victim.endpoint.hostIfName;
      // A counter in the pod's namespace (gone with it) for packets addressed to the other pod.
      const inPod = (argv: string[]) => ['nsenter', `--net=${victim.netnsPath}`, '--', ...argv];
      await runOk(inPod(['nft', '-f', '-']), { input: `table ${nftFamily} tdlprobe {\n chain pre {\n  type filter hook prerouting priority -300;\n  ${nftMatch} ${otherIp} counter\n }\n}\n` });
      const arrived = async () => {
        const out = JSON.parse(await runOk(inPod(['nft', '-j', 'list', 'table', nftFamily, 'tdlprobe']))) as { nftables: Array<{ rule?: { expr: Array<{ counter?: { packets: number } }> } }> };
        return out.nftables.flatMap((o) => o.rule?.expr ?? []).find((e) => e.counter)?.counter?.packets ?? -1;
      };
      const monitor = MonitorStream.start(node!, ['--type', 'drop']);
      const dropsBefore = dropCounts(await bpfMetrics(node!))['NOT_FOR_ENDPOINT/ingress'] ?? 0;
      try {
        // The node's stack is told the other pod lives behind this device (a wrong neighbour entry), and pings it there.
        const victimMac = JSON.parse(await runOk(['ip', '-n', victim.netns, '-j', 'link', 'show', 'dev', 'eth0']))[0].address as string;
        await runOk(['ip', '-n', node!.node, 'neigh', 'replace', otherIp, 'lladdr', victimMac, 'dev', device, 'nud', 'permanent']);
        // IPv6 will not send out a device (ping -I) that has no route to the address: a route in a
        // table of its own, for packets bound to this device only, leaves the agent's routes alone.
        if (v === 6) {
          await runOk(['ip', '-n', node!.node, '-6', 'route', 'replace', `${otherIp}/128`, 'dev', device, 'table', WRONG_ROUTE_TABLE]);
          await runOk(['ip', '-n', node!.node, '-6', 'rule', 'add', 'oif', device, 'lookup', WRONG_ROUTE_TABLE, 'priority', '10']);
        }
        const refused = (e: MonitorEvent) => e.type === 'drop' && e.drop?.reason === 'NOT_FOR_ENDPOINT' && e.destination.ip === otherIp;
        // Pinged until the monitor, which only shows what happens after it subscribed, has seen a drop.
        let lastPing = '';
        await eventually(
          async () => {
            const r = await pool.exec(node!.node, ['ping', `-${v}`, '-n', '-c', '3', '-i', '0.2', '-W', '1', '-I', device, otherIp]);
            lastPing = `${r.stdout}${r.stderr}`.trim().split('\n').slice(-2).join(' / ');
            return monitor.events.some(refused);
          },
          10_000,
          'the NOT_FOR_ENDPOINT drop in tendril monitor',
        ).catch(async (err: Error) => {
          // What happened instead: whether the packets got into the wrong pod, and what the monitor saw.
          const seen = monitor.events.slice(-5).map((e) => `${e.drop?.reason ?? e.type} ${e.source.ip ?? '?'} -> ${e.destination.ip ?? '?'}`);
          throw new Error(`${err.message}; packets for ${otherIp} that reached this pod: ${await arrived()}; last drops: ${JSON.stringify(seen)}; ping: ${lastPing}`);
        });
        const drop = monitor.events.find(refused)!;
        assert.equal(drop.drop?.text, DropReason.NOT_FOR_ENDPOINT.text);
        assert.equal(drop.destination.ip, otherIp);
        assert.ok((dropCounts(await bpfMetrics(node!))['NOT_FOR_ENDPOINT/ingress'] ?? 0) - dropsBefore >= 3);
        assert.equal(await arrived(), 0, 'no packet for the other pod reached this pod');
      } finally {
        await monitor.stop();
        await pool.exec(node!.node, ['ip', 'neigh', 'del', otherIp, 'dev', device]);
        if (v === 6) {
          await pool.exec(node!.node, ['ip', '-6', 'rule', 'del', 'oif', device, 'lookup', WRONG_ROUTE_TABLE, 'priority', '10']);
          await pool.exec(node!.node, ['ip', '-6', 'route', 'flush', 'table', WRONG_ROUTE_TABLE]);
        }
        await pool.exec(victim.netns, ['nft', 'delete', 'table', nftFamily, 'tdlprobe']);
      }
    });
  }
}
