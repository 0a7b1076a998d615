// The connectivity suite on three nodes with no etcd (crd mode): native routing
// with dual-stack pods over a dual-stack underlay — tendril-operator hands each
// node a CIDR of each family, each pod's TendrilEndpoint carries both addresses.
// (clusterKubernetesTunnel.test.ts: the overlay, IPv4.)
import { clusterConnectivitySuite } from '../support/clusterConnectivitySuite.js';

clusterConnectivitySuite({ tag: 'cknat', routingMode: 'native', ipam: 'cluster-pool', family: 'dual', store: 'kubernetes' });
