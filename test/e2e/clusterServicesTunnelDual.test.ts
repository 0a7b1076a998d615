// The services across nodes suite (test/support/clusterServicesSuite.ts) with routing mode tunnel, on dual-stack pods.
import { clusterServicesSuite } from '../support/clusterServicesSuite.js';

clusterServicesSuite({ tag: 'cstund', routingMode: 'tunnel', family: 'dual' });
