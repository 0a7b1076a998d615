// The fake Kubernetes API server of the k8s benches, run as its own process
// inside the bench node's network namespace (`nsenter --net=<node> -- node
// k8sFakeApiWorker.js '<config>'`): the fake listens on 127.0.0.1, which only a
// process in the agent's namespace can reach, and Node cannot open a socket in
// another namespace (or, config `host`, on a cluster box's hub bridge, where
// every node's agent reaches it as it reaches etcd). Spoken to in NDJSON
// (NetnsAgentChannel): it prints
// {"ready":true} once listening, then answers each command with its id:
//   {op:'kubeconfig'}                          → {path}
//   {op:'create', resource, objects, uids?}    → {atNs, count, uids?}
//   {op:'delete', resource, namespace?, name}  → {atNs}
//   {op:'requests'}                            → {requests}
//   {op:'resetRequests'}                       → {}
// (`uids`: the created objects' uids, in order — owners' uids for dependents'
// ownerReferences.)
// atNs is process.hrtime.bigint() (CLOCK_MONOTONIC, one clock for every process
// of the machine) taken right before the first write, so the bench times from
// the write itself, not from the reply's arrival. Closing stdin (or SIGTERM)
// stops the fake, which removes its kubeconfig's temp dir, and ends the process.
import { createInterface } from 'node:readline';
import { FakeKubeApi, type FakeResource } from '../test/support/fakeKubeApi.js';

export interface FakeApiWorkerConfig {
  bookmarkIntervalMs?: number;
  /** The tendril CRDs registered, as in a cluster tendril is deployed to (the agent then lists and watches its policy kinds too). */
  crds?: 'tendril';
  /** The IPv4 address to listen on (default 127.0.0.1; a bridge address: agents in other namespaces reach it directly). */
  host?: string;
}

export type FakeApiCommand =
  | { id: number; op: 'kubeconfig' }
  | { id: number; op: 'create'; resource: FakeResource; objects: object[]; uids?: boolean }
  | { id: number; op: 'delete'; resource: FakeResource; namespace?: string; name: string }
  | { id: number; op: 'requests' }
  | { id: number; op: 'resetRequests' };

export type FakeApiReply = { id: number; error?: string; path?: string; atNs?: string; count?: number; uids?: string[]; requests?: Record<string, number> };

const config = JSON.parse(process.argv[2] ?? '{}') as FakeApiWorkerConfig;
const fake = await FakeKubeApi.start({
  ...(config.bookmarkIntervalMs === undefined ? {} : { bookmarkIntervalMs: config.bookmarkIntervalMs }),
  ...(config.crds ? { crds: config.crds } : {}),
  ...(config.host ? { host: config.host } : {}),
});
let stopping: Promise<void> | undefined;
const stop = () =>
  (stopping ??= fake
    .stop()
    .catch((err: Error) => {
      process.stderr.write(`fake API stop: ${err.message}\n`);
    })
    .finally(() => process.exit(0)));
// The bench drives the shutdown (stdin's end) so the agent loses its API server only after it stopped;
// a terminal's SIGINT reaches this process too and is left to the bench.
process.on('SIGINT', () => undefined);
process.once('SIGTERM', () => void stop());

async function handle(cmd: FakeApiCommand): Promise<Omit<FakeApiReply, 'id'>> {
  switch (cmd.op) {
    case 'kubeconfig':
      return { path: await fake.kubeconfig() };
    case 'create': {
      const at = process.hrtime.bigint();
      const made = cmd.objects.map((o) => fake.create(cmd.resource, o) as { metadata?: { uid?: string } });
      return { atNs: String(at), count: cmd.objects.length, ...(cmd.uids === true ? { uids: made.map((o) => o.metadata?.uid ?? '') } : {}) };
    }
    case 'delete': {
      const at = process.hrtime.bigint();
      fake.delete(cmd.resource, cmd.namespace, cmd.name);
      return { atNs: String(at) };
    }
    case 'requests':
      return { requests: fake.requests() };
    case 'resetRequests':
      fake.resetRequests();
      return {};
  }
}

const lines = createInterface({ input: process.stdin });
lines.on('line', (line) => {
  const cmd = JSON.parse(line) as FakeApiCommand;
  handle(cmd).then(
    (r) => process.stdout.write(`${JSON.stringify({ id: cmd.id, ...r })}\n`),
    (err: Error) => process.stdout.write(`${JSON.stringify({ id: cmd.id, error: err.message })}\n`),
  );
});
lines.on('close', () => void stop());
process.stdout.write('{"ready":true}\n');
