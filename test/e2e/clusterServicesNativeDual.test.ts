// The services across nodes suite (test/support/clusterServicesSuite.ts) with routing mode native, on dual-stack pods.
import { clusterServicesSuite } from '../support/clusterServicesSuite.js';

clusterServicesSuite({ tag: 'csnatd', routingMode: 'native', family: 'dual' });
