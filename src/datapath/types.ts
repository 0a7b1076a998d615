/**
 * What the endpoint and agent logic need from the datapath. The Linux
 * implementation programs links, addresses and routes; the eBPF datapath will
 * add its maps behind the same interface.
 */
export type IpFamily = 4 | 6;

export interface PodAddress {
  family: IpFamily;
  /** Bare address; configured as /32 or /128 in the pod. */
  ip: string;
  /** The node's router address, the pod's gateway. */
  gateway: string;
}

export interface PodNetworkSpec {
  containerId: string;
  /** Path of the pod's network namespace. */
  netns: string;
  /** Interface name inside the pod (CNI_IFNAME). */
  ifName: string;
  mtu: number;
  addresses: PodAddress[];
}

export interface PodNetwork {
  hostIfName: string;
  hostIfIndex: number;
  hostMac: string;
  podIfIndex: number;
  podMac: string;
}

export interface PodTeardownSpec {
  containerId: string;
  /** The host-side interface when it is not tendril's own `lxc<hash>` (an adopted endpoint's). */
  hostIfName?: string;
  /** May be empty or gone: runtimes send DEL after the namespace is destroyed. */
  netns: string;
  ifName: string;
  addresses: PodAddress[];
}

export interface NodeNetworkSpec {
  /** Router addresses held by the host device, one per configured family. */
  routerAddresses: Array<{ family: IpFamily; ip: string }>;
  /** Traffic from these CIDRs to anywhere outside them is masqueraded. */
  masqueradeCidrs: string[];
}

export interface Datapath {
  /** Host device, forwarding and masquerading; idempotent, run at every agent start. */
  setupNode(spec: NodeNetworkSpec): Promise<void>;
  /** Plumbs a pod; on failure everything it created is removed before it throws. */
  addPod(spec: PodNetworkSpec): Promise<PodNetwork>;
  /** Removes what addPod made; parts already gone are fine. */
  removePod(spec: PodTeardownSpec): Promise<void>;
  /**
   * Takes over a pod whose veth pair someone else created (Cilium's plugin-driven
   * PUT /endpoint): the host-side routes and proxy ARP for its addresses.
   */
  adoptPod(spec: { hostIfName: string; addresses: PodAddress[] }): Promise<{ hostIfIndex: number; hostMac: string }>;
  /** Undoes adoptPod: the host routes go, the interface (not tendril's) stays. */
  releaseAdoptedPod(spec: { hostIfName: string; addresses: PodAddress[] }): Promise<void>;
  /** Verifies interface, addresses and routes; throws a DatapathError naming the first mismatch. */
  checkPod(spec: PodNetworkSpec): Promise<void>;
  /** Whether the host side of a pod still exists (used when restoring endpoints). */
  podExists(containerId: string, ifName: string, hostIfName?: string): Promise<boolean>;
  /** Host-side pod interfaces present on the node (lxc…), to find ones no endpoint owns. */
  listPodHostInterfaces(): Promise<string[]>;
  /** Deletes an orphaned host-side pod interface (and so its peer and routes). */
  removeHostInterface(name: string): Promise<void>;
}
