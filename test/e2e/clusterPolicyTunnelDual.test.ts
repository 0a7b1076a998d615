// The cross-node policy suite (test/support/clusterPolicySuite.ts) in tunnel routing, on dual-stack pods.
import { clusterPolicySuite } from '../support/clusterPolicySuite.js';

clusterPolicySuite({ tag: 'ptd', routingMode: 'tunnel', family: 'dual' });
