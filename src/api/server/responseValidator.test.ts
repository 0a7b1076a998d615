// The response validator on its own: responses as a server would send them,
// checked against api/openapi.yaml.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { ApiEndpoint, ErrorResponse, Health } from '../types.js';
import { OpenApiSchemas } from './openapiSchemas.js';
import { ResponseValidator, type SentResponse } from './responseValidator.js';

const validator = new ResponseValidator(new OpenApiSchemas());
const JSON_TYPE = { 'content-type': 'application/json; charset=utf-8' };
const json = (status: number, body: unknown, headers: Record<string, unknown> = {}): SentResponse => ({ status, headers: { ...JSON_TYPE, ...headers }, body: JSON.stringify(body) });

const HEALTH: Health = {
  status: 'ok',
  nodeName: 'n1',
  uptimeSeconds: 3,
  kvstore: { backend: 'embedded', connected: true, revision: 7 },
  endpoints: 0,
  ipam: { mode: 'host-scope', allocated: 1 },
};
const ENDPOINT: ApiEndpoint = {
  id: 12,
  containerId: 'c1',
  ifName: 'eth0',
  netns: '/var/run/netns/p',
  labels: ['k8s:app=web'],
  addresses: [{ family: 4, ip: '10.0.0.5', gateway: '10.0.0.1', pool: 'default', cidr: '10.0.0.0/24', seq: 1 }],
  hostIfName: 'lxc1',
  hostIfIndex: 5,
  hostMac: '0a:00:00:00:00:01',
  podMac: '0a:00:00:00:00:02',
  mtu: 1500,
  state: 'ready',
  ipamOwned: true,
  createdAt: '2025-01-01T00:00:00.000Z',
  policyRevision: 1,
  desiredPolicyRevision: 1,
};
const NOT_FOUND: ErrorResponse = { code: 'NOT_FOUND', message: 'endpoint 4 not found', cniCode: 3 };

describe('a response that matches', () => {
  test('a 200 body that is what the schema says', () => {
    assert.equal(validator.check('getHealthz', json(200, HEALTH)), undefined);
    assert.equal(validator.check('getEndpoint', json(200, ENDPOINT)), undefined);
    assert.equal(validator.check('listEndpoints', json(200, [ENDPOINT, { ...ENDPOINT, id: 13, creationTimings: { ipam: 1.5, links: 2 } }])), undefined);
  });

  test('an error the operation declares, as an ErrorResponse', () => {
    assert.equal(validator.check('getEndpoint', json(404, NOT_FOUND)), undefined);
    assert.equal(validator.check('getEndpoint', json(500, { code: 'INTERNAL', message: 'x', cniCode: 999, details: 'y' })), undefined);
  });

  test('POST /cni: an empty body where the document allows one, and the exit code header', () => {
    assert.equal(validator.check('postCni', { status: 200, headers: { 'tendril-cni-exit-code': '0' }, body: '' }), undefined);
    assert.equal(validator.check('postCni', json(200, { code: 7, msg: 'bad' }, { 'tendril-cni-exit-code': '1' })), undefined);
  });
});

describe('a response that does not match', () => {
  test('a required field missing, named', () => {
    const { nodeName: _, ...withoutName } = HEALTH;
    assert.equal(validator.check('getHealthz', json(200, withoutName)), "body (root) must have required property 'nodeName'");
  });

  test('a value outside its enum, with the path and the values allowed', () => {
    assert.match(validator.check('getEndpoint', json(200, { ...ENDPOINT, state: 'sleeping' }))!, /^body \/state must be equal to one of the allowed values \(\["waiting-for-identity",/);
  });

  test('a field the document does not name', () => {
    assert.equal(validator.check('getEndpoint', json(200, { ...ENDPOINT, secret: 1 })), 'body (root) must NOT have additional properties "secret"');
  });

  test('a wrong type deep inside', () => {
    const bad = { ...ENDPOINT, addresses: [{ ...ENDPOINT.addresses[0]!, seq: '1' }] };
    assert.equal(validator.check('getEndpoint', json(200, bad)), 'body /addresses/0/seq must be integer');
  });

  test('a status the operation does not declare', () => {
    assert.equal(validator.check('getHealthz', json(404, NOT_FOUND)), 'status 404 is not declared (declared: 200, 401, 500, 503)');
  });

  test('an error body that is not an ErrorResponse', () => {
    assert.match(validator.check('getEndpoint', json(404, { error: 'Not Found', statusCode: 404 }))!, /must have required property 'code'/);
    assert.match(validator.check('getEndpoint', json(404, { ...NOT_FOUND, code: 'GONE' }))!, /\/code must be equal to one of the allowed values/);
  });

  test('a body where the document declares content of another type, or none at all', () => {
    assert.equal(validator.check('getHealthz', { status: 200, headers: { 'content-type': 'text/plain' }, body: 'ok' }), 'content type text/plain is not declared (declared: application/json)');
    assert.equal(validator.check('getHealthz', { status: 200, headers: {}, body: '' }), 'the body is empty; the document declares application/json');
    assert.match(validator.check('getHealthz', { status: 200, headers: JSON_TYPE, body: '{"status":' })!, /^the body is not JSON/);
  });

  test('POST /cni: the exit code header missing or out of range', () => {
    assert.equal(validator.check('postCni', { status: 200, headers: {}, body: '' }), 'required header Tendril-Cni-Exit-Code is missing');
    assert.match(validator.check('postCni', { status: 200, headers: { 'tendril-cni-exit-code': '2' }, body: '' })!, /^header Tendril-Cni-Exit-Code: "2" \(root\) must be equal to one of the allowed values/);
  });

  test('a stream body cannot be checked and says so', () => {
    assert.match(validator.check('getHealthz', { status: 200, headers: JSON_TYPE, body: { pipe() {} } })!, /cannot be checked/);
  });
});
