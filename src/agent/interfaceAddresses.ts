import { Netlink } from '../datapath/kernel/netlink/index.js';

/** rt_scope values below this (universe 0, site 200) are addresses others can reach; link (253) and host (254) are not. */
const RT_SCOPE_LINK = 253;

/**
 * The addresses of the node's interfaces in the agent's network namespace
 * (or the one at `netns`),
 * read over netlink: what packets the node itself sends carry as source, so
 * the ipcache can give them identity `host`. Loopback and link-local
 * addresses are left out (no pod traffic carries them).
 */
export async function readInterfaceAddresses(netns?: string): Promise<string[]> {
  const nl = await Netlink.open(netns === undefined ? {} : { netns });
  try {
    return (await nl.listAddresses()).filter((a) => a.scope < RT_SCOPE_LINK).map((a) => a.ip);
  } finally {
    await nl.close();
  }
}
