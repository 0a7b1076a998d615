// libcni (through `tendril cni`) driving Debian's reference plugins into real
// network namespaces. Everything runs inside a "node" namespace, so bridges,
// iptables rules and forwarding never touch the host's root namespace.
import assert from 'node:assert/strict';
import { access, mkdir, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { addressesIn, linkExists, NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';
import { run, type RunResult } from '../support/run.js';
import { makeScratchDir } from '../support/skelFixture.js';
import { REFERENCE_PLUGIN_DIR, TENDRIL_BIN } from '../support/tendrilBin.js';

requireRoot('the reference-plugin end-to-end test');

const pool = new NetnsPool('rp');
let node = '';
let scratch = '';
let confDir = '';
let cacheDir = '';
let cleanupScratch = async () => {};

before(async () => {
  await access(join(REFERENCE_PLUGIN_DIR, 'bridge')).catch(() => {
    throw new Error(`reference plugins missing in ${REFERENCE_PLUGIN_DIR}: install containernetworking-plugins (make deps)`);
  });
  ({ dir: scratch, cleanup: cleanupScratch } = await makeScratchDir());
  confDir = join(scratch, 'net.d');
  cacheDir = join(scratch, 'cache');
  await mkdir(confDir);
  node = (await pool.add('node')).name;
});
after(async () => {
  await pool.cleanup();
  await cleanupScratch();
});

function cni(verb: string, args: string[], env: Record<string, string> = {}): Promise<RunResult> {
  const cacheArgs = verb === 'list' ? [] : ['--cache-dir', cacheDir];
  return run(['nsenter', `--net=/var/run/netns/${node}`, '--', TENDRIL_BIN, 'cni', verb, ...args, ...cacheArgs], {
    env: { ...process.env, NETCONFPATH: confDir, CNI_PATH: REFERENCE_PLUGIN_DIR, ...env },
  });
}

async function cniOk(verb: string, args: string[], env: Record<string, string> = {}): Promise<string> {
  const r = await cni(verb, args, env);
  assert.equal(r.code, 0, `tendril cni ${verb} ${args.join(' ')} failed: ${r.stderr}`);
  return r.stdout;
}

async function writeConf(file: string, conf: unknown): Promise<void> {
  await writeFile(join(confDir, file), JSON.stringify(conf));
}

async function ping(fromNs: string, ip: string): Promise<boolean> {
  return (await pool.exec(fromNs, ['ping', '-c', '1', '-W', '2', ip])).code === 0;
}

async function hostLocalIps(dataDir: string, network: string): Promise<string[]> {
  const names = await readdir(join(dataDir, network)).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return [] as string[]; // nothing allocated yet
    throw err;
  });
  return names.filter((n) => /^\d+\.\d+\.\d+\.\d+$/.test(n)).sort();
}

interface AnyIp {
  address: string;
  version?: string;
  gateway?: string;
}

const versions = ['0.3.1', '0.4.0', '1.0.0'] as const;
for (const [i, version] of versions.entries()) {
  describe(`bridge + host-local, portmap and tuning chained, cniVersion ${version}`, () => {
    const network = `tdlbridge${i}`;
    const bridge = `tdlbr${i}`;
    const subnet = `10.213.${i}.0/24`;
    let dataDir = '';
    const pods: Record<string, { ns: string; path: string; ip: string }> = {};

    before(async () => {
      dataDir = join(scratch, `ipam-${i}`);
      await writeConf(`10-${network}.conflist`, {
        cniVersion: version,
        name: network,
        plugins: [
          { type: 'bridge', bridge, isGateway: true, ipMasq: false, ipam: { type: 'host-local', subnet, dataDir } },
          { type: 'portmap', capabilities: { portMappings: true }, snat: false },
          { type: 'tuning', sysctl: { 'net.ipv4.conf.eth0.arp_notify': '1' } },
        ],
      });
    });

    test('ADD gives each pod an address in the conf\'s result version, and they talk', async () => {
      for (const name of ['a', 'b']) {
        const ns = await pool.add(`${i}${name}`);
        const out = await cniOk('add', [network, ns.path], {
          CAP_ARGS: JSON.stringify({ portMappings: [{ hostPort: 18080 + i, containerPort: 80, protocol: 'tcp' }] }),
        });
        const result = JSON.parse(out) as { cniVersion: string; ips: AnyIp[]; interfaces: Array<{ name: string; sandbox?: string }> };
        assert.equal(result.cniVersion, version);
        const ip = result.ips[0]!;
        assert.equal(ip.version, version === '1.0.0' ? undefined : '4', 'ips[].version exists only before 1.0.0');
        assert.equal(ip.gateway, `10.213.${i}.1`);
        assert.ok(result.interfaces.some((x) => x.name === 'eth0' && x.sandbox === ns.path));
        assert.deepEqual(await addressesIn(pool, ns.name, 'eth0'), [ip.address]);
        pods[name] = { ns: ns.name, path: ns.path, ip: ip.address.split('/')[0]! };
      }
      assert.ok(await ping(pods.a!.ns, pods.b!.ip), 'pod a reaches pod b over the bridge');
      assert.ok(await ping(pods.b!.ns, pods.a!.ip), 'pod b reaches pod a over the bridge');
      assert.deepEqual(await hostLocalIps(dataDir, network), [pods.a!.ip, pods.b!.ip].sort());
    });

    test('portmap got the port mapping from CAP_ARGS, tuning set the sysctl', async () => {
      const nat = await pool.exec(node, ['iptables', '-t', 'nat', '-S']);
      assert.equal(nat.code, 0, nat.stderr);
      assert.match(nat.stdout, new RegExp(`--dport ${18080 + i} .*DNAT --to-destination ${pods.a!.ip.replace(/\./g, '\\.')}:80`));
      const sysctl = await pool.exec(pods.a!.ns, ['cat', '/proc/sys/net/ipv4/conf/eth0/arp_notify']);
      assert.equal(sysctl.stdout.trim(), '1');
    });

    test(version === '0.3.1' ? 'CHECK is refused for a 0.3.1 list' : 'CHECK passes while the attachment is intact', async () => {
      const r = await cni('check', [network, pods.a!.path]);
      if (version === '0.3.1') {
        assert.equal(r.code, 1);
        assert.equal((JSON.parse(r.stderr) as { code: number }).code, 1);
      } else {
        assert.equal(r.code, 0, r.stderr);
      }
    });

    test('the result cache holds each attachment and DEL removes links, addresses and cache', async () => {
      const cached = await readdir(join(cacheDir, 'results'));
      assert.equal(cached.filter((f) => f.startsWith(`${network}-`)).length, 2);
      for (const pod of Object.values(pods)) {
        // As with libcni, capability args are the caller's to repeat on DEL.
        await cniOk('del', [network, pod.path], { CAP_ARGS: JSON.stringify({ portMappings: [{ hostPort: 18080 + i, containerPort: 80, protocol: 'tcp' }] }) });
        assert.equal(await linkExists(pool, pod.ns, 'eth0'), false, 'eth0 is gone from the pod');
      }
      assert.deepEqual(await hostLocalIps(dataDir, network), [], 'host-local released every address');
      assert.equal((await readdir(join(cacheDir, 'results'))).filter((f) => f.startsWith(`${network}-`)).length, 0);
      const nat = await pool.exec(node, ['iptables', '-t', 'nat', '-S']);
      assert.doesNotMatch(nat.stdout, new RegExp(`--dport ${18080 + i} `), 'portmap removed its rule');
      // DEL is idempotent: a second one succeeds.
      await cniOk('del', [network, pods.a!.path]);
    });
  });
}

describe('ptp + host-local and loopback, routed through the node', () => {
  const network = 'tdlptp';
  let dataDir = '';
  before(async () => {
    dataDir = join(scratch, 'ipam-ptp');
    await writeConf('20-tdlptp.conflist', {
      cniVersion: '1.0.0',
      name: network,
      plugins: [{ type: 'ptp', ipMasq: false, ipam: { type: 'host-local', subnet: '10.214.0.0/24', dataDir } }],
    });
    await writeConf('30-tdllo.conf', { cniVersion: '1.0.0', name: 'tdllo', type: 'loopback' });
    const fwd = await pool.exec(node, ['sysctl', '-w', 'net.ipv4.ip_forward=1']);
    assert.equal(fwd.code, 0, fwd.stderr);
  });

  test('two ptp pods reach each other via the node\'s routes; loopback comes up', async () => {
    const ips: string[] = [];
    const nss: string[] = [];
    for (const name of ['pa', 'pb']) {
      const ns = await pool.add(name);
      await pool.exec(ns.name, ['ip', 'link', 'set', 'lo', 'down']);
      await cniOk('add', ['tdllo', ns.path], { CNI_IFNAME: 'lo' });
      const lo = await pool.exec(ns.name, ['ip', '-j', 'link', 'show', 'lo']);
      assert.match(lo.stdout, /"UP"/);
      const result = JSON.parse(await cniOk('add', [network, ns.path])) as { ips: AnyIp[] };
      ips.push(result.ips[0]!.address.split('/')[0]!);
      nss.push(ns.name);
    }
    assert.ok(await ping(nss[0]!, ips[1]!));
    assert.deepEqual(await hostLocalIps(dataDir, network), [...ips].sort(), 'host-local holds both addresses before DEL');
    const r = await cni('check', [network, `/var/run/netns/${nss[0]}`]);
    assert.equal(r.code, 0, r.stderr);
    for (const ns of nss) {
      await cniOk('del', [network, `/var/run/netns/${ns}`]);
      await cniOk('del', ['tdllo', `/var/run/netns/${ns}`], { CNI_IFNAME: 'lo' });
    }
    assert.deepEqual(await hostLocalIps(dataDir, network), []);
  });
});

describe('GC', () => {
  test('removes a stale attachment and keeps a valid one', async () => {
    const network = 'tdlgc';
    const dataDir = join(scratch, 'ipam-gc');
    await writeConf('40-tdlgc.conflist', {
      cniVersion: '1.0.0',
      name: network,
      plugins: [{ type: 'bridge', bridge: 'tdlbrgc', ipam: { type: 'host-local', subnet: '10.215.0.0/24', dataDir } }],
    });
    const live = await pool.add('gclive');
    const stale = await pool.add('gcstale');
    await cniOk('add', [network, live.path], { CNI_CONTAINERID: 'tdl-live' });
    await cniOk('add', [network, stale.path], { CNI_CONTAINERID: 'tdl-stale' });
    assert.equal((await hostLocalIps(dataDir, network)).length, 2);
    await cniOk('gc', [network, '--valid', 'tdl-live/eth0']);
    assert.equal(await linkExists(pool, stale.name, 'eth0'), false, 'the stale attachment was deleted');
    assert.equal(await linkExists(pool, live.name, 'eth0'), true, 'the valid attachment stays');
    assert.equal((await hostLocalIps(dataDir, network)).length, 1);
    await cniOk('del', [network, live.path], { CNI_CONTAINERID: 'tdl-live' });
  });
});

describe('bad input changes nothing', () => {
  before(async () => {
    await writeFile(join(confDir, '50-tdlbroken.conflist'), '{"name": "tdlbroken", "plugins": [');
    await writeConf('51-tdlunknown.conflist', { cniVersion: '1.0.0', name: 'tdlunknown', plugins: [{ type: 'tdl-no-such-plugin' }] });
    await writeConf('52-tdlok.conflist', {
      cniVersion: '1.0.0',
      name: 'tdlok',
      plugins: [{ type: 'bridge', bridge: 'tdlbrok', ipam: { type: 'host-local', subnet: '10.216.0.0/24', dataDir: join(scratch, 'ipam-ok') } }],
    });
  });

  const cases: Array<[string, string[], Record<string, string>, number]> = [
    ['a broken config file is not loadable', ['tdlbroken'], {}, 7],
    ['an unknown plugin', ['tdlunknown'], {}, 50],
    ['a bad interface name', ['tdlok'], { CNI_IFNAME: 'this-name-is-too-long' }, 4],
    ['invalid CAP_ARGS', ['tdlok'], { CAP_ARGS: '{not json' }, 4],
    ['malformed CNI_ARGS', ['tdlok'], { CNI_ARGS: 'novalue' }, 4],
  ];
  for (const [k, [name, args, env, code]] of cases.entries()) {
    test(`${name} → CNI error code ${code}, exit 1, no link created`, async () => {
      const ns = await pool.add(`bad${k}`);
      const r = await cni('add', [...args, ns.path], env);
      assert.equal(r.code, 1);
      const err = JSON.parse(r.stderr) as { code: number; msg: string };
      assert.equal(err.code, code, r.stderr);
      assert.ok(err.msg.length > 0);
      assert.equal(await linkExists(pool, ns.name, 'eth0'), false);
      assert.equal(await linkExists(pool, node, 'tdlbrok'), false);
    });
  }

  test('`tendril cni list` shows the good configs and reports the broken one', async () => {
    const r = await cni('list', []);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^tdlok\t1\.0\.0\tbridge\t/m);
    assert.match(r.stderr, /invalid: .*50-tdlbroken\.conflist/);
  });
});
