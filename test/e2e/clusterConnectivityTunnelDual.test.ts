// The cluster connectivity suite (test/support/clusterConnectivitySuite.ts) with routing mode tunnel and block IPAM, on dual-stack pods.
import { clusterConnectivitySuite } from '../support/clusterConnectivitySuite.js';

clusterConnectivitySuite({ tag: 'ctund', routingMode: 'tunnel', ipam: 'block', family: 'dual' });
