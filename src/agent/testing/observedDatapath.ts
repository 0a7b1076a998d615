import { FakeDatapath, type FakeDatapathOptions } from '../../datapath/fake/fakeDatapath.js';
import { hostInterfaceName } from '../../datapath/linux/links.js';
import type { PodNetwork, PodNetworkSpec, PodTeardownSpec } from '../../datapath/types.js';
import { type FakeNodeAgent, startFakeNodeAgent } from './fakeNodeAgent.js';

/** A link as the observer names it: `<namespace path>|<name>`, the node's namespace being ''. */
export type LinkKey = string;

export const linkKey = (netns: string, name: string): LinkKey => `${netns}|${name}`;

/**
 * The fake datapath plus a journal of every link the agent's calls removed,
 * replacements included: the fake replaces a link in the way of a new veth
 * under the same name, which a comparison of names before and after cannot
 * see. Tests hold a call's deletions against what the agent owned.
 */
export class ObservedFakeDatapath extends FakeDatapath {
  readonly #podNamespaces = new Set<string>();
  /** Links removed or replaced by the agent's datapath calls, in order. */
  readonly removed: LinkKey[] = [];

  constructor(options: FakeDatapathOptions = {}) {
    super(options);
  }

  override addNetns(path: string): void {
    super.addNetns(path);
    this.#podNamespaces.add(path);
  }

  override removeNetns(path: string): void {
    super.removeNetns(path);
    this.#podNamespaces.delete(path);
  }

  /** The pod namespaces the test created and has not removed. */
  podNamespaces(): string[] {
    return [...this.#podNamespaces].sort();
  }

  /** Every link of the node and of every pod namespace. */
  links(): Set<LinkKey> {
    const out = new Set<LinkKey>();
    for (const name of this.linkNames() ?? []) out.add(linkKey('', name));
    for (const ns of this.#podNamespaces) for (const name of this.linkNames(ns) ?? []) out.add(linkKey(ns, name));
    return out;
  }

  /** The key of a link in the namespace a path names (the node's own paths name the node's). */
  keyIn(netns: string, name: string): LinkKey {
    return linkKey(this.nodeNetnsPaths.includes(netns) ? '' : netns, name);
  }

  override addPod(spec: PodNetworkSpec): Promise<PodNetwork> {
    // A link already there under a name the new pair takes is replaced: deleted, then made anew.
    const taken = [this.keyIn(spec.netns, spec.ifName), linkKey('', safeHostName(spec.containerId, spec.ifName))];
    return this.#observe(taken, () => super.addPod(spec));
  }

  override removePod(spec: PodTeardownSpec): Promise<void> {
    return this.#observe([], () => super.removePod(spec));
  }

  override removeHostInterface(name: string): Promise<void> {
    return this.#observe([], () => super.removeHostInterface(name));
  }

  async #observe<T>(replacedOnSuccess: LinkKey[], call: () => Promise<T>): Promise<T> {
    const before = this.links();
    let ok = false;
    try {
      const r = await call();
      ok = true;
      return r;
    } finally {
      const after = this.links();
      for (const k of before) {
        if (!after.has(k) || (ok && replacedOnSuccess.includes(k))) this.removed.push(k);
      }
    }
  }
}

/** The host name the datapath derives, or '' for an input it refuses (the call then fails on its own). */
function safeHostName(containerId: string, ifName: string): string {
  try {
    return hostInterfaceName(containerId, ifName);
  } catch {
    return '';
  }
}

/** A real agent over the observed fake datapath. */
export type ObservedNodeAgent = FakeNodeAgent<ObservedFakeDatapath>;

export function startObservedNodeAgent(opts: { nodeName: string; podCidr: string; nodeLinks: string[]; ipamExpirationMs?: number }): Promise<ObservedNodeAgent> {
  const { nodeLinks, ...rest } = opts;
  return startFakeNodeAgent({ ...rest, datapath: new ObservedFakeDatapath({ nodeLinks }) });
}
