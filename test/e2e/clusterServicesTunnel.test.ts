// The services across nodes suite (test/support/clusterServicesSuite.ts) with routing mode tunnel.
import { clusterServicesSuite } from '../support/clusterServicesSuite.js';

clusterServicesSuite({ tag: 'cstun', routingMode: 'tunnel' });
