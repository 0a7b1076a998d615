import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { MapName, MAGLEV_DEFAULT_TABLE_SIZE, TUNNEL_DEFAULT_PORT } from '../datapath/bpf/constants.js';
import { agentCommand, type Flags, resolveConfig } from './agentCli.js';
import { bpfMapSizes } from './agentDatapath.js';
import { ConfigError, ConfigErrorCode, defaultConfig, nodeMasqueradeCidrs, validateConfig } from './config.js';

const parse = (...args: string[]): Flags => agentCommand().parse(['node', 'tendril-agent', '--pod-cidr', '10.0.0.0/24', ...args]).opts<Flags>();
const invalid = (field: RegExp) => (err: unknown) => err instanceof ConfigError && err.code === ConfigErrorCode.INVALID && field.test(err.message);

describe('agent flags for services, devices and masquerading', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tdl-agentcli-'));
  });
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('defaults to random selection, the default Maglev size, detected devices and masquerading', async () => {
    const c = await resolveConfig(parse());
    assert.equal(c.lbAlgorithm, 'random');
    assert.equal(c.lbMaglevTableSize, MAGLEV_DEFAULT_TABLE_SIZE);
    assert.equal(c.devices, undefined);
    assert.equal(c.masquerade, true);
    assert.deepEqual(nodeMasqueradeCidrs(c), ['10.0.0.0/24']);
  });

  it('takes the flags', async () => {
    const c = await resolveConfig(parse('--lb-algorithm', 'maglev', '--lb-maglev-table-size', '65521', '--devices', 'eth0,eth1', '--devices', 'bond0', '--no-masquerade'));
    assert.equal(c.lbAlgorithm, 'maglev');
    assert.equal(c.lbMaglevTableSize, 65521);
    assert.deepEqual(c.devices, ['eth0', 'eth1', 'bond0']);
    assert.equal(c.masquerade, false);
    // The eBPF datapath keeps the CIDRs (what is never masqueraded to); the routing datapath gets none.
    assert.deepEqual(nodeMasqueradeCidrs(c), ['10.0.0.0/24']);
    assert.deepEqual(nodeMasqueradeCidrs({ ...c, datapath: 'routing' }), []);
    assert.equal((await resolveConfig(parse('--masquerade'))).masquerade, true);
  });

  it('dual-stack: the eBPF datapath masquerades the IPv6 pod CIDR only with --ipv6-masquerade (off by default); the routing datapath (nftables) both', async () => {
    const c = await resolveConfig(parse('--pod-cidr', 'fd00:10::/112'));
    assert.equal(c.ipv6Masquerade, false);
    assert.deepEqual(nodeMasqueradeCidrs(c), ['10.0.0.0/24']);
    assert.deepEqual(nodeMasqueradeCidrs({ ...c, datapath: 'routing' }), ['10.0.0.0/24', 'fd00:10::/112']);
    const v6 = await resolveConfig(parse('--pod-cidr', 'fd00:10::/112', '--ipv6-masquerade'));
    assert.equal(v6.ipv6Masquerade, true);
    assert.equal(v6.datapath, 'bpf');
    assert.deepEqual(nodeMasqueradeCidrs(v6), ['10.0.0.0/24', 'fd00:10::/112']);
  });

  it('refuses a Maglev size that is no prime in range, an unknown algorithm and bad device names', async () => {
    for (const n of ['16383', '250', '131101']) await assert.rejects(resolveConfig(parse('--lb-maglev-table-size', n)), invalid(/lbMaglevTableSize/), n);
    assert.throws(() => agentCommand().configureOutput({ writeErr: () => {} }).parse(['node', 'a', '--lb-algorithm', 'roundrobin']), /Allowed choices are random, maglev/);
    await assert.rejects(resolveConfig(parse('--devices', 'eth0/x')), invalid(/devices/));
    await assert.rejects(resolveConfig(parse('--devices', 'a-very-long-interface-name')), invalid(/devices/));
  });

  it('sizes the service and NAT maps from flags and the file, the flags winning', async () => {
    const file = join(dir, 'sizes.yaml');
    await writeFile(file, 'bpfLbServiceMax: 1000\nbpfNatMax: 4096\nlbAlgorithm: maglev\nlbMaglevTableSize: 251\ndevices: [eth9]\nmasquerade: false\n');
    const c = await resolveConfig(parse('--config', file, '--bpf-lb-service-max', '2000', '--bpf-lb-backend-max', '3000', '--bpf-lb-revnat-max', '4000', '--bpf-lb-affinity-max', '5000', '--bpf-lb-maglev-max', '600', '--bpf-nat-max', '70000'));
    assert.deepEqual(c.bpfMapSizes, { lbServices: 2000, snat: 70000, lbBackends: 3000, lbRevnat: 4000, lbAffinity: 5000, lbMaglev: 600 });
    assert.equal(c.lbAlgorithm, 'maglev');
    assert.equal(c.lbMaglevTableSize, 251);
    assert.deepEqual(c.devices, ['eth9']);
    assert.equal(c.masquerade, false);
    assert.deepEqual(bpfMapSizes(c), {
      [MapName.LB_SERVICES]: 2000,
      [MapName.LB6_SERVICES]: 2000,
      [MapName.SNAT]: 70000,
      // Both families' SNAT tables, as Cilium's --bpf-nat-global-max.
      [MapName.SNAT6]: 70000,
      [MapName.LB_BACKENDS]: 3000,
      [MapName.LB6_BACKENDS]: 3000,
      [MapName.LB_REVNAT]: 4000,
      [MapName.LB6_REVNAT]: 4000,
      [MapName.LB_AFFINITY]: 5000,
      [MapName.LB6_AFFINITY]: 5000,
      [MapName.LB_MAGLEV]: 600,
    });
    // Conntrack and fragment tables of both families follow one flag each, as the service tables do.
    const ct = await resolveConfig(parse('--bpf-ct-tcp-max', '1000', '--bpf-ct-any-max', '500', '--bpf-frag-max', '300'));
    assert.deepEqual(bpfMapSizes(ct), {
      [MapName.CT_TCP]: 1000,
      [MapName.CT6_TCP]: 1000,
      [MapName.CT_ANY]: 500,
      [MapName.CT6_ANY]: 500,
      [MapName.FRAG]: 300,
      [MapName.FRAG6]: 300,
    });
    await writeFile(file, 'bpfMapSizes:\n  lbServices: 10\n');
    await assert.rejects(resolveConfig(parse('--config', file)), invalid(/"bpfMapSizes": each map's size is a key of its own \(bpfLxcMax, .*bpfLbServiceMax/));
  });

  it('validates the new keys of a merged config', () => {
    const base = { ...defaultConfig(), podCidrs: ['10.0.0.0/24'] };
    assert.throws(() => validateConfig({ ...base, lbAlgorithm: 'hash' }), invalid(/lbAlgorithm/));
    assert.throws(() => validateConfig({ ...base, masquerade: 'yes' }), invalid(/masquerade/));
    assert.throws(() => validateConfig({ ...base, devices: [] }), invalid(/devices/));
  });
});

describe('agent flags for many nodes: routing mode, tunnel, MTU', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tdl-agentcli-nodes-'));
  });
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('defaults: native with the embedded kvstore, tunnel (vxlan on 8472) with etcd, the MTU automatic', async () => {
    const single = await resolveConfig(parse());
    assert.equal(single.routingMode, 'native');
    assert.equal(single.tunnelProtocol, 'vxlan');
    assert.equal(single.tunnelPort, TUNNEL_DEFAULT_PORT);
    assert.equal(single.mtu, undefined, 'no MTU configured: the agent takes the underlay\'s');
    assert.equal((await resolveConfig(parse('--kvstore', 'etcd'))).routingMode, 'tunnel');
    // The file's kvstore decides the default as a flag's does.
    const file = join(dir, 'etcd.yaml');
    await writeFile(file, 'kvstore: etcd\n');
    assert.equal((await resolveConfig(parse('--config', file))).routingMode, 'tunnel');
  });

  it('defaults: crd and tunnel when following an API server without etcd; kvstore with etcd or without Kubernetes', async () => {
    assert.equal((await resolveConfig(parse())).identityAllocationMode, 'kvstore');
    const k8s = await resolveConfig(parse('--k8s-api-server', 'https://192.0.2.1:6443'));
    assert.equal(k8s.identityAllocationMode, 'crd');
    assert.equal(k8s.routingMode, 'tunnel');
    const etcd = await resolveConfig(parse('--k8s-api-server', 'https://192.0.2.1:6443', '--kvstore', 'etcd'));
    assert.equal(etcd.identityAllocationMode, 'kvstore');
    assert.equal(etcd.routingMode, 'tunnel');
    const single = await resolveConfig(parse('--k8s-api-server', 'https://192.0.2.1:6443', '--identity-allocation-mode', 'kvstore'));
    assert.equal(single.routingMode, 'native', 'kvstore mode on the embedded kvstore is one node');
  });

  it('refuses crd with etcd, with block IPAM, and with the agent\'s own cluster-pool CIDRs (the operator hands them out)', async () => {
    const api = ['--k8s-api-server', 'https://192.0.2.1:6443', '--identity-allocation-mode', 'crd'];
    await assert.rejects(resolveConfig(parse(...api, '--kvstore', 'etcd')), (err: unknown) => err instanceof ConfigError && /leave out --kvstore etcd/.test(err.message));
    await assert.rejects(resolveConfig(parse(...api, '--ipam', 'block', '--pool-cidr', '10.0.0.0/16')), (err: unknown) => err instanceof ConfigError && /--ipam block/.test(err.message));
    await assert.rejects(resolveConfig(parse(...api, '--ipam', 'cluster-pool', '--cluster-pool-cidr', '10.0.0.0/16')), (err: unknown) => err instanceof ConfigError && /tendril-operator hands out/.test(err.message));
    assert.equal((await resolveConfig(parse(...api, '--ipam', 'cluster-pool'))).ipam, 'cluster-pool');
    await assert.rejects(resolveConfig(parse('--identity-allocation-mode', 'crd', '--pod-cidr', '10.0.0.0/24', '--k8s-namespace', 'Bad_NS')), (err: unknown) => err instanceof ConfigError && /k8sNamespace/.test(err.message));
  });

  it('takes the flags and the file keys, the flags winning', async () => {
    const c = await resolveConfig(parse('--kvstore', 'etcd', '--routing-mode', 'native', '--mtu', '1400', '--tunnel-port', '4789', '--tunnel-protocol', 'vxlan'));
    assert.equal(c.routingMode, 'native');
    assert.equal(c.mtu, 1400);
    assert.equal(c.tunnelPort, 4789);
    assert.equal((await resolveConfig(parse('--routing-mode', 'tunnel'))).routingMode, 'tunnel', 'tunnel with the embedded store when asked');
    const file = join(dir, 'nodes.yaml');
    await writeFile(file, 'routingMode: tunnel\ntunnelPort: 9000\nmtu: 1350\n');
    const f = await resolveConfig(parse('--config', file));
    assert.deepEqual([f.routingMode, f.tunnelPort, f.mtu], ['tunnel', 9000, 1350]);
    assert.equal((await resolveConfig(parse('--config', file, '--routing-mode', 'native'))).routingMode, 'native');
  });

  it('refuses tunnel mode without the eBPF datapath, unknown modes and protocols, bad ports', async () => {
    await assert.rejects(resolveConfig(parse('--routing-mode', 'tunnel', '--datapath', 'routing')), invalid(/--routing-mode tunnel needs --datapath bpf/));
    // The default follows the kvstore: etcd with the routing datapath must say native.
    await assert.rejects(resolveConfig(parse('--kvstore', 'etcd', '--datapath', 'routing')), invalid(/--routing-mode tunnel needs --datapath bpf/));
    assert.equal((await resolveConfig(parse('--kvstore', 'etcd', '--datapath', 'routing', '--routing-mode', 'native'))).routingMode, 'native');
    const quiet = () => agentCommand().configureOutput({ writeErr: () => {} });
    assert.throws(() => quiet().parse(['node', 'a', '--routing-mode', 'overlay']), /Allowed choices are tunnel, native/);
    assert.throws(() => quiet().parse(['node', 'a', '--tunnel-protocol', 'geneve']), /Allowed choices are vxlan/);
    for (const port of ['0', '65536']) await assert.rejects(resolveConfig(parse('--tunnel-port', port)), invalid(/tunnelPort/), port);
    assert.throws(() => parse('--tunnel-port', 'x'), /--tunnel-port must be a whole number/);
    await assert.rejects(resolveConfig(parse('--mtu', '500')), invalid(/mtu/));
  });

  it('says the new defaults in --help', () => {
    // Commander wraps the descriptions: compare with the line breaks folded.
    const help = agentCommand().helpInformation().replace(/\s+/g, ' ');
    assert.match(help, /--routing-mode <mode>[\s\S]*default tunnel in a cluster \(--kvstore etcd, or --identity-allocation-mode crd\), else native/);
    assert.match(help, /--tunnel-port <port>[\s\S]*default 8472/);
    assert.match(help, /--mtu <n>[\s\S]*default: auto/);
    assert.match(help, /--node-ip <ip>[\s\S]*default: the underlay device's IPv4 address/);
  });
});
