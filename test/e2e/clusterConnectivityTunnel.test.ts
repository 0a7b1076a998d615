// The cluster connectivity suite (test/support/clusterConnectivitySuite.ts) with routing mode tunnel and block IPAM.
import { clusterConnectivitySuite } from '../support/clusterConnectivitySuite.js';

clusterConnectivitySuite({ tag: 'ctun', routingMode: 'tunnel', ipam: 'block' });
