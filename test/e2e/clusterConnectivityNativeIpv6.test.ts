// The cluster connectivity suite (test/support/clusterConnectivitySuite.ts) with routing mode native and block IPAM, on IPv6 pods.
import { clusterConnectivitySuite } from '../support/clusterConnectivitySuite.js';

clusterConnectivitySuite({ tag: 'cn6f', routingMode: 'native', ipam: 'block', family: 6 });
