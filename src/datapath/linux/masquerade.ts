import { type IpPrefix, formatPrefix, tryParsePrefix } from '../../netip/index.js';
import { DatapathError, runCommand } from './command.js';

/** The nftables table tendril owns; nothing else in the ruleset is touched. */
export const NFT_TABLE = 'tendril';

/**
 * Replaces tendril's nftables table atomically: pod traffic leaving the pod
 * CIDRs is masqueraded. The "add; delete; define" sequence in one `nft -f`
 * transaction swaps the table without a window where the rules are missing.
 */
export async function applyMasquerade(cidrs: readonly string[]): Promise<void> {
  const prefixes: IpPrefix[] = cidrs.map((c) => {
    // Host bits are cleared ("10.0.0.5/24" means its subnet); only netip's canonical text reaches nft.
    const p = tryParsePrefix(c, { hostBits: 'mask', leadingZeros: true });
    if (p === undefined) throw new DatapathError('failed', `invalid masquerade CIDR ${JSON.stringify(c)}`);
    return p;
  });
  const v4 = prefixes.filter((p) => p.family === 4).map(formatPrefix);
  const v6 = prefixes.filter((p) => p.family === 6).map(formatPrefix);
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
