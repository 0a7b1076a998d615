// The services across nodes suite (test/support/clusterServicesSuite.ts) with routing mode native, on IPv6 pods.
import { clusterServicesSuite } from '../support/clusterServicesSuite.js';

clusterServicesSuite({ tag: 'csnat6', routingMode: 'native', family: 6 });
