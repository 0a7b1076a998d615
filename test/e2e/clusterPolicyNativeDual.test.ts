// The cross-node policy suite (test/support/clusterPolicySuite.ts) in native routing, on dual-stack pods.
import { clusterPolicySuite } from '../support/clusterPolicySuite.js';

clusterPolicySuite({ tag: 'pnd', routingMode: 'native', family: 'dual' });
