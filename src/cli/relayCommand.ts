/**
 * `tendril relay`: one process that serves every node's flows, merged in
 * time order, behind one address (Hubble Relay's role): the nodes from the
 * agents' node registry (etcd or the Kubernetes API) or a --peer list, each
 * read at the flows address its agent announces (--flows-listen-addr).
 * `tendril observe --server <relay>` reads it.
 */
import type { Command } from 'commander';
import { CliError } from './cliError.js';

const repeatable = (v: string, prev: string[] = []) => [...prev, v];

export function registerRelayCommand(program: Command): void {
  program
    .command('relay')
    .description('serve the flows of every node, merged in time order (GET /v1/flows, /v1/policy, /healthz, /metrics), until SIGINT/SIGTERM')
    .option('--listen-addr <host:port>', 'where to serve (default 127.0.0.1:4245); an address other hosts reach needs --tls-cert or --token-file', '127.0.0.1:4245')
    .option('--tls-cert <file>', 'serve TLS with this certificate (PEM)')
    .option('--tls-key <file>', 'the certificate\'s private key (PEM)')
    .option('--tls-client-ca <file>', 'ask clients for a certificate signed by this CA (mTLS)')
    .option('--token-file <file>', 'every request must carry this file\'s token (Authorization: Bearer)')
    .option('--peer <name=url>', 'a node\'s flows address, such as node-a=https://10.0.0.11:4245 (repeatable; instead of a registry)', repeatable)
    .option('--kvstore <backend>', 'find the nodes in the agents\' node registry in this kvstore (etcd)')
    .option('--kvstore-opt <key=value>', 'kvstore option, as the agent takes it (repeatable), such as etcd.endpoints=http://10.0.0.1:2379', repeatable)
    .option('--k8s-kubeconfig <file>', 'find the nodes in the TendrilNodes of this Kubernetes API server')
    .option('--k8s-api-server <url>', 'the Kubernetes API server\'s URL, over the kubeconfig\'s')
    .option('--k8s-namespace <ns>', 'the namespace of the nodes\' Leases (the agents\' --k8s-namespace; default kube-system)')
    .option('--peer-token-file <file>', 'the bearer token the nodes\' flows listeners want (their --flows-token-file)')
    .option('--peer-tls-ca <file>', 'the CA the nodes\' certificates are checked against')
    .option('--peer-tls-cert <file>', 'a client certificate for nodes that ask for one (their --flows-tls-client-ca)')
    .option('--peer-tls-key <file>', 'the client certificate\'s private key')
    .option('--reorder-window <ms>', 'how long a followed flow is held to be put in time order with the other nodes\' (default 300)')
    .option('--history-timeout <ms>', 'how long a node has to send its history before it is reported unavailable (default 10000)')
    .action(async (opts: Record<string, unknown>) => {
      // Loaded on use: the relay's dependencies (etcd, Kubernetes clients) cost every other command start-up time.
      const [{ startRelay }, { createLogger }, { ConfigError }] = await Promise.all([import('../relay/relayMain.js'), import('../logging/logger.js'), import('../errors/configError.js')]);
      const log = createLogger('tendril-relay');
      let relay;
      try {
        relay = await startRelay(opts as unknown as Parameters<typeof startRelay>[0], log);
      } catch (err) {
        if (err instanceof ConfigError) throw new CliError(err.message);
        throw err;
      }
      const a = relay.address;
      process.stderr.write(`tendril relay: serving on ${a.host.includes(':') ? `[${a.host}]` : a.host}:${a.port}\n`);
      await new Promise<void>((resolve) => {
        process.once('SIGINT', resolve);
        process.once('SIGTERM', resolve);
      });
      await relay.close();
    });
}
