import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { MapName, MAGLEV_DEFAULT_TABLE_SIZE } from '../datapath/bpf/constants.js';
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

  it('refuses a Maglev size that is no prime in range, an unknown algorithm and bad device names', async () => {
    for (const n of ['16383', '250', '131101']) await assert.rejects(resolveConfig(parse('--lb-maglev-table-size', n)), invalid(/lbMaglevTableSize/), n);
    assert.throws(() => agentCommand().configureOutput({ writeErr: () => {} }).parse(['node', 'a', '--lb-algorithm', 'roundrobin']), /Allowed choices are random, maglev/);
    await assert.rejects(resolveConfig(parse('--devices', 'eth0/x')), invalid(/devices/));
    await assert.rejects(resolveConfig(parse('--devices', 'a-very-long-interface-name')), invalid(/devices/));
  });

  it('sizes the service and NAT maps from flags and the file, the flags winning', async () => {
    const file = join(dir, 'sizes.yaml');
    await writeFile(file, 'bpfMapSizes:\n  lbServices: 1000\n  snat: 4096\nlbAlgorithm: maglev\nlbMaglevTableSize: 251\ndevices: [eth9]\nmasquerade: false\n');
    const c = await resolveConfig(parse('--config', file, '--bpf-lb-service-max', '2000', '--bpf-lb-backend-max', '3000', '--bpf-lb-revnat-max', '4000', '--bpf-lb-affinity-max', '5000', '--bpf-lb-maglev-max', '600', '--bpf-nat-max', '70000'));
    assert.deepEqual(c.bpfMapSizes, { lbServices: 2000, snat: 70000, lbBackends: 3000, lbRevnat: 4000, lbAffinity: 5000, lbMaglev: 600 });
    assert.equal(c.lbAlgorithm, 'maglev');
    assert.equal(c.lbMaglevTableSize, 251);
    assert.deepEqual(c.devices, ['eth9']);
    assert.equal(c.masquerade, false);
    assert.deepEqual(bpfMapSizes(c), {
      [MapName.LB_SERVICES]: 2000,
      [MapName.SNAT]: 70000,
      [MapName.LB_BACKENDS]: 3000,
      [MapName.LB_REVNAT]: 4000,
      [MapName.LB_AFFINITY]: 5000,
      [MapName.LB_MAGLEV]: 600,
    });
    await writeFile(file, 'bpfMapSizes:\n  lbFrontends: 10\n');
    await assert.rejects(resolveConfig(parse('--config', file)), invalid(/bpfMapSizes/));
  });

  it('validates the new keys of a merged config', () => {
    const base = { ...defaultConfig(), podCidrs: ['10.0.0.0/24'] };
    assert.throws(() => validateConfig({ ...base, lbAlgorithm: 'hash' }), invalid(/lbAlgorithm/));
    assert.throws(() => validateConfig({ ...base, masquerade: 'yes' }), invalid(/masquerade/));
    assert.throws(() => validateConfig({ ...base, devices: [] }), invalid(/devices/));
  });
});
