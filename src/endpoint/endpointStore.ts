import { mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { type Endpoint, EndpointSchema } from './endpoint.js';

export interface RestoreProblem {
  dir: string;
  error: string;
}

/**
 * Endpoints persisted under the state dir, one directory per endpoint ID, so
 * the agent restores them after a restart. Writes go through a rename, so a
 * crash leaves either the old or the new model, never half of one.
 */
export class EndpointStore {
  constructor(readonly dir: string) {}

  private path(id: number): string {
    return join(this.dir, String(id), 'endpoint.json');
  }

  async save(ep: Endpoint): Promise<void> {
    await mkdir(join(this.dir, String(ep.id)), { recursive: true, mode: 0o700 });
    const tmp = `${this.path(ep.id)}.tmp`;
    await writeFile(tmp, JSON.stringify(ep, null, 2), { mode: 0o600 });
    await rename(tmp, this.path(ep.id));
  }

  async remove(id: number): Promise<void> {
    await rm(join(this.dir, String(id)), { recursive: true, force: true });
  }

  async loadAll(): Promise<{ endpoints: Endpoint[]; problems: RestoreProblem[] }> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const endpoints: Endpoint[] = [];
    const problems: RestoreProblem[] = [];
    for (const name of (await readdir(this.dir)).sort()) {
      if (!/^\d+$/.test(name)) continue;
      try {
        const parsed = EndpointSchema.parse(JSON.parse(await readFile(this.path(Number(name)), 'utf8')));
        endpoints.push(parsed);
      } catch (err) {
        problems.push({ dir: join(this.dir, name), error: (err as Error).message });
      }
    }
    return { endpoints, problems };
  }
}
