/**
 * The flow UI's server side: serves the bundle `make build` writes to
 * dist/ui (index.html and assets/, built from ui/ by scripts/build-ui.mjs)
 * at `/`. The page talks only to GET /v1/flows and GET /v1/policy of the
 * same origin, so whatever serves those (the agent's TCP flows listener,
 * `tendril relay`, a test's proxy) mounts it with registerFlowUi.
 *
 * The files are listed once at registration and served from that list by
 * exact name: a path never reaches the file system, so no `..` or symlink
 * can lead out of the bundle.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { extname, join } from 'node:path';
import { installPath } from '../installLayout.js';
import type { FastifyInstance } from 'fastify';

/** dist/ui of the installation. */
export const DEFAULT_FLOW_UI_DIR = installPath('dist', 'ui');

export const FLOW_UI_NOT_BUILT = 'the flow UI is not built: `make build` writes it to dist/ui';

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.woff2': 'font/woff2',
  '.txt': 'text/plain; charset=utf-8',
};

export interface FlowUiOptions {
  /** The bundle's folder (default dist/ui next to this module's dist/src). */
  dir?: string;
  /** Where the UI is mounted (default `/`); its assets are under `<prefix>assets/`. */
  prefix?: string;
}

interface UiFile {
  body: Buffer;
  type: string;
}

/** Every file of the bundle, by its path relative to `dir` (`index.html`, `assets/app-XXXX.js`). */
function listBundle(dir: string): Map<string, UiFile> {
  const files = new Map<string, UiFile>();
  const walk = (rel: string): void => {
    for (const entry of readdirSync(join(dir, rel), { withFileTypes: true })) {
      const path = rel === '' ? entry.name : `${rel}/${entry.name}`;
      if (entry.isDirectory()) walk(path);
      else if (entry.isFile()) files.set(path, { body: readFileSync(join(dir, path)), type: CONTENT_TYPES[extname(entry.name)] ?? 'application/octet-stream' });
    }
  };
  walk('');
  return files;
}

/** Whether `path` is one of the UI's (its page or an asset): files that hold no data, which a server wanting a token lets anyone GET. */
export function isFlowUiPath(path: string, prefix = '/'): boolean {
  return path === prefix || path.startsWith(`${prefix}assets/`);
}

/** What a flows server (the agent's listener, the relay) takes to serve the UI beside its API. */
export const FLOW_UI_ROUTES = { extraRoutes: (app: FastifyInstance): void => registerFlowUi(app), publicPaths: (path: string): boolean => isFlowUiPath(path) };

/**
 * Serves the flow UI at `prefix` (index.html) and `prefix`assets/* on `app`.
 * When the bundle is missing the page answers 503 saying so, and the
 * server's other routes go on.
 */
export function registerFlowUi(app: FastifyInstance, opts: FlowUiOptions = {}): void {
  const dir = opts.dir ?? DEFAULT_FLOW_UI_DIR;
  const prefix = opts.prefix ?? '/';
  if (!prefix.startsWith('/') || !prefix.endsWith('/')) throw new RangeError(`flow UI prefix must start and end with '/', got "${prefix}"`);
  const built = (() => {
    try {
      return statSync(join(dir, 'index.html')).isFile();
    } catch {
      return false;
    }
  })();
  const files = built ? listBundle(dir) : new Map<string, UiFile>();

  app.get(prefix, async (_req, reply) => {
    const index = files.get('index.html');
    if (index === undefined) return reply.code(503).type('text/plain; charset=utf-8').send(`${FLOW_UI_NOT_BUILT}\n`);
    // The page names its assets by content hash: it is always asked again, they never are.
    return reply.type(index.type).header('cache-control', 'no-cache').header('x-content-type-options', 'nosniff').send(index.body);
  });
  app.get(`${prefix}assets/*`, async (req, reply) => {
    const name = (req.params as { '*': string })['*'];
    const file = files.get(`assets/${name}`);
    if (file === undefined) return reply.code(404).type('text/plain; charset=utf-8').send('not found\n');
    return reply.type(file.type).header('cache-control', 'public, max-age=31536000, immutable').header('x-content-type-options', 'nosniff').send(file.body);
  });
}
