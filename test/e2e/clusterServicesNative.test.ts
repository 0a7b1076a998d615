// The services across nodes suite (test/support/clusterServicesSuite.ts) with routing mode native.
import { clusterServicesSuite } from '../support/clusterServicesSuite.js';

clusterServicesSuite({ tag: 'csnat', routingMode: 'native' });
