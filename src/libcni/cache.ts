import { chmod, mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { type AnyResult, type CniArgs, CniError, CniErrorCode } from '../cni/index.js';

export { DEFAULT_CACHE_DIR } from './defaults.js';
import { DEFAULT_CACHE_DIR } from './defaults.js';

const CACHE_KIND = 'cniCacheV1';

/** The on-disk record of one attachment, in the layout Go's libcni writes. */
const CachedInfoSchema = z.object({
  kind: z.literal(CACHE_KIND),
  containerId: z.string(),
  config: z.string(),
  ifName: z.string(),
  networkName: z.string(),
  netns: z.string().optional(),
  cniArgs: z.array(z.tuple([z.string(), z.string()])).optional(),
  capabilityArgs: z.record(z.string(), z.unknown()).optional(),
  result: z.record(z.string(), z.unknown()).optional(),
});
type CachedInfo = z.infer<typeof CachedInfoSchema>;

export interface CachedAttachment {
  containerId: string;
  ifName: string;
  networkName: string;
  netns: string;
  cniArgs: CniArgs;
  capabilityArgs: Record<string, unknown>;
  /** The network config list the attachment was made with (decoded from base64). */
  configBytes: string;
  /** The raw result as cached; converted to the caller's version on read. */
  result?: Record<string, unknown>;
}

export interface AttachmentKey {
  networkName: string;
  containerId: string;
  ifName: string;
}

/** Results of ADD kept on disk so DEL/CHECK/GC get the prevResult and GC finds stale attachments. */
export class ResultCache {
  constructor(readonly cacheDir: string = DEFAULT_CACHE_DIR) {}

  private get resultsDir(): string {
    return join(this.cacheDir, 'results');
  }

  pathFor(key: AttachmentKey): string {
    return join(this.resultsDir, `${key.networkName}-${key.containerId}-${key.ifName}`);
  }

  async write(a: CachedAttachment, result: AnyResult): Promise<void> {
    const info: CachedInfo = {
      kind: CACHE_KIND,
      containerId: a.containerId,
      config: Buffer.from(a.configBytes, 'utf8').toString('base64'),
      ifName: a.ifName,
      networkName: a.networkName,
      ...(a.netns ? { netns: a.netns } : {}),
      ...(a.cniArgs.length > 0 ? { cniArgs: a.cniArgs } : {}),
      ...(Object.keys(a.capabilityArgs).length > 0 ? { capabilityArgs: a.capabilityArgs } : {}),
      result: result as unknown as Record<string, unknown>,
    };
    // Results name addresses and namespaces of other tenants' containers: owner-only.
    await mkdir(this.resultsDir, { recursive: true, mode: 0o700 });
    await chmod(this.resultsDir, 0o700);
    const path = this.pathFor(a);
    const tmp = `${path}.tmp-${process.pid}`;
    await writeFile(tmp, JSON.stringify(info), { mode: 0o600 });
    await rename(tmp, path);
  }

  async read(key: AttachmentKey): Promise<CachedAttachment | undefined> {
    let text: string;
    try {
      text = await readFile(this.pathFor(key), 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw new CniError(CniErrorCode.IOFailure, `reading cached result ${this.pathFor(key)}`, (err as Error).message);
    }
    return this.decode(text, this.pathFor(key));
  }

  async remove(key: AttachmentKey): Promise<void> {
    await rm(this.pathFor(key), { force: true });
  }

  /** Every cached attachment, optionally only those of one container. Unreadable files are skipped. */
  async list(containerId?: string): Promise<CachedAttachment[]> {
    let names: string[];
    try {
      names = await readdir(this.resultsDir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw new CniError(CniErrorCode.IOFailure, `reading cache dir ${this.resultsDir}`, (err as Error).message);
    }
    const out: CachedAttachment[] = [];
    for (const name of names.sort()) {
      if (name.includes('.tmp-')) continue;
      const path = join(this.resultsDir, name);
      const text = await readFile(path, 'utf8').catch((err: NodeJS.ErrnoException) => {
        if (err.code === 'ENOENT') return undefined; // removed by a concurrent DEL
        throw err;
      });
      if (text === undefined) continue;
      let a: CachedAttachment;
      try {
        a = this.decode(text, path);
      } catch {
        // Files of older cache formats (or foreign files) carry no attachment we can act on.
        continue;
      }
      if (containerId === undefined || a.containerId === containerId) out.push(a);
    }
    return out;
  }

  private decode(text: string, path: string): CachedAttachment {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (err) {
      throw new CniError(CniErrorCode.DecodingFailure, `failed to decode cached result ${path}`, (err as Error).message);
    }
    const parsed = CachedInfoSchema.safeParse(value);
    if (!parsed.success) throw new CniError(CniErrorCode.DecodingFailure, `invalid cached result ${path}`);
    const info = parsed.data;
    return {
      containerId: info.containerId,
      ifName: info.ifName,
      networkName: info.networkName,
      netns: info.netns ?? '',
      cniArgs: info.cniArgs ?? [],
      capabilityArgs: info.capabilityArgs ?? {},
      configBytes: Buffer.from(info.config, 'base64').toString('utf8'),
      ...(info.result ? { result: info.result } : {}),
    };
  }
}
