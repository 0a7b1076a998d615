// The node death suite (test/support/clusterNodeDeathSuite.ts) with routing mode native.
import { clusterNodeDeathSuite } from '../support/clusterNodeDeathSuite.js';

clusterNodeDeathSuite({ tag: 'cdnat', routingMode: 'native' });
