// The cluster connectivity suite (test/support/clusterConnectivitySuite.ts) with routing mode tunnel and cluster-pool IPAM.
import { clusterConnectivitySuite } from '../support/clusterConnectivitySuite.js';

clusterConnectivitySuite({ tag: 'cpool', routingMode: 'tunnel', ipam: 'cluster-pool' });
