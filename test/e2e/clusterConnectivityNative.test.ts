// The cluster connectivity suite (test/support/clusterConnectivitySuite.ts) with routing mode native and block IPAM.
import { clusterConnectivitySuite } from '../support/clusterConnectivitySuite.js';

clusterConnectivitySuite({ tag: 'cnat', routingMode: 'native', ipam: 'block' });
