import { access } from 'node:fs/promises';
import { validateAbsolutePath, validateInterfaceName } from '../../cni/index.js';
import type { Datapath, NodeNetworkSpec, PodAddress, PodNetwork, PodNetworkSpec, PodTeardownSpec } from '../types.js';
import { DatapathError, ip, ipBatch } from './command.js';
import { ensureHostDevice } from './hostDevice.js';
import { deleteLink, getLink, hostInterfaceName, listAddresses, listRoutes } from './links.js';
import { applyMasquerade } from './masquerade.js';
import { interfaceSysctl, setSysctl } from './sysctl.js';

const HOST_IFNAME = /^lxc[0-9a-f]{12}$/;
const hostPrefix = (a: PodAddress) => `${a.ip}/${a.family === 4 ? 32 : 128}`;

async function netnsExists(path: string): Promise<boolean> {
  if (path === '') return false;
  try {
    await access(path);
    return true;
  } catch {
    // A namespace removed by the runtime before DEL is a normal case, not an error.
    return false;
  }
}

/**
 * Pods as routed veth pairs, the way Cilium plumbs them: a /32 (or /128) in the
 * pod, a link-scoped route to the gateway and a default route through it; on
 * the host a /32 route over the pod's lxc device, which answers ARP for the
 * gateway by proxy until the eBPF datapath does.
 */
export class LinuxDatapath implements Datapath {
  async setupNode(spec: NodeNetworkSpec): Promise<void> {
    await ensureHostDevice(spec.routerAddresses);
    await applyMasquerade(spec.masqueradeCidrs);
  }

  async addPod(spec: PodNetworkSpec): Promise<PodNetwork> {
    validateAbsolutePath(spec.netns, 'netns path');
    validateInterfaceName(spec.ifName);
    const hostIf = hostInterfaceName(spec.containerId, spec.ifName);
    const inPod = { netns: spec.netns };
    if (!(await netnsExists(spec.netns))) throw new DatapathError('netns-gone', `network namespace ${spec.netns} does not exist`);

    // The peer is created inside the pod's namespace directly, so its final name
    // can never clash with a host interface (no tmp name in the host namespace).
    const create = () => ip(['link', 'add', hostIf, 'mtu', String(spec.mtu), 'type', 'veth', 'peer', 'name', spec.ifName, 'mtu', String(spec.mtu), 'netns', spec.netns]);
    try {
      await create();
    } catch (err) {
      if (!(err instanceof DatapathError && err.kind === 'exists')) throw err;
      // An interrupted ADD (or the runtime's own interface) holds a name: replace it.
      // Only on this path, so a normal ADD pays no extra process runs.
      await deleteLink(spec.ifName, inPod);
      await deleteLink(hostIf);
      await create();
    }
    try {
      const podCmds: string[][] = [['link', 'set', 'lo', 'up'], ['link', 'set', spec.ifName, 'up']];
      for (const a of spec.addresses) {
        // Batch lines take no global options such as -4/-6: every destination is explicit instead.
        podCmds.push(['addr', 'add', hostPrefix(a), 'dev', spec.ifName, ...(a.family === 6 ? ['nodad'] : [])]);
        podCmds.push(['route', 'replace', hostPrefix({ ...a, ip: a.gateway }), 'dev', spec.ifName, 'scope', 'link']);
        podCmds.push(['route', 'replace', a.family === 4 ? '0.0.0.0/0' : '::/0', 'via', a.gateway, 'dev', spec.ifName]);
      }
      await ipBatch(podCmds, inPod);

      await this.hostSide(hostIf, spec.addresses);

      const [host, pod] = await Promise.all([getLink(hostIf), getLink(spec.ifName, inPod)]);
      if (!host || !pod) throw new DatapathError('not-found', `veth pair ${hostIf}/${spec.ifName} vanished during setup`);
      return { hostIfName: hostIf, hostIfIndex: host.index, hostMac: host.mac, podIfIndex: pod.index, podMac: pod.mac };
    } catch (err) {
      // Deleting the host side removes the peer and the host routes with it.
      await deleteLink(hostIf);
      throw err;
    }
  }

  /** Host side of a pod: proxy ARP for the gateway, the link up, a /32 (/128) route per address. */
  private async hostSide(hostIf: string, addresses: PodAddress[]): Promise<void> {
    await setSysctl(interfaceSysctl(4, hostIf, 'proxy_arp'), '1');
    const hostCmds: string[][] = [['link', 'set', hostIf, 'up']];
    for (const a of addresses) hostCmds.push(['route', 'replace', hostPrefix(a), 'dev', hostIf, 'src', a.gateway]);
    await ipBatch(hostCmds);
  }

  async adoptPod(spec: { hostIfName: string; addresses: PodAddress[] }): Promise<{ hostIfIndex: number; hostMac: string }> {
    validateInterfaceName(spec.hostIfName);
    const link = await getLink(spec.hostIfName);
    if (!link) throw new DatapathError('not-found', `host interface ${spec.hostIfName} does not exist`);
    await this.hostSide(spec.hostIfName, spec.addresses);
    return { hostIfIndex: link.index, hostMac: link.mac };
  }

  async releaseAdoptedPod(spec: { hostIfName: string; addresses: PodAddress[] }): Promise<void> {
    validateInterfaceName(spec.hostIfName);
    for (const a of spec.addresses) {
      try {
        await ip(['route', 'del', hostPrefix(a), 'dev', spec.hostIfName]);
      } catch (err) {
        // Already gone (with the interface, or by hand): the goal is reached.
        if (!(err instanceof DatapathError && (err.kind === 'not-found' || /No such process/.test(err.stderr)))) throw err;
      }
    }
  }

  async removePod(spec: PodTeardownSpec): Promise<void> {
    validateInterfaceName(spec.ifName);
    const hostIf = spec.hostIfName ?? hostInterfaceName(spec.containerId, spec.ifName);
    validateInterfaceName(hostIf);
    await deleteLink(hostIf);
    if (spec.netns !== '' && (await netnsExists(spec.netns))) {
      validateAbsolutePath(spec.netns, 'netns path');
      await deleteLink(spec.ifName, { netns: spec.netns });
    }
    // Routes over the lxc device went with it; a route left on another device would be someone else's.
  }

  async checkPod(spec: PodNetworkSpec): Promise<void> {
    validateAbsolutePath(spec.netns, 'netns path');
    const hostIf = hostInterfaceName(spec.containerId, spec.ifName);
    const inPod = { netns: spec.netns };
    const fail = (msg: string): never => {
      throw new DatapathError('not-found', msg);
    };
    if (!(await netnsExists(spec.netns))) fail(`network namespace ${spec.netns} does not exist`);
    const host = await getLink(hostIf);
    if (!host?.up) fail(`host interface ${hostIf} is missing or down`);
    const pod = await getLink(spec.ifName, inPod);
    if (!pod?.up) fail(`interface ${spec.ifName} is missing or down in ${spec.netns}`);
    if (pod!.mtu !== spec.mtu) fail(`interface ${spec.ifName} has MTU ${pod!.mtu}, expected ${spec.mtu}`);
    const addrs = await listAddresses(spec.ifName, inPod);
    for (const a of spec.addresses) {
      if (!addrs.includes(hostPrefix(a))) fail(`address ${hostPrefix(a)} missing on ${spec.ifName}`);
      const routes = await listRoutes(a.family, inPod);
      if (!routes.some((r) => r.dst === 'default' && r.gateway === a.gateway)) fail(`default route via ${a.gateway} missing in the pod`);
      const hostRoutes = await listRoutes(a.family);
      if (!hostRoutes.some((r) => r.dst === a.ip && r.dev === hostIf)) fail(`host route to ${a.ip} via ${hostIf} missing`);
    }
  }

  async listPodHostInterfaces(): Promise<string[]> {
    const links = JSON.parse(await ip(['-j', 'link', 'show'])) as Array<{ ifname: string }>;
    return links.map((l) => l.ifname).filter((n) => HOST_IFNAME.test(n));
  }

  async removeHostInterface(name: string): Promise<void> {
    if (!HOST_IFNAME.test(name)) throw new DatapathError('failed', `refusing to delete ${name}: not a pod host interface`);
    await deleteLink(name);
  }

  async podExists(containerId: string, ifName: string, hostIfName?: string): Promise<boolean> {
    return (await getLink(hostIfName ?? hostInterfaceName(containerId, ifName))) !== undefined;
  }
}
