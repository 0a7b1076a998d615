// The log's two formats: JSON with ISO times for files, pipes and log
// collectors; a line a person reads on a terminal (--log-format auto, the
// default, picks by where the log goes; json and text force one).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { agentLogger } from '../agent/agentLogger.js';
import type { LogFormat } from './logger.js';
import { formatRecord } from './textFormat.js';

/** The agent's logger for a format and a terminal or not, writing to memory. */
function logTo(format: LogFormat, toTerminal: boolean): { lines: string[]; log: ReturnType<typeof agentLogger> } {
  const lines: string[] = [];
  const log = agentLogger({ logLevel: 'info', nodeName: 'tdl-fmt', logFormat: format }, { write: (s: string) => void lines.push(s) }, toTerminal);
  return { lines, log };
}

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

describe('--log-format', () => {
  it('auto on a terminal: one human line, ISO time, level, subsystem, message, fields as key=value', () => {
    const { lines, log } = logTo('auto', true);
    log.child({ subsys: 'policy' }).info({ policy: 'NetworkPolicy/prod/db-from-web', revision: 3 }, 'policy added');
    assert.equal(lines.length, 1);
    const m = /^(\S+) INFO {2}\[policy\] policy added policy=NetworkPolicy\/prod\/db-from-web revision=3\n$/.exec(lines[0]!);
    assert.ok(m, lines[0]);
    assert.match(m[1]!, ISO);
    assert.doesNotMatch(lines[0]!, /tdl-fmt|pid=/, 'the fields every record has are not repeated on every line');
  });

  it('auto to a file or a pipe, and json anywhere: JSON records with an ISO time', () => {
    for (const [format, terminal] of [['auto', false], ['json', true], ['json', false]] as const) {
      const { lines, log } = logTo(format, terminal);
      log.info({ service: 7 }, 'service created');
      const r = JSON.parse(lines[0]!) as { time: unknown; msg: string; service: number; nodeName: string };
      assert.match(String(r.time), ISO, `${format} terminal=${terminal}`);
      assert.equal(typeof r.time, 'string');
      assert.deepEqual([r.msg, r.service, r.nodeName], ['service created', 7, 'tdl-fmt']);
    }
  });

  it('text to a pipe when asked', () => {
    const { lines, log } = logTo('text', false);
    log.warn('careful');
    assert.match(lines[0]!, /^\S+ WARN {2}careful\n$/);
  });

  it('values with spaces are quoted, errors give their message and code; one line each', () => {
    const line = formatRecord(JSON.stringify({ level: 50, time: '2026-11-28T23:40:00.123Z', msg: 'failed', why: 'two words', err: { message: 'it broke\nbadly', code: 'EIO', stack: 'Error: x\n    at y' } }));
    assert.equal(line, '2026-11-28T23:40:00.123Z ERROR failed why="two words" err="it broke\\nbadly" code=EIO\n');
  });
});
