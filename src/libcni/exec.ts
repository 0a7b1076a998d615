import { spawn } from 'node:child_process';
import { access, constants, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { CniError, CniErrorCode } from '../cni/index.js';

/** How a runtime runs a plugin binary; replaceable so the runtime logic is testable. */
export interface PluginExec {
  /** Runs the plugin and resolves with its stdout; rejects with a CniError on failure. */
  exec(pluginPath: string, stdin: string, env: Record<string, string>, signal?: AbortSignal): Promise<string>;
  /** Locates a plugin binary by type in the given directories. */
  findInPath(type: string, paths: readonly string[]): Promise<string>;
}

export interface RawExecOptions {
  /** Kill the plugin after this many milliseconds (default 60 s, like CRI-O's default). */
  timeoutMs?: number;
  /** Where the plugin's stderr is passed through (default: this process's stderr). */
  stderr?: { write(chunk: Buffer): unknown };
}

const TEXT_BUSY_RETRIES = 5;

function pluginFailure(code: number | null, signal: NodeJS.Signals | null, stdout: string, stderr: string): CniError {
  const how = signal ? `killed by ${signal}` : `exit status ${code}`;
  if (stdout.trim() === '') {
    if (stderr.trim() === '') return new CniError(CniErrorCode.Internal, `netplugin failed with no error message: ${how}`);
    return new CniError(CniErrorCode.Internal, `netplugin failed: ${JSON.stringify(stderr.trim())}`, how);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(stdout);
  } catch (err) {
    return new CniError(
      CniErrorCode.DecodingFailure,
      `netplugin failed but error parsing its diagnostic message ${JSON.stringify(stdout.trim())}: ${(err as Error).message}`,
    );
  }
  return (
    CniError.fromJson(parsed) ??
    new CniError(CniErrorCode.DecodingFailure, `netplugin failed with an invalid error object: ${JSON.stringify(stdout.trim())}`)
  );
}

/** Executes plugin binaries as child processes with an argv array; never through a shell. */
export class RawExec implements PluginExec {
  private readonly timeoutMs: number;
  private readonly stderr: { write(chunk: Buffer): unknown };

  constructor(opts: RawExecOptions = {}) {
    this.timeoutMs = opts.timeoutMs ?? 60_000;
    this.stderr = opts.stderr ?? process.stderr;
  }

  async exec(pluginPath: string, stdin: string, env: Record<string, string>, signal?: AbortSignal): Promise<string> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.execOnce(pluginPath, stdin, env, signal);
      } catch (err) {
        // A binary still being written by an installer fails with ETXTBSY; libcni retries too.
        if ((err as NodeJS.ErrnoException).code === 'ETXTBSY' && attempt < TEXT_BUSY_RETRIES) {
          await new Promise((r) => setTimeout(r, 100 * (attempt + 1)));
          continue;
        }
        if (err instanceof CniError) throw err;
        throw new CniError(CniErrorCode.IOFailure, `failed to execute plugin ${pluginPath}`, (err as Error).message);
      }
    }
  }

  private execOnce(pluginPath: string, stdin: string, env: Record<string, string>, signal?: AbortSignal): Promise<string> {
    return new Promise((resolve, reject) => {
      const child = spawn(pluginPath, [], { env, stdio: ['pipe', 'pipe', 'pipe'], signal });
      const out: Buffer[] = [];
      const err: Buffer[] = [];
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        child.kill('SIGKILL');
      }, this.timeoutMs);
      child.stdout.on('data', (c: Buffer) => out.push(c));
      child.stderr.on('data', (c: Buffer) => {
        err.push(c);
        this.stderr.write(c);
      });
      child.on('error', (e) => {
        clearTimeout(timer);
        reject(e);
      });
      // A plugin that exits without reading stdin closes the pipe; that is its business, not an error.
      child.stdin.on('error', () => undefined);
      child.stdin.end(stdin);
      child.on('close', (code, sig) => {
        clearTimeout(timer);
        const stdout = Buffer.concat(out).toString('utf8');
        const stderr = Buffer.concat(err).toString('utf8');
        if (timedOut) {
          reject(new CniError(CniErrorCode.TryAgainLater, `plugin ${pluginPath} timed out after ${this.timeoutMs} ms`));
        } else if (code === 0) {
          resolve(stdout);
        } else {
          reject(pluginFailure(code, sig, stdout, stderr));
        }
      });
    });
  }

  async findInPath(type: string, paths: readonly string[]): Promise<string> {
    if (type === '' || type.includes('/') || type === '.' || type === '..') {
      throw new CniError(CniErrorCode.InvalidNetworkConfig, `invalid plugin type "${type}"`);
    }
    if (paths.length === 0) throw new CniError(CniErrorCode.InvalidEnvironmentVariables, 'no plugin paths (CNI_PATH) given');
    for (const dir of paths) {
      const candidate = join(dir, type);
      try {
        const st = await stat(candidate);
        if (!st.isFile()) continue;
        await access(candidate, constants.X_OK);
        return candidate;
      } catch {
        // Not in this directory (or not executable there): keep looking, as libcni does.
        continue;
      }
    }
    throw new CniError(CniErrorCode.PluginNotAvailable, `failed to find plugin "${type}" in path [${paths.join(' ')}]`);
  }
}
