/**
 * The fake Kubernetes API server listens on the test process's loopback, but
 * the agent runs in a node namespace, whose loopback is another one. This
 * relay bridges them without any traffic leaving the machine's loopbacks:
 *
 *   agent -> 127.0.0.1:<port> in the node namespace (this script, run there
 *   with nsenter) -> a unix socket (paths are not per network namespace) ->
 *   the test process, which connects it to the fake's 127.0.0.1:<port>.
 *
 * The port is the fake's own, so the fake's URL and kubeconfig hold inside the
 * node namespace too. Each side's close or error closes the other: the fake
 * pausing or dropping connections reaches the agent as it would directly.
 *
 * Run: node k8sApiRelay.js <port> <unix socket path>; prints {"ready":true}
 * once it listens.
 */
import { connect, createServer, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';

/** Pipes two sockets both ways; either one closing or failing destroys the other. */
export function splice(a: Socket, b: Socket): void {
  a.pipe(b);
  b.pipe(a);
  const both = () => {
    a.destroy();
    b.destroy();
  };
  a.on('error', both);
  b.on('error', both);
  a.on('close', both);
  b.on('close', both);
}

function main(): void {
  const [portText, unixPath] = process.argv.slice(2);
  const port = Number(portText);
  if (!Number.isInteger(port) || port <= 0 || !unixPath) {
    process.stderr.write('usage: k8sApiRelay <port> <unix socket path>\n');
    process.exit(2);
  }
  const server = createServer((client) => splice(client, connect(unixPath)));
  server.on('error', (err) => {
    process.stderr.write(`k8sApiRelay: ${err.message}\n`);
    process.exit(1);
  });
  server.listen(port, '127.0.0.1', () => process.stdout.write('{"ready":true}\n'));
  process.on('SIGTERM', () => process.exit(0));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main();
