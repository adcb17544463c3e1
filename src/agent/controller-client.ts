import { EgressguardError } from '../core/index.js';
import {
  backoffDelay,
  describeRefusal,
  enrollResponseSchema,
  rotateResponseSchema,
  type BackoffPolicy,
  type BundleQuery,
  type ControllerAnswer,
  type ControllerConnection,
  type EnrollRequest,
  type EnrollResponse,
  type StatusReport,
} from '../fleet/index.js';

/** A controller's answer that is not what was asked for: its status and when to ask again. */
export class ControllerRefusal extends EgressguardError {
  readonly status: number;
  readonly retryAfterMs: number;

  constructor(action: string, answer: ControllerAnswer) {
    super(
      'command-failed',
      `Controller refused to ${action} (HTTP ${answer.status}): ${describeRefusal(answer)}`,
    );
    this.status = answer.status;
    this.retryAfterMs = (answer.retryAfterSeconds ?? 0) * 1000;
  }
}

/**
 * The agent's side of the protocol, one method a route: request types are the protocol's, and
 * every answer but the one asked for is a `ControllerRefusal`.
 */
export class ControllerClient {
  readonly #connection: ControllerConnection;

  constructor(connection: ControllerConnection) {
    this.#connection = connection;
  }

  /** `POST /v1/enroll`: the host's credential for a bootstrap token. */
  async enroll(request: EnrollRequest): Promise<EnrollResponse> {
    const answer = await this.#connection.request('POST', '/v1/enroll', { body: request });
    if (answer.status !== 200) throw new ControllerRefusal('enroll', answer);
    return enrollResponseSchema.parse(answer.body);
  }

  /** `POST /v1/status`. */
  async report(credential: string, report: StatusReport, signal: AbortSignal): Promise<void> {
    const answer = await this.#connection.request('POST', '/v1/status', {
      body: report,
      token: credential,
      signal,
    });
    if (answer.status !== 200) throw new ControllerRefusal('report status', answer);
  }

  /** `POST /v1/credential/rotate`: a new credential, valid from its first use. */
  async rotate(credential: string): Promise<string> {
    const answer = await this.#connection.request('POST', '/v1/credential/rotate', {
      token: credential,
    });
    if (answer.status !== 200) throw new ControllerRefusal('rotate the credential', answer);
    return rotateResponseSchema.parse(answer.body).credential;
  }

  /**
   * `GET /v1/bundle`, the long poll: the answer's body when the controller's view differs from
   * `query` (the caller checks it against the protocol), undefined when the wait ended unchanged.
   */
  async poll(
    credential: string,
    query: BundleQuery,
    options: { readonly signal: AbortSignal; readonly timeoutMs: number; onAnswer?: () => void },
  ): Promise<{ readonly body: unknown } | undefined> {
    const search = new URLSearchParams({
      hash: query.hash,
      retry: String(query.retry),
      force: String(query.force),
      suspended: query.suspended,
      wait: String(query.wait),
    });
    const answer = await this.#connection.request('GET', `/v1/bundle?${search.toString()}`, {
      token: credential,
      signal: options.signal,
      timeoutMs: options.timeoutMs,
    });
    options.onAnswer?.();
    if (answer.status === 200) return { body: answer.body };
    if (answer.status !== 304) throw new ControllerRefusal('poll for a bundle', answer);
    return undefined;
  }

  close(): void {
    this.#connection.close();
  }
}

/** A refusal that may end by itself: the controller busy (429) or failing (5xx). */
export function isRetriable(error: unknown): boolean {
  return error instanceof ControllerRefusal && (error.status === 429 || error.status >= 500);
}

/**
 * How long to wait after failure number `failures`: the controller's `Retry-After` at least, plus
 * the agent's own full-jitter backoff, so a fleet told the same delay does not return at once.
 */
export function retryDelay(
  error: unknown,
  failures: number,
  backoff: BackoffPolicy,
  random: () => number,
): number {
  const floor = error instanceof ControllerRefusal ? error.retryAfterMs : 0;
  return floor + backoffDelay(failures, backoff, random);
}
