// `make bench`: every benchmark, each measured side by side against its
// reference in the same run, printed as tables with ratios.
import { printCniLatency, runCniLatencyBench } from './cniLatency.js';

if (process.getuid?.() !== 0) {
  console.error('bench: needs root (network namespaces)');
  process.exit(1);
}
printCniLatency(await runCniLatencyBench(20));
