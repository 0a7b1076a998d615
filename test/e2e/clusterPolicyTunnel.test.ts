// The cross-node policy suite (test/support/clusterPolicySuite.ts) with routing mode tunnel.
import { clusterPolicySuite } from '../support/clusterPolicySuite.js';

clusterPolicySuite({ tag: 'cptun', routingMode: 'tunnel' });
