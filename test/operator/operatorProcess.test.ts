// tendril-operator as the processes a Deployment runs (bin/tendril-operator):
// its flags (--help, exit code 2 and one line on a bad flag), and a failover
// between two replicas: the leader SIGKILLed, the other takes over within the
// lease duration, and the cluster-pool CIDRs stay as allocated.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import type { FakeKubeApi } from '../support/fakeKubeApi.js';
import { OPERATOR_BIN, type OperatorProcess, spawnOperator } from '../support/operatorProcess.js';
import { createTendrilNode, httpGet, ipamOf, leaseHolder, metricValue, startFakeCluster, waitFor } from './operatorScene.js';

const BIN = OPERATOR_BIN;

const children: OperatorProcess[] = [];

async function startReplica(kubeconfig: string, id: string, extra: string[]): Promise<OperatorProcess> {
  const p = await spawnOperator(kubeconfig, id, extra);
  children.push(p);
  return p;
}

async function isLeader(p: OperatorProcess): Promise<boolean> {
  try {
    return metricValue((await httpGet(p.port, '/metrics')).body, 'tendril_operator_is_leader') === 1;
  } catch {
    return false;
  }
}

/** The operator's exit status and stderr for a command line (env: the environment, default this process's). */
function runAsync(args: readonly string[], env?: NodeJS.ProcessEnv): Promise<{ status: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(BIN, args, { stdio: ['ignore', 'ignore', 'pipe'], ...(env ? { env } : {}) });
    let stderr = '';
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.once('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stderr });
    });
  });
}

describe('tendril-operator flags', () => {
  const run = (...args: string[]) => spawnSync(BIN, args, { encoding: 'utf8', timeout: 30_000 });

  test('--help lists the flags and exits 0', () => {
    const r = run('--help');
    assert.equal(r.status, 0, r.stderr);
    for (const f of ['--k8s-namespace', '--id', '--health-addr', '--leader-election-lease-duration', '--identity-gc-grace', '--cluster-pool-cidr', '--cluster-pool-mask-size', '--cluster-pool-mask-size-v6']) {
      assert.ok(r.stdout.includes(f), `${f} in --help`);
    }
  });

  test('a bad flag: one line naming it, exit code 2', async () => {
    // In parallel: each is a process start, and they are independent.
    const cases = [
      [['--identity-gc-grace', '15 minutes'], /--identity-gc-grace must be a duration/],
      [['--leader-election-lease-duration', '1500ms'], /whole seconds/],
      [['--cluster-pool-cidr', '10.0.0.0/33'], /--cluster-pool-cidr: /],
      [['--cluster-pool-cidr', '10.0.0.0/16,10.0.128.0/17'], /--cluster-pool-cidr: .*overlap/],
      [['--cluster-pool-cidr', '10.0.0.0/16', '--cluster-pool-mask-size', '8'], /--cluster-pool-cidr: .*does not fit/],
      [['--cluster-pool-mask-size-v6', '129'], /--cluster-pool-mask-size-v6: /],
      [['--health-addr', 'nowhere'], /--health-addr: /],
      [['--k8s-namespace', 'Kube_System'], /--k8s-namespace: /],
      [['--no-such-flag'], /unknown option/],
    ] as const;
    const results = await Promise.all([
      ...cases.map(([args]) => runAsync(['--k8s-api-server', 'http://127.0.0.1:1', ...args])),
      runAsync([], { PATH: process.env.PATH ?? '' }),
    ]);
    for (const [i, [args, says]] of cases.entries()) {
      const r = results[i]!;
      assert.equal(r.status, 2, `${args.join(' ')}: exit ${r.status} ${r.stderr}`);
      assert.match(r.stderr, says, args.join(' '));
      assert.equal(r.stderr.trim().split('\n').length, 1, `one line: ${r.stderr}`);
    }
    const none = results[cases.length]!;
    assert.equal(none.status, 2);
    assert.match(none.stderr, /no Kubernetes API server/);
  });
});

describe('tendril-operator failover', () => {
  let api: FakeKubeApi;
  before(async () => {
    api = await startFakeCluster();
  });
  after(async () => {
    for (const p of children.splice(0)) {
      if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
      await p.exited;
    }
    await api.stop();
  });

  test('two replicas: the leader SIGKILLed, the other leads within the lease duration; CIDRs stay; SIGTERM releases the lease', async () => {
    const LEASE_S = 3;
    const flags = ['--leader-election-lease-duration', `${LEASE_S}s`, '--gc-interval', '200ms', '--cluster-pool-cidr', '10.210.0.0/16', '--cluster-pool-cidr', 'fd00:210::/96'];
    for (const n of ['node-a', 'node-b', 'node-c']) createTendrilNode(api, n);
    const kubeconfig = await api.kubeconfig();
    const [a, b] = await Promise.all([startReplica(kubeconfig, 'op-a', flags), startReplica(kubeconfig, 'op-b', flags)]);
    const leader = await waitFor('a leader', async () => ((await isLeader(a!)) ? a : (await isLeader(b!)) ? b : undefined), 15_000);
    const follower = leader === a ? b! : a!;
    assert.equal(leaseHolder(api), leader!.id);
    assert.equal(await isLeader(follower), false);
    const cidrs = await waitFor('three nodes allocated', () => {
      const all = ['node-a', 'node-b', 'node-c'].map((n) => ipamOf(api, n));
      return all.every((c) => c?.length === 2) ? all : undefined;
    });
    assert.equal(new Set(cidrs.flat()).size, 6);

    const killedAt = Date.now();
    leader!.child.kill('SIGKILL');
    await leader!.exited;
    // The dead leader's last word: nobody may take over before this, and the follower should right after.
    const last = api.get('leases', 'kube-system', 'tendril-operator') as { spec: { renewTime: string; leaseDurationSeconds: number } };
    const expiry = Date.parse(last.spec.renewTime) + last.spec.leaseDurationSeconds * 1000;
    await waitFor('the follower to lead', () => isLeader(follower), (LEASE_S + 5) * 1000);
    const ledAt = Date.now();
    console.log(`# failover: follower led ${ledAt - killedAt} ms after the leader's SIGKILL, ${ledAt - expiry} ms after its lease expired (lease ${LEASE_S} s)`);
    assert.ok(ledAt >= expiry, 'not before the dead leader\'s lease expired');
    assert.ok(ledAt - expiry <= 500, `led ${ledAt - expiry} ms after the lease expired`);
    assert.ok(ledAt - killedAt <= LEASE_S * 1000 + 500, `within the lease duration of the kill (${ledAt - killedAt} ms)`);
    assert.equal(leaseHolder(api), follower.id);
    assert.deepEqual(['node-a', 'node-b', 'node-c'].map((n) => ipamOf(api, n)), cidrs, 'nothing lost or moved');
    createTendrilNode(api, 'node-d');
    const d = await waitFor('node-d allocated by the new leader', () => (ipamOf(api, 'node-d')?.length === 2 ? ipamOf(api, 'node-d') : undefined));
    assert.equal(new Set([...cidrs.flat(), ...d]).size, 8, 'the new leader hands out no CIDR twice');

    follower.child.kill('SIGTERM');
    assert.deepEqual(await follower.exited, { code: 0, signal: null });
    assert.equal(leaseHolder(api), '', 'released on SIGTERM');
    const records = follower.lines.map((l) => JSON.parse(l) as { name?: string; level?: number; time?: string; msg?: string });
    assert.ok(records.every((r) => r.name === 'tendril-operator' && typeof r.time === 'string'), 'structured records');
    assert.ok(records.some((r) => r.msg === 'released the leader lease'));
  });
});
