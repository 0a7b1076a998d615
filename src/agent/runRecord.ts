/**
 * `<state-dir>/agent.json`: where the agent that uses this state dir serves
 * and keeps its data, written at every start. `tendril-agent cleanup` reads
 * it to find that agent when its --socket is outside the state dir, or when
 * it runs in another network namespace than cleanup (the node lock is only
 * visible in its own). It is a hint to check, never proof: cleanup probes
 * the socket and the processes holding the state open.
 */
import { readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

export const RUN_RECORD_FILE = 'agent.json';

export interface RunRecord {
  pid: number;
  socket: string;
  libDir: string;
  bpffsRoot: string;
  /** The embedded kvstore's file, when the agent uses one. */
  kvstorePath?: string;
}

export async function writeRunRecord(stateDir: string, record: RunRecord): Promise<void> {
  const path = join(stateDir, RUN_RECORD_FILE);
  // Whole or not at all: a reader never sees half a record.
  await writeFile(`${path}.tmp`, `${JSON.stringify(record)}\n`, { mode: 0o600 });
  await rename(`${path}.tmp`, path);
}

/** The record as far as it is legible; undefined when there is none or it is damaged (then the other checks decide). */
export async function readRunRecord(stateDir: string): Promise<Partial<RunRecord> | undefined> {
  let text: string;
  try {
    text = await readFile(join(stateDir, RUN_RECORD_FILE), 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  try {
    const r = JSON.parse(text) as Record<string, unknown>;
    const out: Partial<RunRecord> = {};
    if (typeof r.pid === 'number') out.pid = r.pid;
    for (const k of ['socket', 'libDir', 'bpffsRoot', 'kvstorePath'] as const) if (typeof r[k] === 'string') out[k] = r[k];
    return out;
  } catch (err) {
    if (err instanceof SyntaxError) return undefined;
    throw err;
  }
}
