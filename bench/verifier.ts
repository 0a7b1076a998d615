/**
 * The verifier's processed instructions per program, object and compiler
 * (src/datapath/bpf/verifierBudget.ts): what each program costs the kernel
 * to accept, against the budget verifierBudget.test.ts holds it to. A few
 * seconds: every object loads once per compiler, nothing is attached.
 */
import { formatCounts, measureAll, type ProgramCount } from '../src/datapath/bpf/verifierBudget.js';

export async function runVerifierBench(): Promise<ProgramCount[]> {
  return measureAll();
}

export function printVerifier(counts: readonly ProgramCount[]): void {
  console.log(`\n${formatCounts(counts)}`);
}
