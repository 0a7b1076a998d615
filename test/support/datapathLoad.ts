/**
 * What an agent's start does to the datapath's objects, alone: load them on
 * a pin directory (adopting maps of another layout and swapping the programs
 * on every hook, as loadDatapathObjects does) and exit. Run inside a node's
 * network namespace (`loadObjectsIn`), since the swap finds the hooks in the
 * namespace it runs in. Prints the loaded programs' IDs as JSON.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createLogger } from '../../src/logging/logger.js';
import { loadDatapathObjects, type MapSizes } from '../../src/datapath/bpf/objects.js';

export interface LoadRequest {
  pinDir: string;
  objectDir?: string;
  mapSizes?: MapSizes;
}

export interface LoadResult {
  /** Program name → kernel ID. */
  programs: Record<string, number>;
  /** How long loadDatapathObjects took, ms. */
  ms: number;
  /** The maps it carried over, and how. */
  migrated: ReadonlyArray<{ map: string; copied: number; caughtUp: number; dropped: number; reconciled: number }>;
}

/** Loads the objects in the namespace at `netnsPath` (a child process under nsenter); rejects with its stderr. */
export function loadObjectsIn(netnsPath: string, req: LoadRequest): Promise<LoadResult> {
  const script = fileURLToPath(import.meta.url);
  return new Promise((resolve, reject) => {
    const child = spawn('nsenter', [`--net=${netnsPath}`, '--', process.execPath, script, JSON.stringify(req)], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => {
      if (code !== 0) reject(new Error(`loading the objects in ${netnsPath} failed (exit ${code}): ${err.trim()}`));
      else resolve(JSON.parse(out.trim().split('\n').pop()!) as LoadResult);
    });
  });
}

async function main(): Promise<void> {
  const req = JSON.parse(process.argv[2]!) as LoadRequest;
  const started = performance.now();
  const objects = await loadDatapathObjects({ ...req, log: createLogger('upgrade', 'warn') });
  const ms = performance.now() - started;
  const programs: Record<string, number> = {};
  for (const o of [objects.lxc, objects.host, objects.netdev, objects.overlay]) for (const [name, p] of o.programs) programs[name] = p.id;
  const migrated = objects.migrated;
  objects.close();
  process.stdout.write(`${JSON.stringify({ programs, ms, migrated })}\n`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main().catch((err: unknown) => {
    process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  });
}
