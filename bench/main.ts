// `make bench`: every benchmark, each measured side by side against its
// reference in the same run, printed as tables with ratios. Pass names to run
// a subset: node dist/bench/main.js exec cni pods pods-dual-stack throughput flows-cost flows-memory ipam identity policy policy-scale policy-latency service-scale service-throughput service-program service-delete masquerade ct-gc cluster-throughput cluster-latency cluster-propagation k8s-policy k8s-sync k8s-propagation k8s-scale verifier ui kvstore relay
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { printCniExec, runCniExecBench } from './cniExec.js';
import { printCniLatency, runCniLatencyBench } from './cniLatency.js';
import { printCniPods, runCniPodsBench } from './cniPods.js';
import { printCniDualStack, runCniDualStackBench } from './cniDualStack.js';
import { printCtGc, runCtGcBench } from './ctGc.js';
import { printClusterLatency, runClusterLatencyBench } from './clusterLatency.js';
import { printClusterPropagation, runClusterPropagationBench } from './clusterPropagation.js';
import { printClusterThroughput, runClusterThroughputBench } from './clusterThroughput.js';
import { printFlowsCost, printFlowsMemory, runFlowsCostBench, runFlowsMemoryBench } from './flows.js';
import { printIdentityBench, runIdentityBench } from './identity.js';
import { printIpamBench, runIpamBench } from './ipam.js';
import { printK8sPolicy, runK8sPolicyBench } from './k8sPolicy.js';
import { printK8sPropagation, runK8sPropagationBench } from './k8sPropagation.js';
import { printK8sScale, runK8sScaleBench } from './k8sScale.js';
import { printAgentMemory, runAgentMemoryBench } from './agentMemory.js';
import { printK8sSync, runK8sSyncBench } from './k8sSync.js';
import { printMasquerade, runMasqueradeBench } from './masquerade.js';
import { printPolicyBench, runPolicyBench } from './policy.js';
import { printPolicyLatency, runPolicyLatencyBench } from './policyLatency.js';
import { printPolicyScale, runPolicyScaleBench } from './policyScale.js';
import { printServiceDelete, runServiceDeleteBench } from './serviceDelete.js';
import { printServiceProgram, runServiceProgramBench } from './serviceProgram.js';
import { printServiceScale, runServiceScaleBench } from './serviceScale.js';
import { printServiceThroughput, runServiceThroughputBench } from './serviceThroughput.js';
import { printThroughput, runThroughputBench } from './throughput.js';
import { printUiBench, runUiBench } from './ui.js';
import { printVerifier, runVerifierBench } from './verifier.js';
import { printRelay, runRelayBench } from './relay.js';

if (process.getuid?.() !== 0) {
  console.error('bench: needs root (network namespaces)');
  process.exit(1);
}

const benches: Record<string, () => Promise<void>> = {
  exec: async () => printCniExec(await runCniExecBench({ pods: 30, versionRuns: 100, concurrent: 50, podmanRuns: 8 })),
  cni: async () => printCniLatency(await runCniLatencyBench(20)),
  pods: async () => printCniPods(await runCniPodsBench(50)),
  'pods-dual-stack': async () => printCniDualStack(await runCniDualStackBench(50)),
  'ct-gc': async () => printCtGc(await runCtGcBench()),
  throughput: async () => printThroughput(await runThroughputBench(3, 3)),
  'flows-cost': async () => printFlowsCost(await runFlowsCostBench(5, 6)),
  'flows-memory': async () => printFlowsMemory(await runFlowsMemoryBench(100_000)),
  ipam: async () => printIpamBench(await runIpamBench(300)),
  identity: async () => printIdentityBench(await runIdentityBench(300)),
  policy: async () => printPolicyBench(runPolicyBench()),
  'policy-scale': async () => printPolicyScale(await runPolicyScaleBench()),
  'policy-latency': async () => printPolicyLatency(await runPolicyLatencyBench()),
  'service-scale': async () => printServiceScale(await runServiceScaleBench()),
  'service-throughput': async () => printServiceThroughput(await runServiceThroughputBench()),
  'service-program': async () => printServiceProgram(await runServiceProgramBench()),
  'service-delete': async () => printServiceDelete(await runServiceDeleteBench()),
  'agent-memory': async () => printAgentMemory(await runAgentMemoryBench()),
  masquerade: async () => printMasquerade(await runMasqueradeBench()),
  'cluster-throughput': async () => printClusterThroughput(await runClusterThroughputBench()),
  'cluster-latency': async () => printClusterLatency(await runClusterLatencyBench()),
  'cluster-propagation': async () => printClusterPropagation(await runClusterPropagationBench()),
  'k8s-policy': async () => printK8sPolicy(await runK8sPolicyBench()),
  'k8s-sync': async () => printK8sSync(await runK8sSyncBench()),
  'k8s-propagation': async () => printK8sPropagation(await runK8sPropagationBench()),
  'k8s-scale': async () => printK8sScale(await runK8sScaleBench()),
  verifier: async () => printVerifier(await runVerifierBench()),
  ui: async () => printUiBench(await runUiBench()),
  relay: async () => printRelay(await runRelayBench()),
  kvstore: async () => {
    // Runs as its own process: the script measures with top-level state of its own.
    const r = spawnSync(process.execPath, [fileURLToPath(new URL('./kvstore.js', import.meta.url)), '1', '3'], { stdio: 'inherit' });
    if (r.status !== 0) throw new Error(`kvstore bench exited ${r.status}`);
  },
};

const wanted = process.argv.slice(2);
for (const name of wanted) if (!benches[name]) throw new Error(`unknown bench "${name}"; known: ${Object.keys(benches).join(', ')}`);
for (const [name, run] of Object.entries(benches)) {
  if (wanted.length > 0 && !wanted.includes(name)) continue;
  await run();
}
