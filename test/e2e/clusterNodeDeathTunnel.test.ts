// The node death suite (test/support/clusterNodeDeathSuite.ts) with routing mode tunnel.
import { clusterNodeDeathSuite } from '../support/clusterNodeDeathSuite.js';

clusterNodeDeathSuite({ tag: 'cdtun', routingMode: 'tunnel' });
