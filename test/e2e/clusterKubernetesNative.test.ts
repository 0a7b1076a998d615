// The connectivity suite on three nodes with no etcd: every agent in crd mode on
// the fake API server (TendrilNode, TendrilEndpoint, TendrilIdentity objects,
// node Leases), tendril-operator handing out the cluster-pool CIDRs; native routing.
import { clusterConnectivitySuite } from '../support/clusterConnectivitySuite.js';

clusterConnectivitySuite({ tag: 'cknat', routingMode: 'native', ipam: 'cluster-pool', store: 'kubernetes' });
