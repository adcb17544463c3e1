/** Why the controller refuses a request; the server maps it to an HTTP status and a JSON body. */
export type RefusalCode =
  | 'invalid-request'
  | 'unauthenticated'
  | 'forbidden'
  | 'not-found'
  | 'conflict'
  | 'gone'
  | 'payload-too-large'
  | 'policy-invalid'
  | 'rate-limited';

const STATUS: Record<RefusalCode, number> = {
  'invalid-request': 400,
  unauthenticated: 401,
  forbidden: 403,
  'not-found': 404,
  conflict: 409,
  gone: 410,
  'payload-too-large': 413,
  'policy-invalid': 422,
  'rate-limited': 429,
};

/** A request the controller refuses; nothing was changed. */
export class RefusedError extends Error {
  readonly code: RefusalCode;
  readonly status: number;
  readonly issues: readonly unknown[] | undefined;
  /** Seconds the caller should wait before it asks again (a `Retry-After` header). */
  readonly retryAfterSeconds: number | undefined;

  constructor(
    code: RefusalCode,
    message: string,
    details: { readonly issues?: readonly unknown[]; readonly retryAfterSeconds?: number } = {},
  ) {
    super(message);
    this.name = 'RefusedError';
    this.code = code;
    this.status = STATUS[code];
    this.issues = details.issues;
    this.retryAfterSeconds = details.retryAfterSeconds;
  }
}
