// The README's getting-started blocks as test/e2e/readmeGettingStarted.test.ts
// runs them: every ```sh block is marked, each path has its blocks, the
// substitutions change only what they say. The Kubernetes path cannot run here
// (no API server): its commands are checked for syntax, for the files they
// name, and against Debian's kubectl's own help.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { spawnSync } from 'node:child_process';
import { expectFailures, isolate, pathSteps, readmeBlocks, shBlockCount, type HostIsolation } from '../support/readmeBlocks.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const KUBECTL = '/usr/bin/kubectl';
const blocks = readmeBlocks();

test('every ```sh block of README.md is marked, and each getting-started path has its blocks', () => {
  assert.equal(blocks.length, shBlockCount(), 'a ```sh block without a <!-- test: … --> marker would go untested');
  for (const path of ['one-host', 'second-node', 'kubernetes']) assert.ok(pathSteps(blocks, path).length > 0, `blocks for ${path}`);
  assert.ok(pathSteps(blocks, 'one-host').some((s) => s.block.background && s.block.code.startsWith('bin/tendril-agent ')), 'the one-host path starts an agent');
  assert.deepEqual([...new Set(pathSteps(blocks, 'second-node').map((s) => s.host))].sort(), ['host1', 'host2']);
  for (const b of blocks) {
    const r = spawnSync('bash', ['-n'], { input: b.code, encoding: 'utf8' });
    assert.equal(r.status, 0, `README.md line ${b.line}: bash -n: ${r.stderr}`);
  }
});

test('the substitutions: machine paths and netns names only, the agent told its dirs, expected failures checked', () => {
  const h: HostIsolation = { stateDir: '/t/run', libDir: '/t/lib', bpffsRoot: '/sys/fs/bpf/tdlx', netconfDir: '/t/net.d', pluginDir: '/t/bin', cacheDir: '/t/cache', etcdDir: '/t/etcd', netns: { 'web-pod': 'tdlxw' } };
  assert.equal(
    isolate('bin/tendril-agent --pod-cidr 10.0.0.0/24\nCNI_ARGS=TENDRIL_LABELS=app=web bin/tendril cni add tendril /var/run/netns/web-pod\nip -n web-pod addr # web-pods stay', h),
    'bin/tendril-agent --state-dir /t/run --lib-dir /t/lib --bpffs-root /sys/fs/bpf/tdlx --pod-cidr 10.0.0.0/24\nCNI_ARGS=TENDRIL_LABELS=app=web bin/tendril cni add tendril /var/run/netns/tdlxw --cache-dir /t/cache\nip -n tdlxw addr # web-pods stay',
  );
  const script = expectFailures('true\nfalse    # fails: denied', 10);
  assert.equal(spawnSync('bash', ['-ec', script]).status, 0, 'a failing "# fails" line passes');
  assert.notEqual(spawnSync('bash', ['-ec', expectFailures('true    # fails: denied', 10)], { encoding: 'utf8' }).status, 0, 'a succeeding "# fails" line fails the script');
});

test('the Kubernetes path: bash syntax, files that exist, kubectl subcommands kubectl knows (syntax only: no API server here)', () => {
  const steps = pathSteps(blocks, 'kubernetes');
  for (const { block } of steps) {
    for (const [i, line] of block.code.split('\n').entries()) {
      const words = line.trim().split(/\s+/);
      assert.equal(words[0], 'kubectl', `README.md line ${block.line + i}: a kubectl command`);
      for (const [j, w] of words.entries()) if (w === '-f') assert.ok(existsSync(`${ROOT}${words[j + 1]}`), `README.md line ${block.line + i}: ${words[j + 1]} exists`);
      const sub = words.slice(1).filter((w, j, all) => !w.startsWith('-') && all[j - 1] !== '-n');
      const verb = sub[0] === 'rollout' ? sub.slice(0, 2) : sub.slice(0, 1);
      const help = spawnSync(KUBECTL, [...verb, '--help'], { encoding: 'utf8' });
      assert.equal(help.status, 0, `kubectl ${verb.join(' ')} --help: ${help.stderr}`);
      for (const flag of words.filter((w) => /^--?[a-z]/.test(w) && w !== '--')) {
        assert.ok(flag === '-n' || flag === '-f' || help.stdout.includes(flag.split('=')[0]!), `kubectl ${verb.join(' ')} takes ${flag}`);
      }
    }
  }
});
