import type { Result100 } from '../cni/types.js';
import type { components, operations } from './generated/openapi.js';

/**
 * The agent API's types, all generated from api/openapi.yaml at build
 * (`make build` runs openapi-typescript into src/api/generated/): the server's
 * handlers, the client and the CLI use these names, so a change to the
 * document shows up as a type error wherever it matters.
 */
export type Schemas = components['schemas'];

/** Every operation of the API, by its operationId. */
export type OperationId = keyof operations;

/** The JSON body an operation answers with a status (never when that status has no JSON body). */
export type ResponseBody<Op extends OperationId, Status extends keyof operations[Op]['responses']> = operations[Op]['responses'][Status] extends {
  content: { 'application/json': infer B };
}
  ? B
  : never;

/** The JSON request body of an operation. */
export type RequestBody<Op extends OperationId> = operations[Op] extends { requestBody: { content: { 'application/json': infer B } } } ? B : never;

/** The query parameters of an operation. */
export type QueryParams<Op extends OperationId> = NonNullable<operations[Op]['parameters']['query']>;

/** The path parameters of an operation. */
export type PathParams<Op extends OperationId> = NonNullable<operations[Op]['parameters']['path']>;

/** The request headers an operation defines. */
export type HeaderParams<Op extends OperationId> = NonNullable<operations[Op]['parameters']['header']>;

export type ErrorResponse = Schemas['ErrorResponse'];
export type Health = Schemas['Health'];
export type K8sStatus = Schemas['K8sStatus'];
export type DatapathStatus = Schemas['DatapathStatus'];
export type AgentConfigView = Schemas['AgentConfig'];
export type ConfigPatch = Schemas['ConfigPatch'];
export type IpamAllocation = Schemas['IpamAllocation'];
export type IpamResponse = Schemas['IpamResponse'];
export type IpamList = Schemas['IpamList'];
export type IpamRelease = Schemas['IpamRelease'];
export type ApiEndpoint = Schemas['Endpoint'];
export type ApiEndpointAddress = Schemas['EndpointAddress'];
export type EndpointDeletion = Schemas['EndpointDeletion'];
export type EndpointAdoptionBody = Schemas['EndpointAdoption'];
/** PUT /endpoint/{id}: a pod set up by someone else, to be made an endpoint (the body, and the ID when the path gave a number). */
export type EndpointAdoption = EndpointAdoptionBody & { id?: number };
export type LabelsPatch = Schemas['LabelsPatch'];
export type ApiIdentity = Schemas['Identity'];
export type ApiIpcacheEntry = Schemas['IpcacheEntry'];
export type RuleOriginBody = Schemas['RuleOrigin'];
export type PolicyList = Schemas['PolicyList'];
export type PolicyImport = Schemas['PolicyImport'];
export type PolicyPromote = Schemas['PolicyPromote'];
export type PolicyImportResult = Schemas['PolicyImportResult'];
export type PolicyDeleteResult = Schemas['PolicyDeleteResult'];
export type PolicySelector = Schemas['PolicySelector'];
export type PolicyTrace = Schemas['PolicyTrace'];
export type PolicyTraceResult = Schemas['PolicyTraceResult'];
export type DirectionDecisionBody = Schemas['DirectionDecision'];
export type PolicyMapEntryBody = Schemas['PolicyMapEntry'];
export type EndpointPolicyBody = Schemas['EndpointPolicy'];
export type CniRequest = Schemas['CniRequest'];
export type CniVerb = CniRequest['command'];

/**
 * What the agent's CNI service answers a relayed call with. Not on the wire:
 * POST /cni answers the bytes tendril-cni prints (the ADD result converted to
 * the config's cniVersion), which the route derives from this.
 */
export interface CniResponse {
  result?: Result100;
}

/** The CNI versions tendril-cni and the agent speak (results before 0.3.0 cannot carry interfaces). */
export const SUPPORTED_CNI_VERSIONS = ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'];

/** Runtime files (socket, endpoint state, deletion queue): gone with a reboot, as the pods are. */
export const DEFAULT_STATE_DIR = '/var/run/tendril';
/** Durable data (the embedded kvstore): must survive reboots, so never on tmpfs. */
export const DEFAULT_LIB_DIR = '/var/lib/tendril';
export const DEFAULT_SOCKET = `${DEFAULT_STATE_DIR}/tendril.sock`;
export const SOCKET_ENV = 'TENDRIL_SOCK';
/** POST /cni's response header: the exit code tendril-cni exits with after printing the body. */
export const CNI_EXIT_CODE_HEADER = 'tendril-cni-exit-code';
/** Set to 1, the agent checks every response against api/openapi.yaml (every e2e test sets it). */
export const VALIDATE_RESPONSES_ENV = 'TENDRIL_VALIDATE_RESPONSES';
