// coordination.k8s.io/v1 Leases as kube-apiserver admits them. acquireTime and
// renewTime are MicroTime: the server decodes them with the fixed layout
// 2006-01-02T15:04:05.000000Z07:00, so a timestamp with other than six
// fractional digits (JavaScript's Date#toISOString gives three) is refused
// with 400 before validation, and a valid one is stored in UTC. Validation
// then wants leaseDurationSeconds > 0 and leaseTransitions >= 0 (422).

type Obj = Record<string, unknown>;

const MICRO_TIME = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\.(\d{6})(Z|[+-]\d{2}:\d{2})$/;

/** A body the server cannot decode into a Lease (answered 400 BadRequest), or a field error list (422). */
export type LeaseVerdict = { decode: string } | { invalid: string[] } | undefined;

function microTimeUtc(value: string): string | undefined {
  const m = MICRO_TIME.exec(value);
  if (m === null) return undefined;
  const [, base, micros, zone] = m as unknown as [string, string, string, string];
  if (zone === 'Z') return value;
  const ms = Date.parse(`${base}${zone}`);
  if (Number.isNaN(ms)) return undefined;
  return `${new Date(ms).toISOString().slice(0, 19)}.${micros}Z`;
}

function isInt32(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= -(2 ** 31) && v < 2 ** 31;
}

/** Checks a Lease and normalizes its MicroTime fields in place. */
export function admitLease(lease: Obj): LeaseVerdict {
  const spec = lease.spec;
  if (spec === undefined || spec === null) return undefined;
  if (typeof spec !== 'object' || Array.isArray(spec)) return { decode: 'v1.Lease.Spec: readObjectStart: expect { or n' };
  const s = spec as Obj;
  for (const f of ['acquireTime', 'renewTime']) {
    const v = s[f];
    if (v === undefined || v === null) continue;
    const utc = typeof v === 'string' ? microTimeUtc(v) : undefined;
    if (utc === undefined) {
      return { decode: `v1.LeaseSpec.${f}: unmarshalerDecoder: parsing time ${JSON.stringify(String(v))} as "2006-01-02T15:04:05.000000Z07:00"` };
    }
    s[f] = utc;
  }
  for (const f of ['leaseDurationSeconds', 'leaseTransitions']) {
    if (s[f] !== undefined && s[f] !== null && !isInt32(s[f])) return { decode: `v1.LeaseSpec.${f}: readInt32: unexpected value ${JSON.stringify(s[f])}` };
  }
  for (const f of ['holderIdentity', 'strategy', 'preferredHolder']) {
    if (s[f] !== undefined && s[f] !== null && typeof s[f] !== 'string') return { decode: `v1.LeaseSpec.${f}: ReadString: expects " or n` };
  }
  const invalid: string[] = [];
  if (isInt32(s.leaseDurationSeconds) && s.leaseDurationSeconds <= 0) {
    invalid.push(`spec.leaseDurationSeconds: Invalid value: ${s.leaseDurationSeconds}: must be greater than 0`);
  }
  if (isInt32(s.leaseTransitions) && s.leaseTransitions < 0) {
    invalid.push(`spec.leaseTransitions: Invalid value: ${s.leaseTransitions}: must be greater than or equal to 0`);
  }
  if (typeof s.preferredHolder === 'string' && s.preferredHolder !== '' && (s.strategy === undefined || s.strategy === '')) {
    invalid.push('spec.preferredHolder: Forbidden: preferredHolder is only allowed if strategy is set');
  }
  return invalid.length > 0 ? { invalid } : undefined;
}
