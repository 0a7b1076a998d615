// The cluster connectivity suite (test/support/clusterConnectivitySuite.ts) with routing mode native and block IPAM, on dual-stack pods.
import { clusterConnectivitySuite } from '../support/clusterConnectivitySuite.js';

clusterConnectivitySuite({ tag: 'cnd', routingMode: 'native', ipam: 'block', family: 'dual' });
