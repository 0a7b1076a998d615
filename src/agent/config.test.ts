import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { CodedError } from '../errors/codedError.js';
import { ConfigError, ConfigErrorCode, defaultConfig, readConfigFile, validateConfig } from './config.js';
import { configWithNode } from '../k8s/index.js';

const isConfigError = (code: ConfigErrorCode, message?: RegExp) => (err: unknown) =>
  err instanceof ConfigError && err instanceof CodedError && err.name === 'ConfigError' && err.code === code && (message === undefined || message.test(err.message));

describe('agent configuration', () => {
  const hostScope = (extra: Record<string, unknown>) => ({ ...defaultConfig(), podCidrs: ['10.0.0.0/24'], ...extra });

  it('the flows listener: an address other hosts reach needs TLS or a token; its options need the address', () => {
    assert.equal(validateConfig(hostScope({ flowsListenAddr: '127.0.0.1:4245' })).flowsListenAddr, '127.0.0.1:4245');
    assert.equal(validateConfig(hostScope({ flowsListenAddr: '10.0.0.1:4245', flowsTokenFile: '/etc/t' })).flowsTokenFile, '/etc/t');
    assert.equal(validateConfig(hostScope({ flowsListenAddr: ':4245', flowsTlsCert: '/etc/c', flowsTlsKey: '/etc/k' })).flowsTlsKey, '/etc/k');
    assert.throws(() => validateConfig(hostScope({ flowsListenAddr: '0.0.0.0:4245' })), isConfigError(ConfigErrorCode.INVALID, /--flows-listen-addr 0\.0\.0\.0:4245 can be reached from other hosts.*--flows-token-file/));
    assert.throws(() => validateConfig(hostScope({ flowsTokenFile: '/etc/t' })), isConfigError(ConfigErrorCode.INVALID, /--flows-token-file configure the flows listener: give --flows-listen-addr too/));
    assert.throws(() => validateConfig(hostScope({ flowsListenAddr: '127.0.0.1:4245', flowsTlsKey: '/etc/k' })), isConfigError(ConfigErrorCode.INVALID, /--flows-tls-cert and --flows-tls-key go together/));
    assert.throws(() => validateConfig(hostScope({ flowsListenAddr: 'nowhere' })), isConfigError(ConfigErrorCode.INVALID, /flowsListenAddr \(--flows-listen-addr\)/));
  });

  it('checks addresses and CIDRs with src/netip', () => {
    assert.equal(validateConfig(hostScope({ nodeIp: 'fd00::1' })).nodeIp, 'fd00::1');
    assert.equal(validateConfig(hostScope({ nodeIp: '192.0.2.1' })).nodeIp, '192.0.2.1');
    // CIDR shape only: host bits and a zero-padded length pass here, IPAM applies its own rules.
    assert.deepEqual(validateConfig(hostScope({ podCidrs: ['10.0.0.5/24', '10.1.0.0/016', 'fd00::/64'], datapath: 'routing' })).podCidrs, ['10.0.0.5/24', '10.1.0.0/016', 'fd00::/64']);
    for (const nodeIp of ['10.0.0.1/32', 'fe80::1%eth0', '10.0.0.256', 'node1']) {
      assert.throws(() => validateConfig(hostScope({ nodeIp })), isConfigError(ConfigErrorCode.INVALID, /nodeIp/), nodeIp);
    }
    for (const cidr of ['10.0.0.0', '10.0.0.0/33', '10.0.0.0/0008', 'fd00::/129']) {
      assert.throws(() => validateConfig(hostScope({ podCidrs: [cidr] })), isConfigError(ConfigErrorCode.INVALID, /podCidr\[0\] \(--pod-cidr\)/), cidr);
    }
    assert.throws(() => validateConfig({ ...defaultConfig(), ipam: 'block' }), isConfigError(ConfigErrorCode.INVALID, /--pool-cidr/));
  });

  it('takes an IPv6 pod CIDR (dual-stack: both families) with the eBPF datapath in native routing, in every IPAM mode', () => {
    for (const extra of [
      { podCidrs: ['10.0.0.0/24', 'fd00::/64'] },
      { podCidrs: ['fd00::/64'] },
      { ipam: 'cluster-pool', clusterPoolCidrs: ['10.8.0.0/16', 'fd00::/104'] },
      { ipam: 'block', poolCidrs: ['10.9.0.0/16', 'fd00::/100'] },
    ]) {
      const c = validateConfig(hostScope({ ...extra, routingMode: 'native' }));
      assert.equal(c.datapath, 'bpf');
      assert.equal(c.ipv6Masquerade, false);
    }
    const k8s = validateConfig({ ...defaultConfig(), ipam: 'kubernetes' });
    assert.equal(k8s.routingMode, 'native');
    const node = { name: 'tdl-n1', podCidrs: ['10.0.0.0/24', 'fd00::/64'], internalIps: [], externalIps: [] };
    assert.deepEqual(configWithNode(k8s, node).podCidrs, node.podCidrs);
  });

  it('takes IPv6 pod CIDRs through the eBPF overlay too; refuses IPv6 masquerade, which it does not do yet, saying what to give instead', () => {
    for (const [flag, extra] of [
      ['--pod-cidr', { podCidrs: ['10.0.0.0/24', 'fd00::/64'] }],
      ['--cluster-pool-cidr', { ipam: 'cluster-pool', clusterPoolCidrs: ['fd00::/104'] }],
      ['--pool-cidr', { ipam: 'block', poolCidrs: ['10.9.0.0/16', 'fd00::/100'] }],
    ] as const) {
      assert.doesNotThrow(() => validateConfig(hostScope({ ...extra, routingMode: 'tunnel' })), flag);
      // The etcd kvstore's default routing mode is the overlay.
      assert.doesNotThrow(() => validateConfig({ ...hostScope(extra), kvstore: 'etcd' }), flag);
    }
    // The eBPF datapath masquerades IPv6 (tendril_snat6), the routing datapath with nftables.
    assert.equal(validateConfig(hostScope({ podCidrs: ['10.0.0.0/24', 'fd00::/64'], routingMode: 'native', ipv6Masquerade: true })).ipv6Masquerade, true);
    assert.doesNotThrow(() => validateConfig(hostScope({ podCidrs: ['10.0.0.0/24', 'fd00::/64'], datapath: 'routing', routingMode: 'native', ipv6Masquerade: true })));
    // --ipam kubernetes: the Node's spec.podCIDRs, once it is known.
    const k8s = validateConfig({ ...defaultConfig(), ipam: 'kubernetes', kvstore: 'etcd' });
    const node = { name: 'tdl-n1', podCidrs: ['10.0.0.0/24', 'fd00::/64'], internalIps: [], externalIps: [] };
    // Both routing modes carry IPv6 pods (the overlay over an IPv4 underlay).
    assert.deepEqual(configWithNode(k8s, node).podCidrs, node.podCidrs);
    assert.deepEqual(configWithNode({ ...k8s, routingMode: 'native' }, node).podCidrs, node.podCidrs);
  });

  it('resolves the routing mode from the kvstore when not given, so the config holds the mode in effect', () => {
    assert.equal(validateConfig(hostScope({})).routingMode, 'native');
    assert.equal(validateConfig(hostScope({ kvstore: 'etcd' })).routingMode, 'tunnel');
    assert.equal(validateConfig(hostScope({ kvstore: 'etcd', routingMode: 'native' })).routingMode, 'native');
    assert.equal(validateConfig(hostScope({ mtu: undefined })).mtu, undefined);
    assert.throws(() => validateConfig(hostScope({ routingMode: 'tunnel', datapath: 'routing' })), isConfigError(ConfigErrorCode.INVALID, /--routing-mode tunnel needs --datapath bpf/));
    assert.throws(() => validateConfig(hostScope({ routingMode: 'geneve' })), isConfigError(ConfigErrorCode.INVALID, /routingMode/));
    assert.throws(() => validateConfig(hostScope({ tunnelProtocol: 'geneve' })), isConfigError(ConfigErrorCode.INVALID, /tunnelProtocol/));
    assert.throws(() => validateConfig(hostScope({ tunnelPort: 70000 })), isConfigError(ConfigErrorCode.INVALID, /tunnelPort/));
  });

  describe('the config file', () => {
    let dir: string;
    before(async () => {
      dir = await mkdtemp(join(tmpdir(), 'tdl-config-'));
    });
    after(async () => {
      if (dir) await rm(dir, { recursive: true, force: true });
    });

    it('says which of unreadable or malformed it is, keeping the cause', async () => {
      const missing = join(dir, 'missing.yaml');
      await assert.rejects(readConfigFile(missing), (err: unknown) => isConfigError(ConfigErrorCode.FILE_UNREADABLE)(err) && (err as ConfigError).cause instanceof Error);
      const bad = join(dir, 'bad.yaml');
      await writeFile(bad, 'mtu: [1500\n');
      await assert.rejects(readConfigFile(bad), isConfigError(ConfigErrorCode.FILE_MALFORMED, /not valid YAML/));
      const list = join(dir, 'list.yaml');
      await writeFile(list, '- a\n- b\n');
      await assert.rejects(readConfigFile(list), isConfigError(ConfigErrorCode.FILE_MALFORMED, /must be a mapping/));
      const good = join(dir, 'good.yaml');
      await writeFile(good, 'mtu: 1400\n');
      assert.deepEqual(await readConfigFile(good), { mtu: 1400 });
    });
  });
});
