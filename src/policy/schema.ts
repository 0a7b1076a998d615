/**
 * zod schemas of the accepted documents, in their wire form: Kubernetes
 * networking.k8s.io/v1 NetworkPolicy and the tendril policy (the shape of
 * CiliumNetworkPolicy). Objects are strict so a misspelt field is an error at
 * that field instead of a silently ignored rule. Semantic checks that need
 * parsing (CIDRs, selectors, ports) happen in ruleParser.ts with the same paths.
 */
import { z } from 'zod';
import { ENTITIES } from './selector.js';

export const labelSelectorSchema = z.strictObject({
  matchLabels: z.record(z.string(), z.string()).optional(),
  matchExpressions: z
    .array(
      z.strictObject({
        key: z.string().min(1),
        operator: z.enum(['In', 'NotIn', 'Exists', 'DoesNotExist']),
        values: z.array(z.string()).optional(),
      }),
    )
    .optional(),
});
export type LabelSelectorWire = z.infer<typeof labelSelectorSchema>;

const intOrString = z.union([z.number().int(), z.string().min(1)]);

export const metadataSchema = z.looseObject({
  name: z.string().min(1).max(253),
  namespace: z.string().min(1).max(63).optional(),
  labels: z.record(z.string(), z.string()).optional(),
  annotations: z.record(z.string(), z.string()).optional(),
});

// ---- Kubernetes NetworkPolicy ----------------------------------------------

export const k8sIpBlockSchema = z.strictObject({
  cidr: z.string().min(1),
  except: z.array(z.string().min(1)).optional(),
});

export const k8sPeerSchema = z.strictObject({
  podSelector: labelSelectorSchema.optional(),
  namespaceSelector: labelSelectorSchema.optional(),
  ipBlock: k8sIpBlockSchema.optional(),
});

export const k8sPortSchema = z.strictObject({
  protocol: z.enum(['TCP', 'UDP', 'SCTP']).optional(),
  port: intOrString.optional(),
  endPort: z.number().int().optional(),
});

export const k8sNetworkPolicySchema = z.looseObject({
  apiVersion: z.literal('networking.k8s.io/v1'),
  kind: z.literal('NetworkPolicy'),
  metadata: metadataSchema,
  spec: z.strictObject({
    podSelector: labelSelectorSchema,
    policyTypes: z.array(z.enum(['Ingress', 'Egress'])).optional(),
    ingress: z.array(z.strictObject({ from: z.array(k8sPeerSchema).optional(), ports: z.array(k8sPortSchema).optional() })).optional(),
    egress: z.array(z.strictObject({ to: z.array(k8sPeerSchema).optional(), ports: z.array(k8sPortSchema).optional() })).optional(),
  }),
});
export type K8sNetworkPolicyWire = z.infer<typeof k8sNetworkPolicySchema>;
export type K8sPeerWire = z.infer<typeof k8sPeerSchema>;
export type K8sPortWire = z.infer<typeof k8sPortSchema>;

// ---- tendril policy (CiliumNetworkPolicy shape) ----------------------------

export const cidrSetSchema = z.strictObject({
  cidr: z.string().min(1),
  except: z.array(z.string().min(1)).optional(),
});

export const portProtocolSchema = z.strictObject({
  port: intOrString.optional(),
  endPort: z.number().int().optional(),
  protocol: z.enum(['TCP', 'UDP', 'SCTP', 'ANY']).optional(),
});

export const portRuleSchema = z.strictObject({
  ports: z.array(portProtocolSchema).min(1),
});

const entitySchema = z.enum(ENTITIES);

export const ingressRuleSchema = z.strictObject({
  fromEndpoints: z.array(labelSelectorSchema).optional(),
  fromEntities: z.array(entitySchema).optional(),
  fromCIDR: z.array(z.string().min(1)).optional(),
  fromCIDRSet: z.array(cidrSetSchema).optional(),
  toPorts: z.array(portRuleSchema).optional(),
});

export const egressRuleSchema = z.strictObject({
  toEndpoints: z.array(labelSelectorSchema).optional(),
  toEntities: z.array(entitySchema).optional(),
  toCIDR: z.array(z.string().min(1)).optional(),
  toCIDRSet: z.array(cidrSetSchema).optional(),
  toPorts: z.array(portRuleSchema).optional(),
});

export const tendrilRuleSchema = z.strictObject({
  description: z.string().optional(),
  endpointSelector: labelSelectorSchema,
  ingress: z.array(ingressRuleSchema).optional(),
  ingressDeny: z.array(ingressRuleSchema).optional(),
  egress: z.array(egressRuleSchema).optional(),
  egressDeny: z.array(egressRuleSchema).optional(),
  enableDefaultDeny: z.strictObject({ ingress: z.boolean().optional(), egress: z.boolean().optional() }).optional(),
});
export type TendrilRuleWire = z.infer<typeof tendrilRuleSchema>;
export type IngressRuleWire = z.infer<typeof ingressRuleSchema>;
export type EgressRuleWire = z.infer<typeof egressRuleSchema>;
export type PortProtocolWire = z.infer<typeof portProtocolSchema>;

export const TENDRIL_API_VERSIONS = ['tendril.io/v1', 'cilium.io/v2'] as const;
export const TENDRIL_KINDS = [
  'TendrilNetworkPolicy',
  'TendrilClusterwideNetworkPolicy',
  'CiliumNetworkPolicy',
  'CiliumClusterwideNetworkPolicy',
] as const;

export const tendrilPolicySchema = z
  .looseObject({
    apiVersion: z.enum(TENDRIL_API_VERSIONS),
    kind: z.enum(TENDRIL_KINDS),
    metadata: metadataSchema,
    spec: tendrilRuleSchema.optional(),
    specs: z.array(tendrilRuleSchema).optional(),
  })
  .superRefine((doc, ctx) => {
    if (doc.spec === undefined && (doc.specs === undefined || doc.specs.length === 0)) {
      ctx.addIssue({ code: 'custom', message: 'a policy needs `spec` or a non-empty `specs`', path: ['spec'] });
    }
  });
export type TendrilPolicyWire = z.infer<typeof tendrilPolicySchema>;
