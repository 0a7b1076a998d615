// The services across nodes suite (test/support/clusterServicesSuite.ts) with routing mode tunnel, on IPv6 pods.
import { clusterServicesSuite } from '../support/clusterServicesSuite.js';

clusterServicesSuite({ tag: 'cstun6', routingMode: 'tunnel', family: 6 });
