/**
 * Child process used by the kvstore tests for what needs a second process:
 * the one-writer lock, SIGKILL durability and multi-process CAS contention.
 * Modes (argv, never a shell string):
 *   hold   <dbPath>                      open the embedded store, print "ready", wait
 *   open   <dbPath>                      try to open it, print {"ok":true} or {"code":…}
 *   writer <dbPath> <firstIndex>         put k/<i> forever, printing "ack <i>" after each commit
 *   cas    <kind> <endpoint|dbPath> <key> <count>   CAS-increment key count times, print {"retries":n}
 */
import { writeSync } from 'node:fs';
import { createLogger } from '../../logging/logger.js';
import { casIncrement } from './casIncrement.js';
import { EmbeddedBackend } from '../embedded/embeddedBackend.js';
import { EMBEDDED_DEFAULTS } from '../embedded/embeddedOptions.js';
import { isKvstoreError } from '../errors.js';
import { openBackend } from '../factory.js';
import type { Backend } from '../types.js';
import { writerValue } from './writerValue.js';

const logger = createLogger('kvstore-child', 'warn');

function openEmbedded(path: string): EmbeddedBackend {
  return EmbeddedBackend.open({ ...EMBEDDED_DEFAULTS, path, logger });
}

async function main(argv: string[]): Promise<void> {
  const [mode, ...rest] = argv;
  switch (mode) {
    case 'hold': {
      openEmbedded(rest[0] as string);
      writeSync(1, 'ready\n');
      setInterval(() => undefined, 60_000);
      return;
    }
    case 'open': {
      try {
        const b = openEmbedded(rest[0] as string);
        await b.close();
        writeSync(1, `${JSON.stringify({ ok: true })}\n`);
      } catch (err) {
        if (!isKvstoreError(err)) throw err;
        writeSync(1, `${JSON.stringify({ code: err.code, message: err.message })}\n`);
      }
      return;
    }
    case 'writer': {
      const b = openEmbedded(rest[0] as string);
      for (let i = Number(rest[1]); ; i++) {
        // Mix the shapes of write the agent uses: plain puts, CAS txns, deletes.
        if (i % 5 === 4) {
          await b.txn({
            compare: [{ key: `k/${i}`, target: 'exists', value: false }],
            success: [{ type: 'put', key: `k/${i}`, value: writerValue(i) }, { type: 'put', key: 'last', value: String(i) }],
          });
        } else {
          await b.put(`k/${i}`, writerValue(i));
        }
        if (i % 11 === 10) await b.put(`tmp/${i}`, 'x').then(() => b.delete(`tmp/${i}`));
        // Only now is the write acknowledged: put/txn resolved after the commit.
        writeSync(1, `ack ${i}\n`);
      }
    }
    case 'cas': {
      const [kind, target, key, count] = rest as [string, string, string, string];
      const backend: Backend =
        kind === 'etcd'
          ? await openBackend({ kind, options: { 'etcd.endpoints': target }, dataDir: '/nonexistent', logger })
          : openEmbedded(target);
      let retries = 0;
      for (let i = 0; i < Number(count); i++) retries += await casIncrement(backend, key);
      await backend.close();
      writeSync(1, `${JSON.stringify({ retries })}\n`);
      return;
    }
    default:
      throw new Error(`kvstoreChild: unknown mode ${String(mode)}`);
  }
}

await main(process.argv.slice(2));
