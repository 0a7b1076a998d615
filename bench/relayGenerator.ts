// The relay bench's nodes: HTTP servers on loopback that answer GET /v1/flows
// as a node's flows listener does (a followed answer: the end of the history
// part, then new flows), replaying generated flows at a fixed rate each — a
// generator, not agents. Run as its own process, so the relay's process does
// only the relay's work. argv: <nodes> <flows per second each>; prints
// {"ports":[...]} once listening; a client too slow for it (4 MiB queued)
// misses flows, counted in `lost` lines as the agent's route does.
import { createServer, type Server } from 'node:http';

const nodes = Number(process.argv[2] ?? 3);
const rate = Number(process.argv[3] ?? 10_000);
const TICK_MS = 10;
const MAX_QUEUED = 4 << 20;

function flowLine(node: string, seq: number, time: string): string {
  // A flow as an agent's history holds it (a trace of a new connection between two pods), ~700 bytes.
  return `{"flow":{"node":"${node}","verdict":"forwarded","count":1,"firstTime":"${time}","event":{"type":"trace","tracePoint":"to-endpoint","time":"${time}","direction":"ingress","source":{"endpoint":${1 + (seq % 200)},"pod":{"namespace":"shop","name":"web-7d9f8-${seq % 50}"},"identity":30012,"labels":["k8s:app=web","k8s:io.kubernetes.pod.namespace=shop"],"ip":"10.0.${seq % 200}.12","port":${32768 + (seq % 28000)}},"destination":{"endpoint":13,"pod":{"namespace":"shop","name":"db-0"},"identity":30013,"labels":["k8s:app=db","k8s:io.kubernetes.pod.namespace=shop"],"ip":"10.0.1.13","port":5432},"protocol":"tcp","tcpFlags":["SYN"],"interface":{"ifindex":7,"name":"lxc12"},"length":74}}}\n`;
}

function serve(node: string): Promise<Server> {
  const server = createServer((req, res) => {
    if (!(req.url ?? '').startsWith('/v1/flows')) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    res.write(`{"nodeStatus":{"node":"${node}","state":"ok","flows":0}}\n`);
    const started = Date.now();
    let sent = 0;
    let lost = 0;
    const timer = setInterval(() => {
      const due = Math.floor(((Date.now() - started) * rate) / 1000);
      const time = new Date().toISOString();
      let chunk = '';
      for (; sent < due; sent++) {
        if (res.writableLength > MAX_QUEUED) lost++;
        else chunk += flowLine(node, sent, time);
      }
      if (lost > 0 && res.writableLength <= MAX_QUEUED) {
        chunk += `{"lost":{"node":"${node}","count":${lost},"reason":"the client did not keep up"}}\n`;
        lost = 0;
      }
      if (chunk !== '') res.write(chunk);
    }, TICK_MS);
    res.on('close', () => clearInterval(timer));
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

const servers = await Promise.all(Array.from({ length: nodes }, (_, i) => serve(`gen-${i}`)));
process.stdout.write(`${JSON.stringify({ ports: servers.map((s) => (s.address() as { port: number }).port) })}\n`);
process.on('SIGTERM', () => process.exit(0));
