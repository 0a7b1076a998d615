// deploy/systemd/tendril-agent.service: it passes Debian's `systemd-analyze
// verify` without a warning, and the directories systemd makes for it are the
// agent's defaults.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defaultConfig } from '../../src/agent/config.js';
import { AGENT_BIN } from '../support/agentHarness.js';
import { run } from '../support/run.js';

const UNIT = fileURLToPath(new URL('../../../deploy/systemd/tendril-agent.service', import.meta.url));
const INSTALLED_BIN = '/usr/local/bin/tendril-agent';

let dir: string;
let text: string;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'tdl-unit-'));
  text = await readFile(UNIT, 'utf8');
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** The unit's `Key=value` lines of one key, in order. */
function values(key: string): string[] {
  return text
    .split('\n')
    .filter((l) => l.startsWith(`${key}=`))
    .map((l) => l.slice(key.length + 1));
}

/**
 * Runs verify on a copy whose ExecStart is this checkout's launcher: verify
 * refuses an ExecStart binary that does not exist, and /usr/local/bin is not
 * the test's to write.
 */
async function verify(unitText: string): Promise<{ code: number; output: string }> {
  const copy = join(dir, 'tendril-agent.service');
  await writeFile(copy, unitText.replaceAll(`ExecStart=${INSTALLED_BIN} `, `ExecStart=${AGENT_BIN} `));
  const r = await run(['systemd-analyze', 'verify', '--man=no', copy]);
  return { code: r.code, output: (r.stdout + r.stderr).trim() };
}

test('systemd-analyze verify passes the unit without a warning', async () => {
  assert.deepEqual(values('ExecStart').map((v) => v.split(' ')[0]), [INSTALLED_BIN]);
  const r = await verify(text);
  assert.equal(r.code, 0, r.output);
  assert.equal(r.output, '');
});

test('verify does report a broken copy (so the clean run above means something)', async () => {
  const r = await verify(text.replace('Restart=on-failure', 'Restart=on-failure\nRestartt=always'));
  assert.match(r.output, /Restartt/);
});

test('restarts on failure; systemd makes the agent\'s default directories and keeps the runtime one', () => {
  const defaults = defaultConfig();
  assert.deepEqual(values('Restart'), ['on-failure']);
  assert.deepEqual(values('StateDirectory').map((d) => join('/var/lib', d)), [defaults.libDir]);
  assert.deepEqual(values('RuntimeDirectory').map((d) => join('/var/run', d)), [defaults.stateDir]);
  assert.deepEqual(values('RuntimeDirectoryPreserve'), ['yes']);
  assert.match(values('ExecStart')[0]!, /--state-dir \/run\/tendril --lib-dir \/var\/lib\/tendril \$TENDRIL_AGENT_ARGS$/);
  assert.deepEqual(values('After'), ['network-online.target']);
  assert.ok(values('EnvironmentFile').length === 1);
  const caps = values('CapabilityBoundingSet')[0]!.split(' ');
  for (const cap of ['CAP_BPF', 'CAP_NET_ADMIN', 'CAP_SYS_ADMIN']) assert.ok(caps.includes(cap), `${cap} in the bounding set`);
});
