/** The value the crash-test writer stores at k/<i>: recognisable, and now and then large enough to span pages. */
export function writerValue(i: number): string {
  return `value-${i}-${'x'.repeat(i % 7 === 0 ? 5000 : 50)}`;
}
