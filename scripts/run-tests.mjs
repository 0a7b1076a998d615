// Runs every compiled *.test.js under dist/ with node's test runner (its
// summaries, and the exit status, say how it went). Optional arguments filter test files by substring.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';

function findTests(dir) {
  const out = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...findTests(p));
    else if (name.endsWith('.test.js')) out.push(p);
  }
  return out;
}

// Arguments: substrings a test file's path must contain (any of them), `!substring` ones it must not.
const filters = process.argv.slice(2).filter((a) => !a.startsWith('!'));
const excludes = process.argv.slice(2).filter((a) => a.startsWith('!')).map((a) => a.slice(1));
let files = findTests('dist')
  .filter((f) => filters.length === 0 || filters.some((s) => f.includes(s)))
  .filter((f) => !excludes.some((s) => f.includes(s)))
  .sort();
// The IP-family matrix: a suite run on IPv4, IPv6 and dual-stack pods is three files, X, XIpv6 and XDual. The
// dual-stack run asserts every IPv4 and every IPv6 expectation of the other two in one scene, so `make test` (CI, with
// its time limit) runs that one; `make test-all` (TENDRIL_TEST_ALL=1), or naming the files, runs the single-stack ones
// too. IPv6-only nodes and underlays have suites of their own (clusterIpv6Suite), run always, and so do suites whose
// single-stack runs hold tests the dual-stack one has not (masquerade's run of short connections per IP version: 10 s, a minute under make test-all).
const runAll = process.env.TENDRIL_TEST_ALL === '1' || filters.length > 0;
const SINGLE_STACK_TESTS_OF_THEIR_OWN = ['/e2e/masquerade'];
const dualBases = files
  .filter((f) => f.endsWith('Dual.test.js'))
  .map((f) => f.slice(0, -'Dual.test.js'.length))
  .filter((b) => !SINGLE_STACK_TESTS_OF_THEIR_OWN.some((s) => b.endsWith(s)));
const singleStack = files.filter((f) => dualBases.some((b) => f === `${b}.test.js` || f === `${b}Ipv6.test.js`));
// Cells of the routing-mode matrix whose every code path another cell of `make test` runs: the IPv6 suite through
// the overlay on an IPv4 underlay (the dual-stack connectivity suite's tunnel cell carries IPv6 pods over it, and
// the IPv6 suite's IPv6-underlay cell runs each of its tests), the IPv6 suite in native routing on nodes with an
// IPv4 node IP (the dual-stack connectivity suite's native cell routes IPv6 pod CIDRs via the IPv6 InternalIP, and
// the IPv6-node-IP cell runs each of its tests), and tunnel mode with etcd and cluster-pool IPAM (the Kubernetes
// cells run tunnel mode with cluster-pool).
const MATRIX_CELLS_OF_TEST_ALL = ['/e2e/clusterConnectivityTunnel6.test.js', '/e2e/clusterConnectivityNative6.test.js', '/e2e/clusterConnectivityTunnelPool.test.js'];
const leftToTestAll = [...singleStack, ...files.filter((f) => MATRIX_CELLS_OF_TEST_ALL.some((s) => f.endsWith(s)))];
if (!runAll && leftToTestAll.length > 0) {
  console.log(`# ${leftToTestAll.length} variants left to make test-all: ${leftToTestAll.map((f) => f.replace(/^.*\//, '')).join(' ')}`);
  files = files.filter((f) => !leftToTestAll.includes(f));
}
if (files.length === 0) {
  console.error('run-tests: no test files found under dist/ (did the build run?)');
  process.exit(1);
}
// Files that assert no packet loss across agent restarts, or count every outcome of hundreds
// of concurrent connections, run alone after the rest: beside another file's agents loading
// their eBPF objects (a cluster test starts three), the two cores starve the traffic they
// measure, and the failures would be the machine's, not tendril's. The README's getting-started
// run starts three agents and etcd, and waits on real timeouts (ping -W, nc -w). The demo test
// runs the whole demo (five agents, one after another), then a fifth of it again (make test runs it
// beside check-native instead). The upgrade test swaps builds under a stream of new
// connections and counts every one.
const ALONE = [
  '/e2e/datapathRestart.test.js', '/e2e/datapathRestartIpv6.test.js', '/e2e/datapathRestartDual.test.js', '/e2e/servicesBackends.test.js', '/e2e/masquerade.test.js',
  '/e2e/upgrade.test.js', '/e2e/readmeGettingStarted.test.js', '/e2e/demo.test.js',
];
const alone = files.filter((f) => ALONE.some((s) => f.endsWith(s)));
// Longest first, so the last files to finish are short ones and no lane runs alone at the end: the multi-node
// scenarios (a cluster of agents and etcd each, a minute or more), then the other end-to-end files, then the rest.
const weight = (f) => (f.includes('/e2e/cluster') ? 0 : f.includes('/e2e/') ? 1 : 2);
const together = files.filter((f) => !alone.includes(f)).sort((a, b) => weight(a) - weight(b) || a.localeCompare(b));
/** The files that used the most CPU (with the children they waited for), from scripts/test-cpu.mjs's lines. */
function cpuSummary(file) {
  let text;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    // No test process got as far as exiting (the batch failed to start): nothing to report.
    if (e.code === 'ENOENT') return '';
    throw e;
  }
  const hz = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout) || 100;
  const rows = text.split('\n').filter(Boolean).map((l) => {
    const [ticks, path] = [l.slice(0, l.indexOf(' ')), l.slice(l.indexOf(' ') + 1)];
    return { s: Number(ticks) / hz, path: path.replace(`${process.cwd()}/`, '') };
  }).sort((a, b) => b.s - a.s);
  const total = rows.reduce((s, r) => s + r.s, 0);
  return `# CPU by file (its process and the children it waited for; ${total.toFixed(0)} CPU-s in all)\n` +
    rows.slice(0, 40).map((r) => `# ${r.s.toFixed(1).padStart(8)} s  ${r.path}\n`).join('');
}

let status = 0;
mkdirSync('build', { recursive: true });
const timings = [];
// Three at a time on two cores: a file spends a fifth of its time waiting (timeouts of denied probes, leases
// expiring, conntrack lifetimes), and with two at a time the cores were idle 18 % of the batch.
for (const [name, batch, concurrency] of [['together', together, 3], ['alone', alone, 1]]) {
  if (batch.length === 0) continue;
  const started = Date.now();
  const timingFile = `build/test-timings-${name}.txt`;
  const cpuFile = `build/test-cpu-${name}.txt`;
  rmSync(cpuFile, { force: true });
  const r = spawnSync(
    process.execPath,
    [
      '--enable-source-maps', '--import', './scripts/test-cpu.mjs', '--test', `--test-concurrency=${concurrency}`,
      '--test-reporter=tap', '--test-reporter-destination=stdout',
      '--test-reporter=./scripts/test-timings.mjs', `--test-reporter-destination=${timingFile}`,
      ...batch,
    ],
    { stdio: 'inherit', env: { ...process.env, TENDRIL_TEST_CPU_FILE: cpuFile } },
  );
  if (r.status !== 0) status = r.status ?? 1;
  timings.push(`# ${name} (${batch.length} files, concurrency ${concurrency}): ${((Date.now() - started) / 1000).toFixed(0)} s wall\n` +
    readFileSync(timingFile, 'utf8').trimEnd().replace(/^/gm, '# ') + '\n' + cpuSummary(cpuFile));
}
// Where the time went, after the results: CI has a time limit, and this is what to cut first.
console.log(timings.join(''));
process.exit(status);
