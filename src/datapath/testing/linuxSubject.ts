import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run, runOk } from '../../testing/run.js';
import { LinuxDatapath } from '../linux/linuxDatapath.js';
import type { DatapathSubject } from './contract.js';

/**
 * The Linux datapath as a contract subject. It programs the namespace the
 * process runs in, so it must run inside a throw-away node namespace
 * (linuxContract.test.ts starts it there); pod namespaces are `tdl…` ones it
 * removes at cleanup.
 */
export async function linuxSubject(): Promise<DatapathSubject> {
  const tag = `tdlct${randomBytes(2).toString('hex')}`;
  const namespaces = new Set<string>();
  const scratch = await mkdtemp(join(tmpdir(), 'tdl-contract-'));
  let n = 0;
  const inNs = (netns: string | undefined, argv: string[]) => (netns === undefined ? argv : ['nsenter', `--net=${netns}`, '--', ...argv]);
  return {
    datapath: new LinuxDatapath(),
    routerAddress: '10.213.0.1',
    nodeNetnsPath: '/proc/self/ns/net',
    newNetns: async () => {
      const name = `${tag}p${n++}`;
      await runOk(['ip', 'netns', 'add', name]);
      namespaces.add(name);
      return `/var/run/netns/${name}`;
    },
    removeNetns: async (path) => {
      const name = path.slice('/var/run/netns/'.length);
      await runOk(['ip', 'netns', 'del', name]);
      namespaces.delete(name);
    },
    newNonNetnsFile: async () => {
      const path = join(scratch, `fifo${n++}`);
      await runOk(['mkfifo', path]);
      return path;
    },
    createVethPair: async (hostIfName, netns, podIfName) => {
      await runOk(['ip', 'link', 'add', hostIfName, 'type', 'veth', 'peer', 'name', podIfName, 'netns', netns]);
    },
    deleteLink: async (name, netns) => {
      await runOk(inNs(netns, ['ip', 'link', 'del', 'dev', name]));
    },
    deleteHostRoute: async (prefix) => {
      await runOk(['ip', 'route', 'del', prefix]);
    },
    hostRouteDev: async (prefix) => {
      const routes = JSON.parse(await runOk(['ip', '-j', 'route', 'show', 'exact', prefix])) as Array<{ dev?: string }>;
      return routes[0]?.dev;
    },
    linkExists: async (name, netns) => (await run(inNs(netns, ['ip', 'link', 'show', 'dev', name]))).code === 0,
    cleanup: async () => {
      for (const name of namespaces) await run(['ip', 'netns', 'del', name]);
      await rm(scratch, { recursive: true, force: true });
    },
  };
}
