import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { CNI_BIN } from '../../testing/cniBin.js';

/** One exec of tendril-cni, as a runtime sees it. */
export interface RelayRun {
  code: number;
  stdout: string;
  stderr: string;
  /** stdout parsed as JSON; undefined when it is empty. */
  out: Record<string, unknown> | undefined;
  /** Wall time from spawn to exit. */
  ms: number;
}

const SANITIZER_REPORT = /AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:/;

/**
 * Execs tendril-cni the way a runtime does: only the given environment (plus
 * the sanitizers' options, for the ASan build), stdin, then stdout and the
 * exit code. Fails on a sanitizer report, and on a run longer than
 * `killAfterMs`: the relay must never hang.
 */
export function runRelay(env: Record<string, string | undefined>, stdin: string | Buffer = '', killAfterMs = 30_000): Promise<RelayRun> {
  const childEnv: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) if (v !== undefined) childEnv[k] = v;
  for (const k of ['ASAN_OPTIONS', 'UBSAN_OPTIONS']) if (process.env[k]) childEnv[k] = process.env[k]!;
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn(CNI_BIN, [], { env: childEnv, stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let killed = false;
    const timer = setTimeout(() => {
      killed = true;
      child.kill('SIGKILL');
    }, killAfterMs);
    child.stdout.on('data', (c: Buffer) => out.push(c));
    child.stderr.on('data', (c: Buffer) => err.push(c));
    // The relay stops reading at its stdin limit and exits: the rest of a large write is refused.
    child.stdin.on('error', () => undefined);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const ms = performance.now() - t0;
      const stdout = Buffer.concat(out).toString('utf8');
      const stderr = Buffer.concat(err).toString('utf8');
      if (killed) return reject(new Error(`tendril-cni did not exit within ${killAfterMs} ms; stdout: ${stdout} stderr: ${stderr}`));
      if (SANITIZER_REPORT.test(stderr)) return reject(new Error(`sanitizer report from tendril-cni:\n${stderr}`));
      if (code === null) return reject(new Error(`tendril-cni was killed by ${signal}; stderr: ${stderr}`));
      let parsed: Record<string, unknown> | undefined;
      try {
        parsed = stdout.trim() === '' ? undefined : (JSON.parse(stdout) as Record<string, unknown>);
      } catch {
        return reject(new Error(`tendril-cni printed something that is not JSON (exit ${code}): ${stdout}`));
      }
      resolve({ code, stdout, stderr, out: parsed, ms });
    });
    child.stdin.end(stdin);
  });
}

/** The run printed a CNI error with this code (and a msg matching `msg`, when given) and exited 1. */
export function assertCniError(r: RelayRun, code: number, msg?: RegExp): Record<string, unknown> {
  assert.equal(r.code, 1, `exit code; stdout: ${r.stdout} stderr: ${r.stderr}`);
  assert.ok(r.out, `an error JSON on stdout; stderr: ${r.stderr}`);
  assert.equal(r.out.code, code, r.stdout);
  assert.equal(typeof r.out.msg, 'string', r.stdout);
  if (msg) assert.match(r.out.msg as string, msg, r.stdout);
  assert.equal(r.stdout, `${JSON.stringify(r.out, null, 4)}\n`, 'laid out as the skel printed errors');
  return r.out;
}

/** A complete CNI environment for a verb; override or unset (undefined) single variables. */
export function cniEnv(command: string, overrides: Record<string, string | undefined> = {}): Record<string, string | undefined> {
  return {
    CNI_COMMAND: command,
    CNI_CONTAINERID: 'tdl-relay-ctr',
    CNI_NETNS: '/var/run/netns/tdl-relay-none',
    CNI_IFNAME: 'eth0',
    CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=relay',
    CNI_PATH: '/opt/cni/bin',
    ...overrides,
  };
}
