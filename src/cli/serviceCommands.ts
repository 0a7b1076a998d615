import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import type { RequestBody, ResponseBody } from '../api/types.js';
import { AgentResponseError } from '../client/agentClient.js';
import { type AgentOpts, call, client, output, table, withAgentOpts } from './agentCli.js';
import { addressPort } from './words.js';
import { CliError } from './cliError.js';
import { fileErrorReason } from '../errors/fileError.js';

type ServiceBody = RequestBody<'putService'>;
type ServiceRow = ResponseBody<'getService', 200>;
type BackendBody = ServiceBody['backend-addresses'][number];

const SERVICE_TYPES = ['ClusterIP', 'NodePort', 'ExternalIPs', 'LoadBalancer'] as const;
const TRAFFIC_POLICIES = ['Cluster', 'Local'] as const;
const BACKEND_STATES = ['active', 'terminating', 'quarantined', 'maintenance'] as const;
const PROTOCOLS = ['TCP', 'UDP'] as const;

/** One of `allowed`, matched without regard to case, in its canonical spelling. */
function oneOf<T extends string>(text: string, allowed: readonly T[], what: string): T {
  const hit = allowed.find((a) => a.toLowerCase() === text.toLowerCase());
  if (!hit) throw new CliError(`${what} must be one of ${allowed.join(', ')}, got "${text}"`);
  return hit;
}

function wholeNumber(text: string, what: string, min: number, max: number): number {
  if (!/^\d{1,10}$/.test(text) || Number(text) < min || Number(text) > max) throw new CliError(`${what} must be a number from ${min} to ${max}, got "${text}"`);
  return Number(text);
}

export function serviceId(text: string, what = 'service ID'): number {
  return wholeNumber(text, what, 1, 65535);
}

/** `ip:port`; an IPv6 address in brackets (`[fd00::1]:80`) is passed on for the agent to judge. */
export function parseAddressPort(text: string, what: string): { ip: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d+)$/.exec(text);
  if (!m) throw new CliError(`${what} must be <ip>:<port>, got "${text}"`);
  return { ip: (m[1] ?? m[2])!, port: wholeNumber(m[3]!, `${what} port`, 1, 65535) };
}

/** `--backends ip:port[@weight][=state],…`. */
export function parseBackends(text: string): BackendBody[] {
  const items = text.split(',').map((s) => s.trim());
  if (text.trim() === '') return [];
  return items.map((item) => {
    if (item === '') throw new CliError(`--backends has an empty entry: "${text}"`);
    const m = /^(.*?)(?:@(\d+))?(?:=([a-zA-Z]+))?$/.exec(item)!;
    const { ip, port } = parseAddressPort(m[1]!, `backend "${item}"`);
    return {
      ip,
      port,
      ...(m[2] !== undefined ? { weight: wholeNumber(m[2], `backend "${item}" weight`, 0, 65535) } : {}),
      ...(m[3] !== undefined ? { state: oneOf(m[3], BACKEND_STATES, `backend "${item}" state`) } : {}),
    };
  });
}

export interface UpsertFlags {
  id?: string;
  file?: string;
  frontend?: string;
  protocol?: string;
  backends?: string;
  type?: string;
  trafficPolicy?: string;
  internalTrafficPolicy?: string;
  sessionAffinity?: boolean;
  sessionAffinityTimeout?: string;
  sourceRanges?: string;
}

const SPEC_FLAGS: Array<[keyof UpsertFlags, string]> = [
  ['frontend', '--frontend'],
  ['protocol', '--protocol'],
  ['backends', '--backends'],
  ['type', '--type'],
  ['trafficPolicy', '--traffic-policy'],
  ['internalTrafficPolicy', '--internal-traffic-policy'],
  ['sessionAffinity', '--session-affinity'],
  ['sessionAffinityTimeout', '--session-affinity-timeout'],
  ['sourceRanges', '--source-ranges'],
];

/** The body `service upsert` sends, from its flags (without -f). */
export function serviceBodyFromFlags(o: UpsertFlags): ServiceBody {
  if (o.frontend === undefined) throw new CliError('give --frontend <ip:port> (or the whole service with -f <file|->)');
  const frontend = parseAddressPort(o.frontend, '--frontend');
  return {
    'frontend-address': { ...frontend, protocol: oneOf(o.protocol ?? 'TCP', PROTOCOLS, '--protocol') },
    'backend-addresses': parseBackends(o.backends ?? ''),
    flags: {
      type: oneOf(o.type ?? 'ClusterIP', SERVICE_TYPES, '--type'),
      ...(o.trafficPolicy !== undefined ? { trafficPolicy: oneOf(o.trafficPolicy, TRAFFIC_POLICIES, '--traffic-policy') } : {}),
      ...(o.internalTrafficPolicy !== undefined ? { internalTrafficPolicy: oneOf(o.internalTrafficPolicy, TRAFFIC_POLICIES, '--internal-traffic-policy') } : {}),
      ...(o.sessionAffinity ? { sessionAffinity: true } : {}),
      ...(o.sessionAffinityTimeout !== undefined ? { sessionAffinityTimeout: wholeNumber(o.sessionAffinityTimeout, '--session-affinity-timeout', 1, 86400) } : {}),
      // The agent judges each CIDR (and that the type is LoadBalancer): one place says what is wrong.
      ...(o.sourceRanges !== undefined ? { sourceRanges: o.sourceRanges.split(',').map((r) => r.trim()).filter((r) => r !== '') } : {}),
    },
  };
}

/** The service ID and body of `service upsert`: from the flags, or from -f with --id or the file's `id`. */
export async function upsertRequest(o: UpsertFlags): Promise<{ id: number; body: ServiceBody }> {
  if (o.file === undefined) {
    if (o.id === undefined) throw new CliError('give --id <1-65535>');
    return { id: serviceId(o.id, '--id'), body: serviceBodyFromFlags(o) };
  }
  const mixed = SPEC_FLAGS.filter(([k]) => o[k] !== undefined).map(([, flag]) => flag);
  if (mixed.length > 0) throw new CliError(`-f gives the whole service: drop ${mixed.join(', ')}`);
  let text: string;
  try {
    text = o.file === '-' ? await readStdin() : await readFile(o.file, 'utf8');
  } catch (err) {
    throw new CliError(`cannot read ${o.file}: ${fileErrorReason(err)}`);
  }
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (err) {
    throw new CliError(`${o.file === '-' ? 'stdin' : o.file} is not JSON: ${(err as Error).message}`);
  }
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw new CliError(`${o.file === '-' ? 'stdin' : o.file} must hold one service object`);
  const fileId = (body as { id?: unknown }).id;
  if (o.id !== undefined) return { id: serviceId(o.id, '--id'), body: body as ServiceBody };
  if (typeof fileId !== 'number') throw new CliError('give --id <1-65535>, or an "id" in the file');
  return { id: serviceId(String(fileId), 'the file\'s id'), body: body as ServiceBody };
}

type BatchChange = RequestBody<'applyServices'>['changes'][number];
type BatchResult = ResponseBody<'applyServices', 200>['results'][number];
/** What one PATCH /service takes: its document's limits. */
export const BATCH_MAX_CHANGES = 250;
export const BATCH_MAX_BACKENDS = 64;

/** The services of `service apply -f`: a JSON list of services with their IDs (what `service list -o json` prints), or one service. */
export async function applyRequest(file: string): Promise<Array<ServiceBody & { id: number }>> {
  let text: string;
  try {
    text = file === '-' ? await readStdin() : await readFile(file, 'utf8');
  } catch (err) {
    throw new CliError(`cannot read ${file}: ${fileErrorReason(err)}`);
  }
  const where = file === '-' ? 'stdin' : file;
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    throw new CliError(`${where} is not JSON: ${(err as Error).message}`);
  }
  const list = Array.isArray(doc) ? doc : [doc];
  const seen = new Set<number>();
  return list.map((item, i) => {
    if (item === null || typeof item !== 'object' || Array.isArray(item)) throw new CliError(`${where}: item ${i} is not a service object`);
    const id = (item as { id?: unknown }).id;
    if (typeof id !== 'number') throw new CliError(`${where}: item ${i} has no "id" (every service of a batch names its ID)`);
    const sid = serviceId(String(id), `${where}: item ${i}'s id`);
    if (seen.has(sid)) throw new CliError(`${where}: service ${sid} is given twice`);
    seen.add(sid);
    return item as ServiceBody & { id: number };
  });
}

/**
 * Sends the services in batches of PATCH /service (a service with more
 * backends than a batch takes goes alone through PUT /service/{id}); what each did.
 */
export async function applyServices(c: ReturnType<typeof client>, services: ReadonlyArray<ServiceBody & { id: number }>): Promise<BatchResult[]> {
  const results: BatchResult[] = [];
  let batch: BatchChange[] = [];
  const flush = async () => {
    if (batch.length === 0) return;
    const r = await c.applyServices({ changes: batch });
    results.push(...r.results);
    batch = [];
  };
  for (const s of services) {
    if (s['backend-addresses'].length <= BATCH_MAX_BACKENDS) {
      batch.push({ upsert: s });
      if (batch.length === BATCH_MAX_CHANGES) await flush();
      continue;
    }
    try {
      const existed = await serviceExists(c, s.id);
      await c.putService(s.id, s);
      results.push({ id: s.id, op: 'upsert', result: existed ? 'updated' : 'created' });
    } catch (err) {
      if (!(err instanceof AgentResponseError)) throw err;
      results.push({ id: s.id, op: 'upsert', result: 'failed', error: { code: err.body.code, message: err.message } });
    }
  }
  await flush();
  return results;
}

async function serviceExists(c: ReturnType<typeof client>, id: number): Promise<boolean> {
  try {
    await c.getService(id);
    return true;
  } catch (err) {
    if (err instanceof AgentResponseError && err.status === 404) return false;
    throw err;
  }
}

/** `service apply`'s summary: the counts, then each failure. */
export function applySummary(results: readonly BatchResult[]): string {
  const count = (what: BatchResult['result']) => results.filter((r) => r.result === what).length;
  const lines = [`Applied ${results.length} service${results.length === 1 ? '' : 's'}: ${count('created')} created, ${count('updated')} updated, ${count('unchanged')} unchanged, ${count('failed')} failed`];
  for (const r of results) if (r.result === 'failed') lines.push(`  service ${r.id}: ${r.error?.code ?? 'FAILED'}: ${r.error?.message ?? ''}`);
  return `${lines.join('\n')}\n`;
}

function typeText(s: ServiceRow): string {
  const extra = [
    ...(s.flags.trafficPolicy === 'Local' ? ['Local'] : []),
    ...(s.flags.internalTrafficPolicy === 'Local' ? ['internal Local'] : []),
    ...(s.flags.sessionAffinity ? [`affinity ${s.flags.sessionAffinityTimeout}s`] : []),
    ...(s.flags.sourceRanges.length > 0 ? [`from ${s.flags.sourceRanges.join(', ')}`] : []),
  ];
  return extra.length === 0 ? s.flags.type : `${s.flags.type} (${extra.join(', ')})`;
}

/** As `cilium service list`: a service per block, one backend a line, numbered, with its state. */
export function serviceTable(services: readonly ServiceRow[]): string {
  const rows = [['ID', 'FRONTEND', 'SERVICE TYPE', 'BACKEND']];
  for (const s of services) {
    const fe = s['frontend-address'];
    const head = [String(s.id), `${addressPort(fe.ip, fe.port)}/${fe.protocol}`, typeText(s) + (s.realized ? '' : ' [not realized]')];
    const backends = s['backend-addresses'];
    if (backends.length === 0) rows.push([...head, '(no backends)']);
    backends.forEach((b, i) => {
      const weight = b.weight === 1 ? '' : `, weight ${b.weight}`;
      rows.push([...(i === 0 ? head : ['', '', '']), `${i + 1} => ${addressPort(b.ip, b.port)}/${fe.protocol} (${b.state}${weight})`]);
    });
  }
  return table(rows);
}

/** `tendril service …`: the agent's services, as `cilium service` does it. */
export function registerServiceCommands(program: Command): void {
  const service = program.command('service').description('services: list, get, upsert, apply, delete (load-balanced by the eBPF datapath)');

  withAgentOpts(service.command('list').description('every service with its frontend, type and backends')).action(async (opts: AgentOpts) => {
    const rows = await call(() => client(opts).listServices());
    await output(opts, rows, () => serviceTable(rows));
  });

  withAgentOpts(service.command('get <id>').description('one service')).action(async (id: string, opts: AgentOpts) => {
    const sid = serviceId(id);
    const r = await call(() => client(opts).getService(sid));
    await output(opts, r, () => serviceTable([r]));
  });

  withAgentOpts(service.command('upsert').description('create or replace a service, from flags or from a JSON file (-f <file|->) in the API\'s shape'))
    .option('--id <id>', 'service ID (1-65535); with -f, the file\'s "id" when not given')
    .option('-f, --file <file>', 'the service as JSON (PUT /service/{id} body); - for stdin')
    .option('--frontend <ip:port>', 'frontend address and port (0.0.0.0 or [::] for a NodePort on every node address of the family)')
    .option('--protocol <tcp|udp>', 'frontend protocol (default tcp)')
    .option('--backends <list>', 'backends: ip:port[@weight][=state],… (state active, terminating, quarantined, maintenance)')
    .option('--type <type>', 'ClusterIP (default), NodePort, ExternalIPs or LoadBalancer')
    .option('--traffic-policy <policy>', 'externalTrafficPolicy: Cluster (default) or Local')
    .option('--internal-traffic-policy <policy>', 'internalTrafficPolicy: Cluster (default) or Local')
    .option('--session-affinity', 'ClientIP session affinity')
    .option('--session-affinity-timeout <seconds>', 'session affinity timeout (default 10800)')
    .option('--source-ranges <cidrs>', 'a LoadBalancer\'s loadBalancerSourceRanges: only these sources reach it (comma-separated CIDRs)')
    .action(async (opts: AgentOpts & UpsertFlags) => {
      const { id, body } = await upsertRequest(opts);
      const c = client(opts);
      // As `cilium service update`: say whether the ID was new.
      const existed = await call(() => serviceExists(c, id));
      const r = await call(() => c.putService(id, body));
      await output(opts, r, () => `${existed ? 'Updated' : 'Created'} service ${id}\n${serviceTable([r])}`);
    });

  withAgentOpts(service.command('apply').description('create or replace many services in batches, from a JSON list of services with their IDs (what `service list -o json` prints)'))
    .requiredOption('-f, --file <file>', 'the services as a JSON list (or one service); - for stdin')
    .action(async (opts: AgentOpts & { file: string }) => {
      const services = await applyRequest(opts.file);
      const results = await call(() => applyServices(client(opts), services));
      await output(opts, results, () => applySummary(results));
      if (results.some((r) => r.result === 'failed')) process.exitCode = 1;
    });

  withAgentOpts(service.command('delete <id>').description('delete a service')).action(async (id: string, opts: AgentOpts) => {
    const sid = serviceId(id);
    const r = await call(() => client(opts).deleteService(sid));
    await output(opts, r, () => `Deleted service ${r.deleted}\n`);
  });
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}
