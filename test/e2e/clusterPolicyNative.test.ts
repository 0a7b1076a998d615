// The cross-node policy suite (test/support/clusterPolicySuite.ts) with routing mode native.
import { clusterPolicySuite } from '../support/clusterPolicySuite.js';

clusterPolicySuite({ tag: 'cpnat', routingMode: 'native' });
