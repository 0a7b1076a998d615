// The node lock: one claim per name in a network namespace, named holders,
// and the kernel's release when the holder dies (no root needed: abstract
// unix sockets in this process's namespace, under names of the test's own).
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterEach, test } from 'node:test';
import { abstractSocketHolders, NetnsNodeLock } from './nodeLock.js';
import { OwnershipError } from '../errors/ownershipError.js';

const lockName = () => `tdl-lock-test-${randomBytes(6).toString('hex')}`;
const children: ChildProcess[] = [];

afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

/** Another process that claims `name` and says "claimed" once it holds it. */
async function holderProcess(name: string): Promise<ChildProcess> {
  const module = fileURLToPath(new URL('./nodeLock.js', import.meta.url));
  const script = `const { NetnsNodeLock } = await import(${JSON.stringify(module)}); await new NetnsNodeLock({ name: ${JSON.stringify(name)} }).claim(); process.stdout.write('claimed\\n'); setInterval(() => {}, 1000);`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(child);
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', (c: Buffer) => c.toString().includes('claimed') && resolve());
    child.once('exit', (code) => reject(new Error(`holder exited ${code}`)));
  });
  return child;
}

test('a second claim of the same name fails with NODE_OWNED naming the holder; a release frees it', async () => {
  const name = lockName();
  const first = await new NetnsNodeLock({ name }).claim();
  await assert.rejects(new NetnsNodeLock({ name }).claim(), (e: unknown) => {
    assert.ok(e instanceof OwnershipError);
    assert.equal(e.code, 'NODE_OWNED');
    assert.match(e.message, new RegExp(`another agent owns this node \\(network namespace net:\\[\\d+\\]\\): pid ${process.pid} holds @${name}`));
    return true;
  });
  await first.release();
  const again = await new NetnsNodeLock({ name }).claim();
  await again.release();
});

test('claims of different names are independent', async () => {
  const a = await new NetnsNodeLock({ name: lockName() }).claim();
  const b = await new NetnsNodeLock({ name: lockName() }).claim();
  await a.release();
  await b.release();
});

test('another process holding the name is named by its pid, and its death (SIGKILL) frees the name', async () => {
  const name = lockName();
  const holder = await holderProcess(name);
  assert.deepEqual(await abstractSocketHolders(name), [holder.pid]);
  await assert.rejects(new NetnsNodeLock({ name }).claim(), new RegExp(`pid ${holder.pid} holds @${name}`));
  holder.kill('SIGKILL');
  await new Promise((resolve) => holder.once('exit', resolve));
  const claim = await new NetnsNodeLock({ name }).claim();
  await claim.release();
});

test('abstractSocketHolders finds nobody for a name nobody holds', async () => {
  assert.deepEqual(await abstractSocketHolders(lockName()), []);
});
