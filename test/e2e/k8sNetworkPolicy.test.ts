// The Kubernetes NetworkPolicy test (test/support/k8sNetworkPolicySuite.ts) on IPv4 pods.
import { k8sNetworkPolicySuite } from '../support/k8sNetworkPolicySuite.js';

k8sNetworkPolicySuite(4, 'k8n');
