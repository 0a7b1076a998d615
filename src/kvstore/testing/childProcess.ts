import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** Path of the compiled kvstoreChild.js next to this module. */
export const CHILD_SCRIPT = fileURLToPath(new URL('./kvstoreChild.js', import.meta.url));

export interface ChildRun {
  child: ChildProcess;
  /** Complete lines printed so far. */
  lines: string[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }>;
}

/** Starts the test child with an argv array and collects its stdout by line. */
export function runChild(args: string[]): ChildRun {
  const child = spawn(process.execPath, ['--enable-source-maps', CHILD_SCRIPT, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: string[] = [];
  let partial = '';
  let stderr = '';
  child.stdout?.setEncoding('utf8');
  child.stdout?.on('data', (d: string) => {
    const parts = (partial + d).split('\n');
    partial = parts.pop() as string;
    lines.push(...parts);
  });
  child.stderr?.setEncoding('utf8');
  child.stderr?.on('data', (d: string) => {
    stderr = (stderr + d).slice(-8000);
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }>((resolve) => {
    child.once('exit', (code, signal) => {
      // Let the last stdout chunk drain before reporting.
      setImmediate(() => resolve({ code, signal, stderr }));
    });
  });
  return { child, lines, exited };
}

export async function waitForLine(run: ChildRun, pred: (line: string) => boolean, timeoutMs = 10_000): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const hit = run.lines.find(pred);
    if (hit !== undefined) return hit;
    if (run.child.exitCode !== null || run.child.signalCode !== null || Date.now() > deadline) {
      const { stderr } = await Promise.race([run.exited, Promise.resolve({ stderr: '(still running)' })]);
      throw new Error(`child did not print the expected line; lines=${JSON.stringify(run.lines.slice(-5))} stderr=${stderr}`);
    }
    await new Promise((r) => setTimeout(r, 10));
  }
}
