// The cross-node policy suite (test/support/clusterPolicySuite.ts) in native routing, on IPv6 pods.
import { clusterPolicySuite } from '../support/clusterPolicySuite.js';

clusterPolicySuite({ tag: 'pn6', routingMode: 'native', family: 6 });
