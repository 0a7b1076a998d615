/**
 * Finds a running agent that uses a state dir, however it was started:
 * cleanup must never take a live agent's pins, state or kvstore. Each check
 * covers what another misses:
 * - the node lock, in this network namespace (an agent of this node);
 * - every socket the state dir names: the default one in it, the one its run
 *   record (runRecord.ts) says the agent serves, the one `--socket` gives;
 *   a path socket answers from any network namespace;
 * - the processes holding a file or directory of the state dir, the lib dir
 *   or the kvstore open, found by device and inode through /proc/<pid>/fd, so
 *   a symlinked or differently mounted path (another mount namespace) is
 *   still the same file; an embedded-store agent always holds its store;
 * - the agents holding the node lock in any network namespace, asked over
 *   their own sockets (through /proc/<pid>/root: their mount namespace) which
 *   state dir they use.
 * A process's command line is never trusted: anyone can name anything there.
 */
import { readdir, readFile, readlink, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { AgentClient } from '../../client/agentClient.js';
import { checkSocketPath } from '../../api/server/server.js';
import { abstractSocketHolders, DEFAULT_NODE_LOCK_NAME, NetnsNodeLock } from '../nodeLock.js';
import { OwnershipError } from '../../errors/ownershipError.js';
import { readRunRecord } from '../runRecord.js';

export interface LiveAgent {
  /** The process, when it could be told. */
  pid?: number;
  /** The socket it answers on, when one was found. */
  socket?: string;
  /** How it was found. */
  why: string;
}

export interface LiveAgentQuery {
  stateDir: string;
  libDir: string;
  /** Sockets named outside the state dir (--socket). */
  sockets: readonly string[];
}

/** Files and directories walked per tree; a state dir is far smaller, and a bound keeps a wrong path from walking a disk. */
const WALK_LIMIT = 50_000;
const ACCEPTING = 0x10000; // __SO_ACCEPTCON in /proc/net/unix: a listening socket

function inodeKey(st: { dev: number; ino: number }): string {
  return `${st.dev}:${st.ino}`;
}

/** dev:ino of the tree's root (through a symlink) and of everything under it (symlinks not followed). */
async function inodesUnder(root: string, into: Map<string, string>): Promise<void> {
  const top = await stat(root).catch(() => undefined);
  if (!top) return;
  into.set(inodeKey(top), root);
  if (!top.isDirectory()) return;
  const queue = [root];
  let seen = 0;
  while (queue.length > 0 && seen < WALK_LIMIT) {
    const dir = queue.pop()!;
    // A file may go while we walk: it is then not one anyone holds.
    const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
    for (const e of entries) {
      seen++;
      // A symlink inside points anywhere (/, say): its target is not the state dir's.
      if (e.isSymbolicLink()) continue;
      const path = join(dir, e.name);
      const st = await stat(path).catch(() => undefined);
      if (!st) continue;
      into.set(inodeKey(st), path);
      if (st.isDirectory()) queue.push(path);
    }
  }
}

interface ProcFd {
  pid: number;
  fd: string;
  target: string;
}

/** Every open fd of every other process, with what it points at; processes that exit meanwhile are skipped. */
async function allFds(): Promise<ProcFd[]> {
  const out: ProcFd[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    const pid = Number(entry);
    for (const fd of await readdir(`/proc/${pid}/fd`).catch(() => [])) {
      const target = await readlink(`/proc/${pid}/fd/${fd}`).catch(() => undefined);
      if (target !== undefined) out.push({ pid, fd, target });
    }
  }
  return out;
}

interface ListeningSocket {
  inode: string;
  /** A path, or @name for an abstract one. */
  name: string;
}

/** The listening unix sockets of every network namespace a process is in, read once per namespace. */
async function listeningSocketsByNetns(pids: Iterable<number>): Promise<ListeningSocket[]> {
  const namespaces = new Set<string>();
  const out: ListeningSocket[] = [];
  for (const pid of pids) {
    const ns = await readlink(`/proc/${pid}/ns/net`).catch(() => undefined);
    if (ns === undefined || namespaces.has(ns)) continue;
    const table = await readFile(`/proc/${pid}/net/unix`, 'utf8').catch(() => undefined);
    if (table === undefined) continue;
    namespaces.add(ns);
    for (const line of table.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      // Num RefCount Protocol Flags Type St Inode Path; an abstract name shows its NUL padding as '@'.
      if (f.length >= 8 && (parseInt(f[3]!, 16) & ACCEPTING) !== 0) out.push({ inode: f[6]!, name: f[7]!.startsWith('@') ? f[7]!.replace(/@+$/, '') : f[7]! });
    }
  }
  return out;
}

function describePid(pid: number, comm: Map<number, string>): string {
  const name = comm.get(pid);
  return name === undefined ? `pid ${pid}` : `pid ${pid} (${name})`;
}

/** Which state dir an agent serving on `socket` (a path in its own mount namespace) uses, as dev:ino; undefined when it does not answer. */
async function agentStateDirOf(pid: number, socket: string): Promise<{ key: string; stateDir: string } | undefined> {
  const client = new AgentClient({ socketPath: `/proc/${pid}/root${socket}`, timeoutMs: 3000 });
  let stateDir: string;
  try {
    stateDir = (await client.getConfig()).stateDir;
  } catch {
    // Not an agent's API, or not answering: this socket tells nothing.
    return undefined;
  }
  const st = await stat(`/proc/${pid}/root${stateDir}`).catch(() => undefined);
  return st ? { key: inodeKey(st), stateDir } : undefined;
}

export async function findLiveAgents(q: LiveAgentQuery): Promise<LiveAgent[]> {
  const found: LiveAgent[] = [];
  try {
    const claim = await new NetnsNodeLock().claim();
    await claim.release();
  } catch (err) {
    if (!(err instanceof OwnershipError)) throw err;
    const why = err.message.replace(/; nothing was changed$/, '');
    const holders = await abstractSocketHolders(DEFAULT_NODE_LOCK_NAME);
    if (holders.length === 0) found.push({ why });
    for (const pid of holders) found.push({ pid, why });
  }

  const fds = await allFds();
  const socketHolders = new Map<string, number>();
  for (const f of fds) {
    const m = /^socket:\[(\d+)\]$/.exec(f.target);
    if (m) socketHolders.set(m[1]!, f.pid);
  }
  const pids = new Set(fds.map((f) => f.pid));
  const comm = new Map<number, string>();
  for (const pid of pids) {
    const c = await readFile(`/proc/${pid}/comm`, 'utf8').catch(() => undefined);
    if (c !== undefined) comm.set(pid, c.trim());
  }
  const listening = await listeningSocketsByNetns(pids);
  const pidServing = (path: string) => listening.filter((s) => s.name === path).map((s) => socketHolders.get(s.inode)).find((p) => p !== undefined);

  const record = await readRunRecord(q.stateDir);
  const sockets = new Set([join(q.stateDir, 'tendril.sock'), ...q.sockets, ...(record?.socket !== undefined ? [record.socket] : [])]);
  for (const socket of sockets) {
    try {
      await checkSocketPath(socket);
    } catch (err) {
      // Anything else at the path is not an agent: it goes with the state dir, or is none of cleanup's business.
      if (!(err instanceof OwnershipError && err.code === 'SOCKET_SERVED')) continue;
      const pid = pidServing(socket);
      found.push({ ...(pid !== undefined ? { pid } : {}), socket, why: `an agent answers on ${socket}${socket === record?.socket ? ' (the state dir\'s run record names it)' : ''}` });
    }
  }

  const ours = new Map<string, string>();
  for (const dir of [q.stateDir, q.libDir]) await inodesUnder(dir, ours);
  // The record is a hint that may have been edited: the store it names counts only as a file (a directory such as / would match everything).
  for (const file of record?.kvstorePath !== undefined ? [record.kvstorePath, `${record.kvstorePath}-wal`] : []) {
    const st = await stat(file).catch(() => undefined);
    if (st?.isFile()) ours.set(inodeKey(st), file);
  }
  const holders = new Map<number, string>();
  for (const f of fds) {
    if (!f.target.startsWith('/') || holders.has(f.pid)) continue;
    const st = await stat(`/proc/${f.pid}/fd/${f.fd}`).catch(() => undefined);
    const path = st && ours.get(inodeKey(st));
    if (path !== undefined) holders.set(f.pid, path);
  }
  for (const [pid, path] of holders) {
    const socket = listening.find((s) => s.name.startsWith('/') && socketHolders.get(s.inode) === pid)?.name;
    found.push({ pid, ...(socket !== undefined ? { socket } : {}), why: `${describePid(pid, comm)} holds ${path} open` });
  }

  const stateKey = await stat(q.stateDir).then(inodeKey, () => undefined);
  if (stateKey !== undefined) {
    const lockHolders = new Set(listening.filter((s) => s.name === `@${DEFAULT_NODE_LOCK_NAME}`).map((s) => socketHolders.get(s.inode)).filter((p): p is number => p !== undefined));
    for (const pid of lockHolders) {
      if (found.some((a) => a.pid === pid)) continue;
      for (const s of listening.filter((l) => l.name.startsWith('/') && socketHolders.get(l.inode) === pid)) {
        const uses = await agentStateDirOf(pid, s.name);
        if (uses?.key === stateKey) {
          found.push({ pid, socket: s.name, why: `${describePid(pid, comm)} holds the node lock of its network namespace and serves ${s.name} with --state-dir ${uses.stateDir}` });
          break;
        }
      }
    }
  }
  return merged(found);
}

/** One line per process: the same agent found by several checks is named once, with every reason. */
function merged(found: LiveAgent[]): LiveAgent[] {
  const out: LiveAgent[] = [];
  for (const a of found) {
    const same = out.find((o) => (a.pid !== undefined && o.pid === a.pid) || (a.socket !== undefined && o.socket === a.socket));
    if (!same) {
      out.push({ ...a });
      continue;
    }
    if (same.pid === undefined && a.pid !== undefined) same.pid = a.pid;
    if (same.socket === undefined && a.socket !== undefined) same.socket = a.socket;
    same.why = `${same.why}; ${a.why}`;
  }
  return out;
}

export function describeLiveAgent(a: LiveAgent): string {
  const who = [a.pid !== undefined ? `pid ${a.pid}` : 'pid unknown', a.socket !== undefined ? `socket ${a.socket}` : 'socket unknown'].join(', ');
  return `agent ${who}: ${a.why}`;
}
