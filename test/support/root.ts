/**
 * Tests that touch namespaces, links or BPF need root. CI is root; elsewhere
 * such a test fails loudly instead of skipping, so a green run means it ran.
 */
export function requireRoot(what: string): void {
  if (process.getuid?.() !== 0) {
    throw new Error(`${what} needs root (network namespaces, links); run the test suite as root`);
  }
}
