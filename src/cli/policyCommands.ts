import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { type AgentOpts, call, client, output, table, withAgentOpts } from './agentCli.js';
import { CliError } from './cliError.js';

const repeatable = (v: string, prev: string[] = []) => [...prev, v];
const labelList = (v: string, prev: string[] = []) => [...prev, ...v.split(',').filter((s) => s !== '')];

/** `tendril policy …`: the agent's policy repository, as `cilium policy` does it. */
export function registerPolicyCommands(program: Command): void {
  const policy = program.command('policy').description('network policy: import, get, delete, selectors, trace');

  withAgentOpts(policy.command('import <file>').description('import NetworkPolicy / tendril policy documents (YAML or JSON; - for stdin)')).action(
    async (file: string, opts: AgentOpts) => {
      let text: string;
      try {
        text = file === '-' ? await readStdin() : await readFile(file, 'utf8');
      } catch (err) {
        throw new CliError(`cannot read ${file}: ${(err as Error).message}`);
      }
      const r = await call(() => client(opts).putPolicy({ text }));
      output(opts, r, () => `Revision: ${r.revision}\nImported: ${r.policies.join(', ')}\nEndpoints regenerated: ${r.regenerated.length}\n`);
    },
  );

  withAgentOpts(policy.command('get').description('the policies in the repository, with the revisions (this node\'s, and the cluster\'s: the same on every node once synced)'))
    .option('--name <name>', 'only this policy')
    .option('--namespace <ns>', 'only this namespace')
    .action(async (opts: AgentOpts & { name?: string; namespace?: string }) => {
      const r = await call(() => client(opts).getPolicy({ ...(opts.name ? { name: opts.name } : {}), ...(opts.namespace ? { namespace: opts.namespace } : {}) }));
      // The JSON carries both revisions; without -o the cluster's is said on stderr too, leaving stdout the document.
      if (opts.output === undefined) process.stderr.write(`Cluster revision: ${r.clusterRevision} (node revision ${r.revision})\n`);
      output({ ...opts, output: opts.output ?? 'json' }, r, () => '');
    });

  withAgentOpts(policy.command('delete').description('delete policies by name, namespace or label, or --all'))
    .option('--name <name>', 'policy name')
    .option('--namespace <ns>', 'namespace')
    .option('--label <k=v>', 'policy label', repeatable)
    .option('--all', 'delete every policy')
    .action(async (opts: AgentOpts & { name?: string; namespace?: string; label?: string[]; all?: boolean }) => {
      if (opts.label && opts.label.length > 1) throw new CliError('give at most one --label');
      const query = {
        ...(opts.name ? { name: opts.name } : {}),
        ...(opts.namespace ? { namespace: opts.namespace } : {}),
        ...(opts.label?.length ? { label: opts.label[0]! } : {}),
        ...(opts.all ? { all: true } : {}),
      };
      const r = await call(() => client(opts).deletePolicy(query));
      output(opts, r, () => `Revision: ${r.revision}\nDeleted: ${r.deleted.join(', ') || '(none)'}\n`);
    });

  withAgentOpts(policy.command('selectors').description('each selector and the identities it selects')).action(async (opts: AgentOpts) => {
    const r = await call(() => client(opts).getPolicySelectors());
    output(opts, r, () => table([['SELECTOR', 'USERS', 'IDENTITIES'], ...r.map((s) => [s.selector, String(s.users), s.identities.join(' ')])]));
  });

  withAgentOpts(policy.command('trace').description('would traffic from --src to --dst on --dport be allowed, and by which rules'))
    .requiredOption('--src <labels>', 'source labels, k=v[,k=v] (k8s source by default)', labelList)
    .requiredOption('--dst <labels>', 'destination labels', labelList)
    .requiredOption('--dport <port/proto>', 'e.g. 80/tcp')
    .action(async (opts: AgentOpts & { src: string[]; dst: string[]; dport: string }) => {
      const r = await call(() => client(opts).tracePolicy({ src: opts.src, dst: opts.dst, dport: opts.dport }));
      output(opts, r, () => `${r.text.join('\n')}\nFinal verdict: ${r.verdict.toUpperCase()}\n`);
      if (r.verdict !== 'allow') process.exitCode = 1;
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
    output({ ...opts, output: opts.output ?? 'json' }, r, () => '');
  });
}
