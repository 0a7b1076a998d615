import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { waitFor } from '../../identity/testing/cluster.js';
import type { IPCache } from '../ipcache.js';

/**
 * The contract every ipcache sync keeps, whatever carries the cluster's
 * endpoints: the kvstore (KvstoreIPCacheSync; syncSuite.ts, embedded and
 * etcd) and the Kubernetes API (KubernetesIPCacheSync over TendrilEndpoint
 * objects; src/k8s/kubernetesIPCacheSync.test.ts, the fake API server).
 * What only one carrier does (leases and compaction, objects and owners) is
 * tested beside it.
 */

/** One pod's endpoint, as the endpoint manager puts it in the ipcache. */
export interface ContractEndpoint {
  id: number;
  namespace: string;
  pod: string;
  identity: number;
  addresses: string[];
}

export interface SyncContractNode {
  name: string;
  ipcache: IPCache;
  /**
   * What the endpoint manager does when the endpoint gets (or changes) its
   * identity: its addresses into the ipcache as `local` entries of owner
   * `endpoint:<id>` (and whatever the carrier needs beside: the pod in the API).
   */
  publish(ep: ContractEndpoint): Promise<void>;
  /** What a deletion does: the endpoint's local entries withdrawn. */
  withdraw(ep: ContractEndpoint): void;
  /** Resolves when this node's writes have landed. */
  flush(): Promise<void>;
  pruneStale(): Promise<number>;
}

export interface SyncContractCluster {
  /** A started sync for one node (a second call for a name starts its next life, the former one stopped). */
  node(name: string, nodeIP: string): Promise<SyncContractNode>;
  /** The node stops cleanly, leaving what it published (an agent restart). */
  stop(name: string): Promise<void>;
  /** The node dies: its liveness lapses (kvstore: its lease expires; Kubernetes: it leaves the node registry). */
  kill(name: string): Promise<void>;
  /** The dead node is back (the kvstore node restarts and publishes its endpoints again; the Kubernetes node's Lease is live again). */
  revive(name: string): Promise<SyncContractNode>;
  /** Another writer leaves a record for `ip` that no tendril would write (an unusable value, an address that is not one). */
  writeBroken(ip: string): Promise<void>;
}

export interface SyncContractHarness {
  /** A cluster no other test shares (a fresh key prefix, a fresh API server). */
  cluster(what: string): Promise<SyncContractCluster>;
  /** Stops every node and cluster it made. */
  destroy(): Promise<void>;
}

/** The ipcache entry for ip once it has this identity and host. */
function arrives(n: SyncContractNode, ip: string, identity: number, hostIP: string, timeoutMs?: number) {
  return waitFor(
    `${ip} → identity ${identity} via ${hostIP} on ${n.name}`,
    () => {
      const e = n.ipcache.lookup(ip);
      return e !== undefined && e.identity === identity && e.hostIP === hostIP && e.source === 'kvstore' ? e : undefined;
    },
    timeoutMs,
  );
}

const gone = (n: SyncContractNode, ip: string, timeoutMs?: number) => waitFor(`${ip} gone from ${n.name}`, () => n.ipcache.lookup(ip) === undefined, timeoutMs);

export function runSyncContract(name: string, newHarness: () => Promise<SyncContractHarness>, o: { deathTimeoutMs: number }): void {
  describe(`ipcache sync contract: ${name}`, () => {
    let harness: SyncContractHarness;
    before(async () => {
      harness = await newHarness();
    });
    after(async () => {
      await harness?.destroy();
    });

    const web = (id: number, addresses: string[], identity = 300): ContractEndpoint => ({ id, namespace: 'shop', pod: `web-${id}`, identity, addresses });

    it("an endpoint node A publishes is in node B's ipcache with its identity and A as host; A keeps only its own entry", async (t) => {
      const cluster = await harness.cluster('publish');
      const a = await cluster.node('node-a', '192.168.0.1');
      const b = await cluster.node('node-b', '192.168.0.2');
      const t0 = performance.now();
      await a.publish(web(1, ['10.0.1.1', 'fd00:1::1']));
      await arrives(b, '10.0.1.1', 300, '192.168.0.1');
      t.diagnostic(`A → B over ${name}: ${(performance.now() - t0).toFixed(1)} ms`);
      await arrives(b, 'fd00:1::1', 300, '192.168.0.1');
      assert.deepEqual(a.ipcache.candidates('10.0.1.1').map((e) => e.source), ['local'], "A's own endpoint is not mirrored back");
      // B's endpoints reach A the same way.
      await b.publish(web(2, ['10.0.2.1'], 301));
      await arrives(a, '10.0.2.1', 301, '192.168.0.2');
    });

    it('an identity change is followed; the delete removes the entries', async () => {
      const cluster = await harness.cluster('change');
      const a = await cluster.node('node-a', '192.168.0.1');
      const b = await cluster.node('node-b', '192.168.0.2');
      const ep = web(1, ['10.0.1.5', 'fd00:1::5']);
      await a.publish(ep);
      await arrives(b, '10.0.1.5', 300, '192.168.0.1');
      await a.publish({ ...ep, identity: 302 });
      await arrives(b, '10.0.1.5', 302, '192.168.0.1');
      await arrives(b, 'fd00:1::5', 302, '192.168.0.1');
      a.withdraw({ ...ep, identity: 302 });
      await gone(b, '10.0.1.5');
      await gone(b, 'fd00:1::5');
    });

    it("a dead node's entries leave the other nodes and come back when it returns; the others' stay", async () => {
      const cluster = await harness.cluster('death');
      const a = await cluster.node('node-a', '192.168.0.1');
      const b = await cluster.node('node-b', '192.168.0.2');
      const c = await cluster.node('node-c', '192.168.0.3');
      await a.publish(web(1, ['10.0.3.1']));
      await c.publish(web(3, ['10.0.3.3'], 303));
      await arrives(b, '10.0.3.1', 300, '192.168.0.1');
      await arrives(b, '10.0.3.3', 303, '192.168.0.3');
      await cluster.kill('node-a');
      await gone(b, '10.0.3.1', o.deathTimeoutMs);
      assert.equal(b.ipcache.lookup('10.0.3.3')?.identity, 303, "c's entry stays");
      await cluster.revive('node-a');
      await arrives(b, '10.0.3.1', 300, '192.168.0.1');
      await arrives(c, '10.0.3.1', 300, '192.168.0.1');
    });

    it("a broken record from another writer is ignored; the others' records still flow", async () => {
      const cluster = await harness.cluster('broken');
      const a = await cluster.node('node-a', '192.168.0.1');
      const b = await cluster.node('node-b', '192.168.0.2');
      await cluster.writeBroken('10.0.4.66');
      await a.publish(web(1, ['10.0.4.1']));
      await arrives(b, '10.0.4.1', 300, '192.168.0.1');
      assert.equal(b.ipcache.lookup('10.0.4.66'), undefined, 'nothing from the broken record');
      // The watch lives on: a later change arrives.
      await a.publish(web(2, ['10.0.4.2'], 301));
      await arrives(b, '10.0.4.2', 301, '192.168.0.1');
      assert.equal(b.ipcache.lookup('10.0.4.66'), undefined);
    });

    it('after a restart, pruneStale removes what the earlier life published and this one does not', async () => {
      const cluster = await harness.cluster('prune');
      const first = await cluster.node('node-a', '192.168.0.1');
      const b = await cluster.node('node-b', '192.168.0.2');
      const kept = web(1, ['10.0.7.1']);
      const dropped = web(2, ['10.0.7.2'], 301);
      await first.publish(kept);
      await first.publish(dropped);
      await first.flush();
      await arrives(b, '10.0.7.2', 301, '192.168.0.1');
      await cluster.stop('node-a');
      const again = await cluster.node('node-a', '192.168.0.1');
      await again.publish(kept);
      await again.flush();
      assert.equal(await again.pruneStale(), 1);
      await gone(b, '10.0.7.2');
      await arrives(b, '10.0.7.1', 300, '192.168.0.1');
      assert.equal(await again.pruneStale(), 0, 'nothing left to prune');
    });

    it("an address handed from node A's pod to node B's: A's late delete does not remove B's entry (Cilium #19958)", async () => {
      const cluster = await harness.cluster('handoff');
      const a = await cluster.node('node-a', '192.168.0.1');
      const b = await cluster.node('node-b', '192.168.0.2');
      const c = await cluster.node('node-c', '192.168.0.3');
      const old = web(1, ['10.0.2.9'], 300);
      await a.publish(old);
      await a.flush();
      await arrives(c, '10.0.2.9', 300, '192.168.0.1');
      // The address is reused on node B before node A's delete runs.
      const reused: ContractEndpoint = { id: 7, namespace: 'shop', pod: 'db-7', identity: 301, addresses: ['10.0.2.9'] };
      await b.publish(reused);
      await b.flush();
      await arrives(c, '10.0.2.9', 301, '192.168.0.2');
      a.withdraw(old);
      await a.flush();
      await arrives(a, '10.0.2.9', 301, '192.168.0.2');
      // Watches deliver in order: once A's next endpoint is on C, so is whatever A's delete did.
      await a.publish(web(2, ['10.0.2.10'], 302));
      await arrives(c, '10.0.2.10', 302, '192.168.0.1');
      const seen = c.ipcache.lookup('10.0.2.9');
      assert.equal(seen?.identity, 301, 'the new owner keeps the address on C');
      assert.equal(seen.hostIP, '192.168.0.2');
      assert.equal(seen.owner, 'node:node-b');
    });
  });
}
