// The connectivity suite on three nodes with no etcd: every agent in crd mode on
// the fake API server (TendrilNode, TendrilEndpoint, TendrilIdentity objects,
// node Leases), tendril-operator handing out the cluster-pool CIDRs; tunnel mode.
import { clusterConnectivitySuite } from '../support/clusterConnectivitySuite.js';

clusterConnectivitySuite({ tag: 'cktun', routingMode: 'tunnel', ipam: 'cluster-pool', store: 'kubernetes' });
