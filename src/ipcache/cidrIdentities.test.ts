import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parsePrefix } from '../netip/index.js';
import { LocalIdentityTable } from '../policy/index.js';
import { IpcacheCidrIdentities, POLICY_CIDR_OWNER } from './cidrIdentities.js';
import { IPCache } from './ipcache.js';
import { NodeAddressEntries } from './nodeAddresses.js';

const p = (t: string) => parsePrefix(t);

test('a CIDR identity comes with a generated ipcache entry that goes with its last reference', () => {
  const ipcache = new IPCache();
  const cidrs = new IpcacheCidrIdentities(new LocalIdentityTable(), ipcache);
  const [a, b] = cidrs.acquireCidrIdentities([p('192.0.2.0/24'), p('198.51.100.0/24')]);
  assert.deepEqual(ipcache.get('192.0.2.0/24'), { prefix: '192.0.2.0/24', identity: a!.id, source: 'generated', owner: POLICY_CIDR_OWNER });
  assert.equal(ipcache.get('198.51.100.0/24')?.identity, b!.id);
  // A second reference to the same prefix: same identity, one entry.
  const [again] = cidrs.acquireCidrIdentities([p('192.0.2.0/24')]);
  assert.equal(again!.id, a!.id);
  assert.deepEqual(cidrs.releaseCidrIdentities([p('192.0.2.0/24')]), []);
  assert.equal(ipcache.get('192.0.2.0/24')?.identity, a!.id, 'still referenced');
  assert.deepEqual(cidrs.releaseCidrIdentities([p('192.0.2.0/24'), p('198.51.100.0/24')]).sort(), [a!.id, b!.id].sort());
  assert.equal(ipcache.get('192.0.2.0/24'), undefined);
  assert.equal(ipcache.size, 0);
});

test('a generated CIDR entry never hides a pod inside the range (longest prefix) nor a local entry of the same prefix', () => {
  const ipcache = new IPCache();
  const cidrs = new IpcacheCidrIdentities(new LocalIdentityTable(), ipcache);
  const [net] = cidrs.acquireCidrIdentities([p('10.0.0.0/8'), p('10.1.2.3/32')]);
  ipcache.upsert('10.1.2.3', { identity: 300, source: 'local', owner: 'endpoint:1' });
  assert.equal(ipcache.lookup('10.1.2.3')?.identity, 300);
  assert.equal(ipcache.lookup('10.9.9.9')?.identity, net!.id);
  cidrs.releaseCidrIdentities([p('10.1.2.3/32')]);
  assert.equal(ipcache.lookup('10.1.2.3')?.identity, 300, 'the pod entry stays when the CIDR goes');
});

test("the node's addresses are host (identity 1, source local), replaced as a whole, added one by one", () => {
  const ipcache = new IPCache();
  const own = new NodeAddressEntries(ipcache, 'n1');
  own.set(['10.0.0.1', 'fd00::1', 'not an ip', '10.0.0.0/24']);
  assert.deepEqual(own.addresses, ['10.0.0.1/32', 'fd00::1/128']);
  assert.deepEqual(ipcache.get('10.0.0.1'), { prefix: '10.0.0.1/32', identity: 1, source: 'local', owner: 'node:n1' });
  own.add(['10.0.1.1']);
  own.set(['10.0.1.1']);
  assert.equal(ipcache.get('10.0.0.1'), undefined);
  assert.equal(ipcache.get('fd00::1'), undefined);
  assert.equal(ipcache.get('10.0.1.1')?.identity, 1);
});
