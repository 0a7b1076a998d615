// The Kubernetes NetworkPolicy test (test/support/k8sNetworkPolicySuite.ts) on IPv6 pods.
import { k8sNetworkPolicySuite } from '../support/k8sNetworkPolicySuite.js';

k8sNetworkPolicySuite(6, 'k8n6');
