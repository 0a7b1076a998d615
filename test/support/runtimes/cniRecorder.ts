import { chmod, mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/** One execution of a plugin by a runtime, as the runtime made it and as the plugin answered. */
export interface RecordedCall {
  seq: string;
  command: string;
  /** The whole environment the runtime gave the plugin. */
  env: Record<string, string>;
  stdin: string;
  stdout: string;
  stderr: string;
  code: number;
}

function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/**
 * Puts an executable named `type` in `binDir` that records every call (env,
 * stdin, stdout, stderr, exit code) under `logDir` and otherwise behaves exactly
 * like `realPlugin`: same stdin, stdout and exit code. Runtimes exec it like any
 * plugin, also from cleanup processes with a minimal environment, so it uses
 * absolute paths only.
 */
export async function installRecordingPlugin(binDir: string, type: string, realPlugin: string, logDir: string): Promise<void> {
  await mkdir(logDir, { recursive: true });
  const script = `#!/bin/sh
log=${shellQuote(logDir)}
n="$(/bin/date +%s%N)-$$"
/usr/bin/env > "$log/$n.env"
/bin/cat > "$log/$n.in"
${shellQuote(realPlugin)} "$@" < "$log/$n.in" > "$log/$n.out" 2> "$log/$n.err"
rc=$?
/bin/cat "$log/$n.out"
/bin/cat "$log/$n.err" >&2
echo "$rc" > "$log/$n.rc.tmp" && /bin/mv "$log/$n.rc.tmp" "$log/$n.rc"
exit "$rc"
`;
  const path = join(binDir, type);
  await writeFile(path, script);
  await chmod(path, 0o755);
}

function parseEnv(text: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const i = line.indexOf('=');
    if (i > 0) env[line.slice(0, i)] = line.slice(i + 1);
  }
  return env;
}

/** Every completed call so far, oldest first. */
export async function readRecordedCalls(logDir: string): Promise<RecordedCall[]> {
  const names = (await readdir(logDir)).filter((n) => n.endsWith('.rc')).map((n) => n.slice(0, -3));
  const calls: RecordedCall[] = [];
  for (const seq of names) {
    const f = (ext: string) => readFile(join(logDir, `${seq}.${ext}`), 'utf8').catch(() => '');
    const env = parseEnv(await f('env'));
    calls.push({ seq, command: env.CNI_COMMAND ?? '', env, stdin: await f('in'), stdout: await f('out'), stderr: await f('err'), code: Number((await f('rc')).trim()) });
  }
  return calls.sort((a, b) => (BigInt(a.seq.split('-')[0]!) < BigInt(b.seq.split('-')[0]!) ? -1 : 1));
}

/** A call in a form fit for an assertion message. */
export function describeCall(c: RecordedCall): string {
  const cni = Object.entries(c.env)
    .filter(([k]) => k.startsWith('CNI_'))
    .map(([k, v]) => `${k}=${v}`)
    .join(' ');
  return `${cni}\n  stdin: ${c.stdin.trim()}\n  exit ${c.code}, stdout: ${c.stdout.trim()}${c.stderr.trim() ? `\n  stderr: ${c.stderr.trim()}` : ''}`;
}
