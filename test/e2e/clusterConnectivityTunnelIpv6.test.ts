// The cluster connectivity suite (test/support/clusterConnectivitySuite.ts) with routing mode tunnel and block IPAM, on IPv6 pods.
import { clusterConnectivitySuite } from '../support/clusterConnectivitySuite.js';

clusterConnectivitySuite({ tag: 'ctun6f', routingMode: 'tunnel', ipam: 'block', family: 6 });
