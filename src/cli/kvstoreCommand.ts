import { Command, Option } from 'commander';
import { isKvstoreError, LockedError } from '../kvstore/errors.js';
import { type Backend, DEFAULT_BACKEND, type KeyValue, type ListResult, type Status } from '../kvstore/types.js';
import { DEFAULT_LIB_DIR, DEFAULT_SOCKET, SOCKET_ENV } from '../api/types.js';
import { describeKvstoreOptions } from '../kvstore/optionKeys.js';
import { CliError } from './cliError.js';
import { existsSync, statSync } from 'node:fs';
import { defaultEmbeddedPath } from '../kvstore/embedded/embeddedOptions.js';
import { AgentResponseError, AgentUnreachableError } from '../client/agentClient.js';
import { client } from './agentCli.js';
import { count } from './words.js';

/**
 * `tendril kvstore get|set|delete|list|status`: direct access to the cluster
 * state for debugging, as `cilium kvstore` offers. It opens the backend
 * itself with the agent's flags. The embedded store has one opener: while
 * the agent holds it, the reads (get, list, status) go through the agent's
 * API instead, and the writes are refused with what to do.
 */

interface StoreFlags {
  kvstore: string;
  kvstoreOpt: string[];
  libDir: string;
  socket?: string;
  output: 'text' | 'json';
}

/** What the read commands need: the backend itself, or the agent that holds it. */
type StoreReader = Pick<Backend, 'get' | 'list' | 'status'>;

function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

function withStoreFlags(cmd: Command): Command {
  return cmd
    .option('--kvstore <backend>', 'kvstore backend: embedded or etcd', DEFAULT_BACKEND)
    .option('--kvstore-opt <key=value>', `backend option, repeatable; ${describeKvstoreOptions()}`, collect, [])
    .option('--lib-dir <dir>', 'the agent\'s durable data dir (holds the embedded store)', DEFAULT_LIB_DIR)
    .option('--socket <path>', `the API socket of the agent holding the embedded store, read through while it runs (default $${SOCKET_ENV} or ${DEFAULT_SOCKET})`)
    .addOption(new Option('-o, --output <format>', 'output format').choices(['text', 'json']).default('text'));
}

/** Whether the command only reads: then it must never create an embedded store that is not there. */
type Access = 'read' | 'write';

async function withBackend<T>(flags: StoreFlags, fn: (kv: Backend) => Promise<T>): Promise<T> {
  return withStore(flags, fn, 'write');
}

/** A read: from the store, or through the agent when the agent holds the embedded store. */
async function withReader<T>(flags: StoreFlags, fn: (kv: StoreReader) => Promise<T>): Promise<T> {
  return withStore(flags, fn, 'read');
}

async function withStore<T>(flags: StoreFlags, fn: (kv: Backend) => Promise<T>, access: 'write'): Promise<T>;
async function withStore<T>(flags: StoreFlags, fn: (kv: StoreReader) => Promise<T>, access: 'read'): Promise<T>;
async function withStore<T>(flags: StoreFlags, fn: ((kv: Backend) => Promise<T>) | ((kv: StoreReader) => Promise<T>), access: Access): Promise<T> {
  let kv: Backend;
  let path: string | undefined;
  try {
    // Loaded on use: the logger and option schemas cost every other `tendril` command start-up time.
    const [{ openBackend, parseKvstoreOpts }, { createLogger }] = await Promise.all([import('../kvstore/factory.js'), import('../logging/logger.js')]);
    const options = parseKvstoreOpts(flags.kvstoreOpt);
    if (flags.kvstore === 'embedded') path = options['embedded.path'] ?? defaultEmbeddedPath(flags.libDir);
    // Opening a missing SQLite file creates it: an empty store that would then look "connected".
    if (access === 'read' && path !== undefined && !existsSync(path)) throw new CliError(`no kvstore at ${path}: is this the agent's --lib-dir?`);
    kv = await openBackend({
      kind: flags.kvstore,
      options,
      dataDir: flags.libDir,
      logger: createLogger('tendril-kvstore', process.env.TENDRIL_LOG_LEVEL ?? 'warn'),
    });
  } catch (err) {
    if (err instanceof LockedError) {
      // The overloads pair 'read' with a reader's callback.
      if (access === 'read') return (fn as (kv: StoreReader) => Promise<T>)(await agentReader(flags, err));
      throw new CliError(`${err.code}: ${err.message}: a running agent holds it; stop the agent to write (get, list and status read through it meanwhile)`);
    }
    throw asCliError(err);
  }
  try {
    return await fn(kv);
  } catch (err) {
    throw asCliError(err);
  } finally {
    await kv.close();
  }
}

/** dev:ino of a file, to tell whether two paths (an agent's, ours) are the same store. */
function fileIdentity(path: string): string | undefined {
  try {
    const st = statSync(path);
    return `${st.dev}:${st.ino}`;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

/**
 * Reads through the agent at --socket, once its config shows it uses the
 * very store that is locked: another agent's answers would be another
 * store's, shown as this one's.
 */
async function agentReader(flags: StoreFlags, locked: LockedError): Promise<StoreReader> {
  const agent = client(flags);
  const lockedText = `${locked.code}: ${locked.message}`;
  let config;
  try {
    config = await agent.getConfig();
  } catch (err) {
    if (err instanceof AgentUnreachableError) throw new CliError(`${lockedText}, and no agent answers at ${agent.socketPath} to read through: give the agent's socket with --socket or ${SOCKET_ENV}`);
    if (err instanceof AgentResponseError) throw new CliError(`${lockedText}, and the agent at ${agent.socketPath} answered ${err.body.code}: ${err.message}`);
    throw err;
  }
  const agentStore = config.kvstore === 'embedded' ? (config.kvstoreOpt['embedded.path'] ?? defaultEmbeddedPath(config.libDir)) : undefined;
  if (agentStore === undefined || fileIdentity(agentStore) !== fileIdentity(locked.path)) {
    throw new CliError(`${lockedText}, and the agent at ${agent.socketPath} uses ${agentStore ?? `the ${config.kvstore} kvstore`}, not it: give its holder's socket with --socket`);
  }
  const via = `read through the agent at ${agent.socketPath}`;
  const answered = async <T>(fn: () => Promise<T>): Promise<T> => {
    try {
      return await fn();
    } catch (err) {
      if (err instanceof AgentResponseError) throw new CliError(`agent: ${err.body.code}: ${err.message}`);
      if (err instanceof AgentUnreachableError) throw new CliError(err.message);
      throw err;
    }
  };
  return {
    get: async (key: string): Promise<KeyValue | undefined> => {
      try {
        return await agent.getKvstoreKey(key);
      } catch (err) {
        if (err instanceof AgentResponseError && err.status === 404) return undefined;
        return answered(() => Promise.reject(err));
      }
    },
    list: (prefix: string): Promise<ListResult> => answered(() => agent.listKvstoreKeys(prefix)),
    status: async (): Promise<Status> => {
      const { kvstore } = await answered(() => agent.status());
      return { backend: kvstore.backend, connected: kvstore.connected, revision: kvstore.revision, detail: `${kvstore.detail ?? locked.path}, ${via}` };
    },
  };
}

/** Kvstore errors become messages with their stable code; anything else is a bug and keeps its stack. */
function asCliError(err: unknown): unknown {
  if (isKvstoreError(err)) return new CliError(`${err.code}: ${err.message}`);
  return err;
}

function print(text: string): void {
  process.stdout.write(`${text}\n`);
}

function printJson(value: unknown): void {
  print(JSON.stringify(value, null, 2));
}

function describeKv(kv: KeyValue): string {
  return `${kv.key} => ${kv.value}`;
}

function parseTtl(text: string): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1) throw new CliError(`--ttl must be a positive number of seconds, got "${text}"`);
  return n;
}

export function registerKvstoreCommands(program: Command): void {
  const kvstore = program.command('kvstore').description('read and write the kvstore directly (debugging)');

  withStoreFlags(kvstore.command('get').argument('<key>').description('print one key'))
    .action(async (key: string, flags: StoreFlags) => {
      await withReader(flags, async (kv) => {
        const got = await kv.get(key);
        if (got === undefined) throw new CliError(`key "${key}" not found`);
        if (flags.output === 'json') printJson(got);
        else print(describeKv(got));
      });
    });

  withStoreFlags(kvstore.command('set').argument('<key>').argument('<value>').description('write one key'))
    .option('--lease <id>', 'attach the key to an existing lease')
    .option('--ttl <seconds>', 'grant a new lease with this TTL and attach the key to it')
    .action(async (key: string, value: string, flags: StoreFlags & { lease?: string; ttl?: string }) => {
      if (flags.lease !== undefined && flags.ttl !== undefined) throw new CliError('give either --lease or --ttl, not both');
      const ttl = flags.ttl === undefined ? undefined : parseTtl(flags.ttl);
      await withBackend(flags, async (kv) => {
        const lease = ttl === undefined ? flags.lease : (await kv.grantLease(ttl)).id;
        const res = await kv.put(key, value, lease === undefined ? {} : { lease });
        if (flags.output === 'json') printJson({ revision: res.revision, kv: res.kv });
        else print(`${key} set at revision ${res.revision}${lease === undefined ? '' : ` with lease ${lease}`}`);
      });
    });

  withStoreFlags(kvstore.command('delete').argument('<key-or-prefix>').description('delete one key, or every key under a prefix'))
    .option('--prefix', 'delete every key starting with the argument')
    .action(async (key: string, flags: StoreFlags & { prefix?: boolean }) => {
      await withBackend(flags, async (kv) => {
        const res = flags.prefix === true ? await kv.deletePrefix(key) : await kv.delete(key);
        if (flags.output === 'json') printJson(res);
        else print(`deleted ${count(res.deleted, 'key')} at revision ${res.revision}`);
      });
    });

  withStoreFlags(kvstore.command('list').argument('[prefix]', 'key prefix; all keys when omitted', '').description('print every key under a prefix'))
    .action(async (prefix: string, flags: StoreFlags) => {
      await withReader(flags, async (kv) => {
        const res = await kv.list(prefix);
        if (flags.output === 'json') printJson(res);
        else for (const e of res.kvs) print(describeKv(e));
      });
    });

  withStoreFlags(kvstore.command('status').description('backend, connectivity and current revision'))
    .action(async (flags: StoreFlags) => {
      await withReader(flags, async (kv) => {
        const st = await kv.status();
        if (flags.output === 'json') printJson(st);
        else print(`${st.backend}: ${st.connected ? 'connected' : 'NOT connected'}, revision ${st.revision} (${st.detail})`);
        if (!st.connected) throw new CliError(`kvstore ${st.backend} is not connected`);
      });
    });
}
