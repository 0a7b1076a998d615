import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { type AgentOpts, call, client, output, table, withAgentOpts } from './agentCli.js';
import { CliError } from './cliError.js';
import { endpointPolicyView, policyListView } from './detailViews.js';
import type { PolicyTrace } from '../api/types.js';
import { fileErrorReason } from '../errors/fileError.js';

const repeatable = (v: string, prev: string[] = []) => [...prev, v];
const labelList = (v: string, prev: string[] = []) => [...prev, ...v.split(',').filter((s) => s !== '')];

/**
 * The endpoints a policy change regenerated, and those it left not-ready
 * (the policy does not fit their map) each with its reason: a count of
 * "regenerated" that included them said the opposite of what happened.
 */
export function regenerationLines(r: { regenerated: readonly number[]; notReady: ReadonlyArray<{ endpoint: number; reason: string }> }): string {
  let out = `Endpoints regenerated: ${r.regenerated.length}${r.regenerated.length > 0 ? ` (${r.regenerated.join(', ')})` : ''}\n`;
  if (r.notReady.length === 0) return out;
  out += `Endpoints NOT ready: ${r.notReady.length} (their previous policy stays in force)\n`;
  for (const n of r.notReady) out += `  endpoint ${n.endpoint}: ${n.reason}\n`;
  return out;
}

/**
 * One line per imported policy rule that selects no endpoint, with its
 * selector: an import that changes nothing must not look like one that did.
 */
export function unselectedLines(unselected: ReadonlyArray<{ policy: string; selector: string }>): string {
  if (unselected.length === 0) return '';
  let out = '';
  for (const u of unselected) out += `Warning: ${u.policy} selects no endpoint (selector ${u.selector})\n`;
  out +=
    'A namespaced policy selects only pods of its namespace, a NetworkPolicy only their k8s: labels; a container outside Kubernetes has container: labels and no namespace: ' +
    'select it with a CiliumClusterwideNetworkPolicy, whose selectors without a source match any source (tendril endpoint list shows each endpoint\'s labels).\n';
  return out;
}

/** `tendril policy …`: the agent's policy repository, as `cilium policy` does it. */
export function registerPolicyCommands(program: Command): void {
  const policy = program.command('policy').description('network policy: import, get, promote, delete, confirm-loss, selectors, trace');

  withAgentOpts(policy.command('import <file>').description('import NetworkPolicy / tendril policy documents (YAML or JSON; - for stdin)'))
    .option('--staged', 'import them staged: computed and reported (monitor verdicts would-drop, would-allow) where they would decide a new flow otherwise, never enforced; tendril policy promote enforces them')
    .action(async (file: string, opts: AgentOpts & { staged?: boolean }) => {
      let text: string;
      try {
        text = file === '-' ? await readStdin() : await readFile(file, 'utf8');
      } catch (err) {
        throw new CliError(`cannot read ${file}: ${fileErrorReason(err)}`);
      }
      if (!hasDocument(text)) throw new CliError(`no policy documents in ${file === '-' ? 'stdin' : file}`);
      const r = await call(() => client(opts).putPolicy({ text, ...(opts.staged === true ? { staged: true } : {}) }));
      await output(opts, r, () => `Revision: ${r.revision}\n${opts.staged === true ? 'Imported staged' : 'Imported'}: ${r.policies.join(', ')}\n${regenerationLines(r)}${unselectedLines(r.selectsNoEndpoint)}`);
    });

  withAgentOpts(policy.command('promote [names...]').description('enforce staged policies (imported with --staged or the tendril.io/staged annotation) by name, or every one of a --namespace, or --all'))
    .option('--namespace <ns>', 'only policies of this namespace (alone: every staged policy of it)')
    .option('--all', 'every staged policy')
    .action(async (names: string[], opts: AgentOpts & { namespace?: string; all?: boolean }) => {
      if (names.length === 0 && !opts.namespace && !opts.all) throw new CliError('give policy names, --namespace or --all to select staged policies');
      const body = { ...(names.length > 0 ? { names } : {}), ...(opts.namespace ? { namespace: opts.namespace } : {}), ...(opts.all ? { all: true } : {}) };
      const r = await call(() => client(opts).promotePolicy(body));
      await output(opts, r, () => `Revision: ${r.revision}\nPromoted: ${r.promoted.join(', ')}\n${regenerationLines(r)}`);
    });

  withAgentOpts(policy.command('get').description('the policies in the repository, with the revisions (this node\'s, and the cluster\'s: the same on every node once synced)'))
    .option('--name <name>', 'only this policy')
    .option('--namespace <ns>', 'only this namespace')
    .action(async (opts: AgentOpts & { name?: string; namespace?: string }) => {
      const r = await call(() => client(opts).getPolicy({ ...(opts.name ? { name: opts.name } : {}), ...(opts.namespace ? { namespace: opts.namespace } : {}) }));
      await output(opts, r, () => policyListView(r));
    });

  withAgentOpts(policy.command('delete').description('delete policies by name, namespace or label, or --all'))
    .option('--name <name>', 'policy name')
    .option('--namespace <ns>', 'namespace')
    .option('--label <k=v>', 'policy label', repeatable)
    .option('--all', 'delete every policy')
    .action(async (opts: AgentOpts & { name?: string; namespace?: string; label?: string[]; all?: boolean }) => {
      if (opts.label && opts.label.length > 1) throw new CliError('give at most one --label');
      // Checked here so the user hears about the flag, not the API's all=true.
      if (!opts.name && !opts.namespace && !opts.label?.length && !opts.all) throw new CliError('give --name, --namespace or --label to select policies, or --all to delete every policy');
      const query = {
        ...(opts.name ? { name: opts.name } : {}),
        ...(opts.namespace ? { namespace: opts.namespace } : {}),
        ...(opts.label?.length ? { label: opts.label[0]! } : {}),
        ...(opts.all ? { all: true } : {}),
      };
      const r = await call(() => client(opts).deletePolicy(query));
      await output(opts, r, () => `Revision: ${r.revision}\nDeleted: ${r.deleted.join(', ') || '(none)'}\n${r.notReady.length > 0 ? regenerationLines(r) : ''}`);
    });

  withAgentOpts(policy.command('confirm-loss').description('drop the policies the kvstore lost that the agent kept in force from its state dir (policy get lists them as lost; import one again to keep it)')).action(async (opts: AgentOpts) => {
    const r = await call(() => client(opts).confirmPolicyLoss());
    await output(opts, r, () => `Revision: ${r.revision}\nDropped: ${r.dropped.join(', ') || '(none: nothing was lost)'}\nEndpoints regenerated: ${r.regenerated.length}\n`);
  });

  withAgentOpts(policy.command('selectors').description('each selector and the identities it selects')).action(async (opts: AgentOpts) => {
    const r = await call(() => client(opts).getPolicySelectors());
    await output(opts, r, () => table([['SELECTOR', 'USERS', 'IDENTITIES'], ...r.map((s) => [s.selector, String(s.users), s.identities.join(' ')])]));
  });

  const trace = withAgentOpts(
    policy
      .command('trace')
      .description(
        `would traffic from the source to the destination on --dport be allowed, and by which rules; labels are resolved as an endpoint's are: with io.kubernetes.pod.namespace=<ns> among them, labels without a source are k8s:, otherwise container: (the trace prints the labels it used)`,
      ),
  );
  for (const [side, who] of [['src', 'source'], ['dst', 'destination']] as const) {
    trace
      .option(`--${side} <labels>`, `${who} labels, [source:]k=v[,...]: no source means k8s: with an io.kubernetes.pod.namespace label, container: without (as CNI labels)`, labelList)
      .option(`--${side}-endpoint <id>`, `${who}: a local endpoint ID`)
      .option(`--${side}-k8s-pod <namespace/name>`, `${who}: a pod with an endpoint on this node`)
      .option(`--${side}-identity <id>`, `${who}: a security identity`);
  }
  trace.requiredOption('--dport <port/proto>', 'e.g. 80/tcp').action(async (opts: AgentOpts & TraceFlags) => {
    const body = { ...tracePeer('src', opts), ...tracePeer('dst', opts), dport: opts.dport };
    const r = await call(() => client(opts).tracePolicy(body));
    await output(opts, r, () => `${r.text.join('\n')}\n`);
    if (r.verdict !== 'allow') process.exitCode = 1;
  });
}

interface TraceFlags {
  src?: string[];
  srcEndpoint?: string;
  srcK8sPod?: string;
  srcIdentity?: string;
  dst?: string[];
  dstEndpoint?: string;
  dstK8sPod?: string;
  dstIdentity?: string;
  dport: string;
}

/** One side of a trace from its flags: exactly one of labels, endpoint, pod or identity. */
export function tracePeer(side: 'src' | 'dst', f: TraceFlags): Partial<PolicyTrace> {
  const labels = f[side];
  const endpoint = f[`${side}Endpoint`];
  const pod = f[`${side}K8sPod`];
  const identity = f[`${side}Identity`];
  const given = [labels, endpoint, pod, identity].filter((v) => v !== undefined).length;
  if (given !== 1) throw new CliError(`give exactly one of --${side}, --${side}-endpoint, --${side}-k8s-pod or --${side}-identity`);
  const number = (flag: string, text: string): number => {
    if (!/^\d+$/.test(text)) throw new CliError(`--${side}-${flag} must be a number, got "${text}"`);
    return Number(text);
  };
  if (labels !== undefined) {
    // A bare number is an endpoint ID typed where labels go: say so instead of tracing a label named "1".
    const numeric = labels.find((l) => /^\d+$/.test(l));
    if (numeric !== undefined) throw new CliError(`--${side} takes labels; for endpoint ${numeric} use --${side}-endpoint ${numeric}`);
    return { [side]: labels };
  }
  if (endpoint !== undefined) return { [`${side}Endpoint`]: number('endpoint', endpoint) };
  if (identity !== undefined) return { [`${side}Identity`]: number('identity', identity) };
  return { [`${side}Pod`]: pod };
}

/** Whether YAML/JSON text holds anything besides comments, blank lines and document markers. */
function hasDocument(text: string): boolean {
  return text.split('\n').some((line) => {
    const t = line.trim();
    return t !== '' && !t.startsWith('#') && t !== '---' && t !== '...';
  });
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/** `tendril endpoint policy <id>`. */
export function registerEndpointPolicyCommand(endpoint: Command): void {
  withAgentOpts(endpoint.command('policy <id>').description('the endpoint\'s computed policy map state')).action(async (id: string, opts: AgentOpts) => {
    const r = await call(() => client(opts).getEndpointPolicy(id));
    await output(opts, r, () => endpointPolicyView(r));
  });
}
