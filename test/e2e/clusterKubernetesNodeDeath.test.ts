// A node killed in a cluster with no etcd (crd mode, tunnel): its node Lease runs
// out, and with it its TendrilNode's routes, its TendrilEndpoints' ipcache entries
// and its tunnel endpoint go from the other nodes; started again, it rejoins.
// IPAM kubernetes: each node's pod CIDR from its Node object, as on a kubeadm cluster.
import { clusterNodeDeathSuite } from '../support/clusterNodeDeathSuite.js';

clusterNodeDeathSuite({ tag: 'ckdead', routingMode: 'tunnel', store: 'kubernetes', ipam: 'kubernetes' });
