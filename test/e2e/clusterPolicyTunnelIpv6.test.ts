// The cross-node policy suite (test/support/clusterPolicySuite.ts) in tunnel routing, on IPv6 pods.
import { clusterPolicySuite } from '../support/clusterPolicySuite.js';

clusterPolicySuite({ tag: 'pt6', routingMode: 'tunnel', family: 6 });
