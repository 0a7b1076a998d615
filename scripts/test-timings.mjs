// A node:test reporter that prints, at the end of a run, each test file's time (the sum of its
// top-level tests), the slowest first: where CI's time goes.
export default async function* testTimings(source) {
  const perFile = new Map();
  for await (const event of source) {
    if ((event.type === 'test:pass' || event.type === 'test:fail') && event.data.nesting === 0 && event.data.file) {
      const ms = event.data.details?.duration_ms ?? 0;
      perFile.set(event.data.file, (perFile.get(event.data.file) ?? 0) + ms);
    }
  }
  const rows = [...perFile].sort((a, b) => b[1] - a[1]);
  const total = rows.reduce((s, [, ms]) => s + ms, 0);
  yield `test time by file (sum of top-level tests; ${(total / 1000).toFixed(0)} s in all)\n`;
  for (const [file, ms] of rows.slice(0, 40)) yield `${(ms / 1000).toFixed(1).padStart(8)} s  ${file.replace(process.cwd() + '/', '')}\n`;
}
