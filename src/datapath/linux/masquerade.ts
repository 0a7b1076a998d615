import { cidrFamily } from '../../cni/index.js';
import { DatapathError, runCommand } from './command.js';

/** The nftables table tendril owns; nothing else in the ruleset is touched. */
export const NFT_TABLE = 'tendril';

/**
 * Replaces tendril's nftables table atomically: pod traffic leaving the pod
 * CIDRs is masqueraded. The "add; delete; define" sequence in one `nft -f`
 * transaction swaps the table without a window where the rules are missing.
 */
export async function applyMasquerade(cidrs: readonly string[]): Promise<void> {
  for (const c of cidrs) {
    if (cidrFamily(c) === 0) throw new DatapathError('failed', `invalid masquerade CIDR ${JSON.stringify(c)}`);
  }
  const v4 = cidrs.filter((c) => cidrFamily(c) === 4);
  const v6 = cidrs.filter((c) => cidrFamily(c) === 6);
  const rules: string[] = [];
  if (v4.length > 0) rules.push(`    ip saddr { ${v4.join(', ')} } ip daddr != { ${v4.join(', ')} } masquerade`);
  if (v6.length > 0) rules.push(`    ip6 saddr { ${v6.join(', ')} } ip6 daddr != { ${v6.join(', ')} } masquerade`);
  const ruleset = [
    `table inet ${NFT_TABLE}`,
    `delete table inet ${NFT_TABLE}`,
    `table inet ${NFT_TABLE} {`,
    '  chain postrouting {',
    '    type nat hook postrouting priority srcnat; policy accept;',
    ...rules,
    '  }',
    '}',
    '',
  ].join('\n');
  await runCommand(['nft', '-f', '-'], { input: ruleset });
}

export async function removeMasquerade(): Promise<void> {
  await runCommand(['nft', '-f', '-'], { input: `table inet ${NFT_TABLE}\ndelete table inet ${NFT_TABLE}\n` });
}
