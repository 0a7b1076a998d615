import { Command, Option } from 'commander';
import { isKvstoreError } from '../kvstore/errors.js';
import { type Backend, DEFAULT_BACKEND, type KeyValue } from '../kvstore/types.js';
import { DEFAULT_LIB_DIR } from '../api/types.js';
import { describeKvstoreOptions } from '../kvstore/optionKeys.js';
import { CliError } from './cliError.js';
import { existsSync } from 'node:fs';
import { defaultEmbeddedPath } from '../kvstore/embedded/embeddedOptions.js';
import { count } from './words.js';

/**
 * `tendril kvstore get|set|delete|list|status`: direct access to the cluster
 * state for debugging, as `cilium kvstore` offers. It opens the backend
 * itself with the agent's flags, so against the embedded store it works only
 * while the agent is stopped (the store has one writer) and says so clearly.
 */

interface StoreFlags {
  kvstore: string;
  kvstoreOpt: string[];
  libDir: string;
  output: 'text' | 'json';
}

function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

function withStoreFlags(cmd: Command): Command {
  return cmd
    .option('--kvstore <backend>', 'kvstore backend: embedded or etcd', DEFAULT_BACKEND)
    .option('--kvstore-opt <key=value>', `backend option, repeatable; ${describeKvstoreOptions()}`, collect, [])
    .option('--lib-dir <dir>', 'the agent\'s durable data dir (holds the embedded store)', DEFAULT_LIB_DIR)
    .addOption(new Option('-o, --output <format>', 'output format').choices(['text', 'json']).default('text'));
}

/** Whether the command only reads: then it must never create an embedded store that is not there. */
type Access = 'read' | 'write';

async function withBackend<T>(flags: StoreFlags, fn: (kv: Backend) => Promise<T>, access: Access = 'write'): Promise<T> {
  let kv: Backend;
  try {
    // Loaded on use: the logger and option schemas cost every other `tendril` command start-up time.
    const [{ openBackend, parseKvstoreOpts }, { createLogger }] = await Promise.all([import('../kvstore/factory.js'), import('../logging/logger.js')]);
    const options = parseKvstoreOpts(flags.kvstoreOpt);
    if (access === 'read' && flags.kvstore === 'embedded') {
      // Opening a missing SQLite file creates it: an empty store that would then look "connected".
      const path = options['embedded.path'] ?? defaultEmbeddedPath(flags.libDir);
      if (!existsSync(path)) throw new CliError(`no kvstore at ${path}: is this the agent's --lib-dir?`);
    }
    kv = await openBackend({
      kind: flags.kvstore,
      options,
      dataDir: flags.libDir,
      logger: createLogger('tendril-kvstore', process.env.TENDRIL_LOG_LEVEL ?? 'warn'),
    });
  } catch (err) {
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
      await withBackend(flags, async (kv) => {
        const got = await kv.get(key);
        if (got === undefined) throw new CliError(`key "${key}" not found`);
        if (flags.output === 'json') printJson(got);
        else print(describeKv(got));
      }, 'read');
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
      await withBackend(flags, async (kv) => {
        const res = await kv.list(prefix);
        if (flags.output === 'json') printJson(res);
        else for (const e of res.kvs) print(describeKv(e));
      }, 'read');
    });

  withStoreFlags(kvstore.command('status').description('backend, connectivity and current revision'))
    .action(async (flags: StoreFlags) => {
      await withBackend(flags, async (kv) => {
        const st = await kv.status();
        if (flags.output === 'json') printJson(st);
        else print(`${st.backend}: ${st.connected ? 'connected' : 'NOT connected'}, revision ${st.revision} (${st.detail})`);
        if (!st.connected) throw new CliError(`kvstore ${st.backend} is not connected`);
      }, 'read');
    });
}
