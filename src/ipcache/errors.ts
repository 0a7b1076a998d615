import { CodedError } from '../errors/codedError.js';

/** ipcache error codes with stable names; every one is a caller's input error (HTTP 400). */
export const IpcacheErrorCode = {
  INVALID_PREFIX: 'IPCACHE_INVALID_PREFIX',
  INVALID_IDENTITY: 'IPCACHE_INVALID_IDENTITY',
  INVALID_HOST_IP: 'IPCACHE_INVALID_HOST_IP',
  INVALID_METADATA: 'IPCACHE_INVALID_METADATA',
} as const;

export type IpcacheErrorCode = (typeof IpcacheErrorCode)[keyof typeof IpcacheErrorCode];

export class IpcacheError extends CodedError<IpcacheErrorCode> {}
