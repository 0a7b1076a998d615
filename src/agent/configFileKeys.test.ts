// The agent's config file takes the long flags in camelCase, every one of them
// (the list comes from the flag definitions, so a new flag without a sample
// here fails), with the same meaning as on the command line; of the older
// field-name keys only the documented kvstoreOpts stays; an unknown key is
// refused with the closest known one; errors and the printed configuration
// use the same keys.
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { stringify as stringifyYaml } from 'yaml';
import { agentCommand, configFileFlagKeys, type Flags, resolveConfig } from './agentCli.js';
import { CONFIG_USER_KEYS, ConfigError, userConfigView } from './config.js';
import { closestMatch, editDistance } from './didYouMean.js';

/** Each flag's key: its value in YAML, and the same on the command line. */
const SAMPLES: Record<string, { yaml: unknown; argv: string[] }> = {
  nodeName: { yaml: 'tdl-keys', argv: ['--node-name', 'tdl-keys'] },
  stateDir: { yaml: '/run/tdl-keys', argv: ['--state-dir', '/run/tdl-keys'] },
  libDir: { yaml: '/var/lib/tdl-keys', argv: ['--lib-dir', '/var/lib/tdl-keys'] },
  socket: { yaml: '/run/tdl-keys/api.sock', argv: ['--socket', '/run/tdl-keys/api.sock'] },
  kvstore: { yaml: 'etcd', argv: ['--kvstore', 'etcd'] },
  kvstoreOpt: { yaml: ['etcd.endpoints=https://192.0.2.10:2379', 'etcd.callTimeout=5s'], argv: ['--kvstore-opt', 'etcd.endpoints=https://192.0.2.10:2379', '--kvstore-opt', 'etcd.callTimeout=5s'] },
  ipam: { yaml: 'block', argv: ['--ipam', 'block'] },
  podCidr: { yaml: ['10.0.0.0/24', 'fd00::/64'], argv: ['--pod-cidr', '10.0.0.0/24,fd00::/64'] },
  clusterPoolCidr: { yaml: ['10.8.0.0/16'], argv: ['--cluster-pool-cidr', '10.8.0.0/16'] },
  clusterPoolMaskSize: { yaml: 24, argv: ['--cluster-pool-mask-size', '24'] },
  poolCidr: { yaml: '10.9.0.0/16,10.10.0.0/16', argv: ['--pool-cidr', '10.9.0.0/16', '--pool-cidr', '10.10.0.0/16'] },
  blockSize: { yaml: 27, argv: ['--block-size', '27'] },
  strictAffinity: { yaml: true, argv: ['--strict-affinity'] },
  cniPath: { yaml: ['/opt/tdl/bin'], argv: ['--cni-path', '/opt/tdl/bin'] },
  mtu: { yaml: 1400, argv: ['--mtu', '1400'] },
  routingMode: { yaml: 'native', argv: ['--routing-mode', 'native'] },
  tunnelProtocol: { yaml: 'vxlan', argv: ['--tunnel-protocol', 'vxlan'] },
  tunnelPort: { yaml: 8473, argv: ['--tunnel-port', '8473'] },
  nodeIp: { yaml: '192.0.2.7', argv: ['--node-ip', '192.0.2.7'] },
  leaseTtl: { yaml: 30, argv: ['--lease-ttl', '30'] },
  masqueradeCidr: { yaml: ['10.0.0.0/8'], argv: ['--masquerade-cidr', '10.0.0.0/8'] },
  ipamExpiration: { yaml: 5000, argv: ['--ipam-expiration', '5000'] },
  bpffsRoot: { yaml: '/sys/fs/bpf/tdl-keys', argv: ['--bpffs-root', '/sys/fs/bpf/tdl-keys'] },
  datapath: { yaml: 'routing', argv: ['--datapath', 'routing'] },
  traceLevel: { yaml: 'all', argv: ['--trace-level', 'all'] },
  flowHistorySize: { yaml: 100, argv: ['--flow-history-size', '100'] },
  flowMetrics: { yaml: false, argv: ['--no-flow-metrics'] },
  flowMetricsLabels: { yaml: 'workload', argv: ['--flow-metrics-labels', 'workload'] },
  policyAuditMode: { yaml: true, argv: ['--policy-audit-mode'] },
  bpfLxcAttach: { yaml: 'tcx', argv: ['--bpf-lxc-attach', 'tcx'] },
  bpfPolicyEndpointMax: { yaml: 1000, argv: ['--bpf-policy-endpoint-max', '1000'] },
  bpfLxcMax: { yaml: 1001, argv: ['--bpf-lxc-max', '1001'] },
  bpfIpcacheMax: { yaml: 1002, argv: ['--bpf-ipcache-max', '1002'] },
  bpfPolicyMax: { yaml: 1003, argv: ['--bpf-policy-max', '1003'] },
  bpfCtTcpMax: { yaml: 1004, argv: ['--bpf-ct-tcp-max', '1004'] },
  bpfCtAnyMax: { yaml: 1005, argv: ['--bpf-ct-any-max', '1005'] },
  bpfFragMax: { yaml: 1006, argv: ['--bpf-frag-max', '1006'] },
  bpfEventsMax: { yaml: 65536, argv: ['--bpf-events-max', '65536'] },
  bpfLbServiceMax: { yaml: 1008, argv: ['--bpf-lb-service-max', '1008'] },
  bpfLbBackendMax: { yaml: 1009, argv: ['--bpf-lb-backend-max', '1009'] },
  bpfLbRevnatMax: { yaml: 1010, argv: ['--bpf-lb-revnat-max', '1010'] },
  bpfLbAffinityMax: { yaml: 1011, argv: ['--bpf-lb-affinity-max', '1011'] },
  bpfLbMaglevMax: { yaml: 1012, argv: ['--bpf-lb-maglev-max', '1012'] },
  bpfNatMax: { yaml: 1013, argv: ['--bpf-nat-max', '1013'] },
  bpfLbMemberMax: { yaml: 1014, argv: ['--bpf-lb-member-max', '1014'] },
  lbAlgorithm: { yaml: 'maglev', argv: ['--lb-algorithm', 'maglev'] },
  lbMaglevTableSize: { yaml: 65521, argv: ['--lb-maglev-table-size', '65521'] },
  bpfLbExternalClusterip: { yaml: true, argv: ['--bpf-lb-external-clusterip'] },
  bpfNatPortRange: { yaml: '20000-29999', argv: ['--bpf-nat-port-range', '20000-29999'] },
  bpfCtEndpointMax: { yaml: 5000, argv: ['--bpf-ct-endpoint-max', '5000'] },
  devices: { yaml: ['eth0', 'bond0'], argv: ['--devices', 'eth0,bond0'] },
  masquerade: { yaml: false, argv: ['--no-masquerade'] },
  ipv6Masquerade: { yaml: true, argv: ['--ipv6-masquerade'] },
  k8sKubeconfig: { yaml: '/etc/tdl/kubeconfig', argv: ['--k8s-kubeconfig', '/etc/tdl/kubeconfig'] },
  k8sApiServer: { yaml: 'https://192.0.2.1:6443', argv: ['--k8s-api-server', 'https://192.0.2.1:6443'] },
  k8sSyncTimeout: { yaml: 7, argv: ['--k8s-sync-timeout', '7'] },
  k8sNamespace: { yaml: 'tendril', argv: ['--k8s-namespace', 'tendril'] },
  identityAllocationMode: { yaml: 'kvstore', argv: ['--identity-allocation-mode', 'kvstore'] },
  logFile: { yaml: '/var/log/tdl-keys/agent.log', argv: ['--log-file', '/var/log/tdl-keys/agent.log'] },
  logLevel: { yaml: 'debug', argv: ['--log-level', 'debug'] },
  logFormat: { yaml: 'text', argv: ['--log-format', 'text'] },
  prometheusServeAddr: { yaml: '127.0.0.1:9962', argv: ['--prometheus-serve-addr', '127.0.0.1:9962'] },
  flowsListenAddr: { yaml: '127.0.0.1:4245', argv: ['--flows-listen-addr', '127.0.0.1:4245'] },
  flowsTlsCert: { yaml: '/etc/tdl-keys/flows.crt', argv: ['--flows-tls-cert', '/etc/tdl-keys/flows.crt'] },
  flowsTlsKey: { yaml: '/etc/tdl-keys/flows.key', argv: ['--flows-tls-key', '/etc/tdl-keys/flows.key'] },
  flowsTlsClientCa: { yaml: '/etc/tdl-keys/clients.crt', argv: ['--flows-tls-client-ca', '/etc/tdl-keys/clients.crt'] },
  flowsTokenFile: { yaml: '/etc/tdl-keys/flows.token', argv: ['--flows-token-file', '/etc/tdl-keys/flows.token'] },
};
/**
 * Keys whose sample is also the default: the flag has a single choice today
 * (tunnelProtocol), or the only mode the sample's etcd kvstore allows (crd keeps no etcd).
 */
const SAME_AS_DEFAULT = new Set(['tunnelProtocol', 'identityAllocationMode']);

const parse = (argv: string[]): Flags => agentCommand().parse(['node', 'tendril-agent', ...argv]).opts<Flags>();
const refused = (message: RegExp) => (err: unknown) => err instanceof ConfigError && message.test(err.message);

describe('config file keys: the long flags in camelCase', () => {
  let dir: string;
  let n = 0;
  const file = async (doc: Record<string, unknown>): Promise<string> => {
    const path = join(dir, `agent-${n++}.yaml`);
    await writeFile(path, stringifyYaml(doc));
    return path;
  };
  const fromFile = async (doc: Record<string, unknown>) => resolveConfig({ config: await file(doc) });
  const allKeys = () => Object.fromEntries(Object.entries(SAMPLES).map(([k, s]) => [k, s.yaml]));

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tdl-cfgkeys-'));
  });
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('has a sample for every flag, taken from the flag definitions', () => {
    const keys = [...configFileFlagKeys(agentCommand()).keys()];
    assert.ok(keys.includes('podCidr') && keys.includes('kvstoreOpt') && keys.includes('masquerade'), keys.join(' '));
    assert.ok(!keys.includes('config') && !keys.includes('version'));
    assert.deepEqual(keys.filter((k) => !(k in SAMPLES)), [], 'a flag without a sample here: add one');
    assert.deepEqual(Object.keys(SAMPLES).filter((k) => !keys.includes(k)), [], 'a sample for a flag that is gone');
  });

  it('a file with every flag\'s key means what the same flags mean on the command line', async () => {
    const viaFile = await fromFile(allKeys());
    const viaFlags = await resolveConfig(parse(Object.values(SAMPLES).flatMap((s) => s.argv)));
    assert.deepEqual(viaFile, viaFlags);
    assert.deepEqual(viaFile.podCidrs, ['10.0.0.0/24', 'fd00::/64']);
    assert.deepEqual(viaFile.poolCidrs, ['10.9.0.0/16', '10.10.0.0/16']);
    assert.deepEqual(viaFile.kvstoreOpts, { 'etcd.endpoints': 'https://192.0.2.10:2379', 'etcd.callTimeout': '5s' });
    assert.equal(viaFile.leaseTtlSeconds, 30);
    assert.equal(viaFile.socket, '/run/tdl-keys/api.sock');
    assert.equal(viaFile.masquerade, false);
    assert.equal(viaFile.bpfMapSizes?.snat, 1013);
  });

  it('every key takes effect: leaving any one out changes the configuration', async () => {
    const full = await fromFile(allKeys());
    for (const key of Object.keys(SAMPLES)) {
      if (SAME_AS_DEFAULT.has(key)) continue;
      const { [key]: _dropped, ...others } = allKeys();
      // Without it the rest may not hold together (--ipam block without its pools): that is a difference too.
      const without = await fromFile(others).catch((err: unknown) => (err instanceof ConfigError ? err : Promise.reject(err)));
      assert.notDeepEqual(without, full, `${key} made no difference`);
    }
  });

  it('flags on the command line win over the file\'s flag keys', async () => {
    const c = await resolveConfig({ ...parse(['--pod-cidr', '10.5.0.0/24', '--lease-ttl', '9']), config: await file({ podCidr: ['10.0.0.0/24'], leaseTtl: 30 }) });
    assert.deepEqual(c.podCidrs, ['10.5.0.0/24']);
    assert.equal(c.leaseTtlSeconds, 9);
  });

  it('keeps the one older key the docs used (kvstoreOpts, the DaemonSet\'s ConfigMap) and refuses the undocumented field names with the key to use', async () => {
    const c = await fromFile({ podCidr: ['10.0.0.0/24'], kvstoreOpts: { 'etcd.endpoints': 'https://192.0.2.10:2379' }, kvstore: 'etcd' });
    assert.deepEqual(c.kvstoreOpts, { 'etcd.endpoints': 'https://192.0.2.10:2379' });
    await assert.rejects(fromFile({ kvstoreOpts: { a: 'b' }, kvstoreOpt: ['a=c'], podCidr: '10.0.0.0/24' }), refused(/"kvstoreOpts" and "kvstoreOpt" are the same setting/));
    for (const [old, key] of Object.entries(CONFIG_USER_KEYS)) {
      if (old === 'kvstoreOpts') continue;
      await assert.rejects(fromFile({ podCidr: '10.0.0.0/24', [old]: 1 }), refused(new RegExp(`unknown key "${old}" \\(did you mean "${key}"\\?\\)`)), old);
    }
    await assert.rejects(fromFile({ podCidr: '10.0.0.0/24', bpfMapSizes: { lxc: 100 } }), refused(/"bpfMapSizes": each map's size is a key of its own \(bpfLxcMax, /));
  });

  it('a value the configuration refuses is named by the key the user wrote, and its flag', async () => {
    await assert.rejects(fromFile({ podCidr: ['10.0.0.0/24', 'not-a-cidr'] }), refused(/podCidr\[1\] \(--pod-cidr\): must be a CIDR/));
    await assert.rejects(fromFile({ podCidr: '10.0.0.0/24', leaseTtl: 1 }), refused(/^invalid agent configuration: leaseTtl \(--lease-ttl\): /));
    await assert.rejects(fromFile({ podCidr: '10.0.0.0/24', bpfLxcMax: 0 }), refused(/bpfLxcMax \(--bpf-lxc-max\): /));
    await assert.rejects(fromFile({ podCidr: '10.0.0.0/24', ipamExpiration: 10 }), refused(/ipamExpiration \(--ipam-expiration\): /));
    await assert.rejects(resolveConfig(parse(['--pod-cidr', '10.0.0.0/24', '--k8s-sync-timeout', '0'])), refused(/k8sSyncTimeout \(--k8s-sync-timeout\): /));
    await assert.rejects(fromFile({ podCidr: '10.0.0.0/24', leaseTtl: 1 }), (err: unknown) => err instanceof ConfigError && !/Seconds|podCidrs/.test(err.message));
  });

  it('the configuration as printed (GET /config, tendril config) uses the same keys, and reads back as a config file', async () => {
    const viaFile = await fromFile(allKeys());
    const view = userConfigView(viaFile);
    const flagKeys = [...configFileFlagKeys(agentCommand()).keys()];
    assert.deepEqual(Object.keys(view).filter((k) => !flagKeys.includes(k)), [], 'every printed key is a config file key');
    assert.deepEqual(view.podCidr, ['10.0.0.0/24', 'fd00::/64']);
    assert.equal(view.leaseTtl, 30);
    assert.equal(view.bpfNatMax, 1013);
    assert.ok(!('podCidrs' in view) && !('leaseTtlSeconds' in view) && !('bpfMapSizes' in view));
    assert.deepEqual(await fromFile(view), viaFile);
  });

  it('takes kvstoreOpt as a mapping too', async () => {
    const c = await fromFile({ podCidr: '10.0.0.0/24', kvstore: 'etcd', kvstoreOpt: { 'etcd.endpoints': 'https://192.0.2.10:2379' } });
    assert.deepEqual(c.kvstoreOpts, { 'etcd.endpoints': 'https://192.0.2.10:2379' });
  });

  it('refuses an unknown key with the closest known one', async () => {
    await assert.rejects(fromFile({ podCidrz: ['10.0.0.0/24'] }), refused(/unknown key "podCidrz" \(did you mean "podCidr"\?\)/));
    await assert.rejects(fromFile({ podCidr: '10.0.0.0/24', kvstoreOps: ['a=b'] }), refused(/unknown key "kvstoreOps" \(did you mean "kvstoreOpt"\?\)/));
    await assert.rejects(fromFile({ podCidr: '10.0.0.0/24', PodCIDR: 'x' }), refused(/unknown key "PodCIDR" \(did you mean "podCidr"\?\)/));
    await assert.rejects(fromFile({ podCidr: '10.0.0.0/24', leaseTtlSecs: 3 }), refused(/did you mean "leaseTtl(Seconds)?"/));
    await assert.rejects(fromFile({ podCidr: '10.0.0.0/24', somethingElseEntirely: 1 }), (err: unknown) => err instanceof ConfigError && /unknown key "somethingElseEntirely"/.test(err.message) && !/did you mean/.test(err.message));
  });

  it('says which key has a bad value', async () => {
    await assert.rejects(fromFile({ podCidr: '10.0.0.0/24', leaseTtl: 'soon' }), refused(/leaseTtl: --lease-ttl must be a whole number/));
    await assert.rejects(fromFile({ podCidr: '10.0.0.0/24', ipam: 'dhcp' }), refused(/ipam must be one of host-scope/));
    await assert.rejects(fromFile({ podCidr: '10.0.0.0/24', strictAffinity: 'yes' }), refused(/strictAffinity must be true or false/));
    await assert.rejects(fromFile({ podCidr: '10.0.0.0/24', nodeName: ['a', 'b'] }), refused(/nodeName must be a single value/));
  });
});

describe('closestMatch', () => {
  it('measures edits and keeps far-off names out', () => {
    assert.equal(editDistance('kitten', 'sitting'), 3);
    assert.equal(editDistance('', 'abc'), 3);
    assert.equal(closestMatch('logLevle', ['logLevel', 'logFile']), 'logLevel');
    assert.equal(closestMatch('zzzz', ['logLevel', 'logFile']), undefined);
  });
});
