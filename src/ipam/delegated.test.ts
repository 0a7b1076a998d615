import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { runAllocatorContract, rejectsWithIpamCode } from './contract.js';
import { DelegatedAllocator } from './delegated.js';
import { IpamErrorCode } from './errors.js';
import { type TestBackend, embeddedBackend } from './testing/backends.js';
import { CNI_BIN_DIR, delegatedSubject, quietLogger } from './testing/subjects.js';

runAllocatorContract('delegated host-local (embedded)', delegatedSubject(embeddedBackend));

describe('delegated host-local, dual-stack and forwarded verbs', () => {
  let tb: TestBackend;
  let dataDir: string;
  let a: DelegatedAllocator;

  beforeEach(async () => {
    tb = await embeddedBackend();
    dataDir = mkdtempSync(join(tmpdir(), 'tendril-hl-'));
    a = new DelegatedAllocator({
      backend: tb.backend,
      host: 'node-a',
      cniPath: [CNI_BIN_DIR],
      netconf: {
        cniVersion: '1.0.0',
        name: 'dual',
        ipam: { type: 'host-local', dataDir, ranges: [[{ subnet: '10.61.0.0/29' }], [{ subnet: 'fd00:61::/120' }]] },
      },
      logger: quietLogger,
    });
    await a.start();
  });
  afterEach(async () => {
    await a.stop();
    await tb.backend.close();
    await tb.cleanup();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const stored = () => readdirSync(join(dataDir, 'dual')).filter((f) => !f.startsWith('last_reserved') && f !== 'lock');

  it('one plugin ADD serves both families; DEL releases both in host-local', async () => {
    const v4 = await a.allocate({ owner: 'ctr1', family: 4 });
    const v6 = await a.allocate({ owner: 'ctr1', family: 6 });
    assert.equal(v4.prefixLength, 29);
    assert.equal(v4.gateway, '10.61.0.1', 'host-local reports the range gateway');
    assert.equal(v6.family, 6);
    assert.deepEqual(stored().sort(), [v4.ip, v6.ip].sort(), 'host-local holds exactly these addresses');
    await a.check('ctr1');
    assert.equal((await a.releaseOwner('ctr1')).length, 2);
    assert.deepEqual(stored(), []);
    assert.deepEqual(await a.releaseOwner('ctr1'), [], 'DEL again is fine');
  });

  it('GC forwards DEL for owners that are gone and keeps live ones; CHECK of a released owner fails', async () => {
    await a.allocate({ owner: 'live', family: 4 });
    const gone = await a.allocate({ owner: 'gone', family: 4 });
    const report = await a.gc(new Set(['live']));
    assert.deepEqual([...new Set(report.released.map((r) => r.owner))], ['gone']);
    assert.ok(!stored().includes(gone.ip));
    assert.equal(stored().length, 2, 'live owner keeps its v4 and v6');
    await rejectsWithIpamCode(a.check('gone'), IpamErrorCode.INVALID_ARGUMENT);
  });

  it('a provisional delegated allocation expires through host-local DEL', async () => {
    await a.allocate({ owner: 'prov', family: 4, expirationMs: 100 });
    const deadline = Date.now() + 5000;
    while ((await a.get('prov')).length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 25));
    assert.deepEqual(await a.get('prov'), []);
    assert.deepEqual(stored(), []);
  });

  it('a failing plugin surfaces as IPAM_DELEGATE_FAILED', async () => {
    const bad = new DelegatedAllocator({
      backend: tb.backend,
      host: 'node-a',
      cniPath: [CNI_BIN_DIR],
      netconf: { cniVersion: '1.0.0', name: 'bad', ipam: { type: 'host-local', dataDir, ranges: [[{ subnet: 'not-a-cidr' }]] } },
      logger: quietLogger,
    });
    await rejectsWithIpamCode(bad.allocate({ owner: 'x', family: 4 }), IpamErrorCode.DELEGATE_FAILED);
    assert.ok(existsSync(dataDir));
  });
});
