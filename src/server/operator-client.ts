import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { EgressguardError } from '../core/index.js';
import {
  connectController,
  describeRefusal,
  type AuditResponse,
  type ControllerConnection,
  type EventsResponse,
  type HostResponse,
  type HostsResponse,
  type HostVerb,
  type PushRequest,
  type PushResponse,
  type RevokeCredentialsResponse,
  type RollbackRequest,
  type RollbackResponse,
  type RolloutResponse,
  type RolloutsResponse,
  type TokenRequest,
  type TokenResponse,
} from '../fleet/index.js';
import { loadOperatorToken } from './operator-token.js';

/** Where an operator's commands find the controller, its CA and the operator token. */
export interface OperatorTarget {
  readonly server: string;
  readonly stateDir: string;
  readonly caFile?: string | undefined;
  readonly operatorTokenFile?: string | undefined;
}

/** A refused operator call: the controller's status and message. */
export class OperatorCallError extends EgressguardError {
  readonly status: number;
  readonly issues: readonly unknown[];

  constructor(status: number, message: string, issues: readonly unknown[]) {
    super(status === 422 ? 'policy-invalid' : 'command-failed', message);
    this.status = status;
    this.issues = issues;
  }
}

/** The controller's operator API, one method a route; request and response types are the protocol's. */
export interface OperatorClient {
  /** `GET /v1/hosts`. */
  listHosts(): Promise<HostsResponse>;
  /** `GET /v1/hosts/:name`. */
  host(name: string): Promise<HostResponse>;
  /** `GET /v1/hosts/:name/events?limit=`. */
  hostEvents(name: string, limit: number): Promise<EventsResponse>;
  /** `POST /v1/hosts/:name/<verb>`. */
  steerHost(verb: HostVerb, name: string): Promise<HostResponse>;
  /** `POST /v1/hosts/:name/credentials/revoke`. */
  revokeCredentials(name: string): Promise<RevokeCredentialsResponse>;
  /** `POST /v1/tokens`. */
  createToken(request: TokenRequest): Promise<TokenResponse>;
  /** `POST /v1/pushes`. */
  push(request: PushRequest): Promise<PushResponse>;
  /** `POST /v1/rollback`. */
  rollback(request: RollbackRequest): Promise<RollbackResponse>;
  /** `GET /v1/rollouts`. */
  listRollouts(): Promise<RolloutsResponse>;
  /** `GET /v1/rollouts/:id`. */
  rollout(id: string): Promise<RolloutResponse>;
  /** `POST /v1/rollouts/:id/resume`; `latest` resumes the newest paused one. */
  resumeRollout(id: string): Promise<RolloutResponse>;
  /** `GET /v1/audit?limit=`. */
  auditLog(limit: number): Promise<AuditResponse>;
  close(): void;
}

/** Calls the controller's operator API with the operator token, verifying it against its CA. */
export function createOperatorClient(target: OperatorTarget): OperatorClient {
  const token = loadOperatorToken({
    file: target.operatorTokenFile,
    fallbackFile: join(target.stateDir, 'operator.token'),
    create: false,
  }).token;
  let caPem: string | null = null;
  if (target.server.startsWith('https:')) {
    const caFile = target.caFile ?? join(target.stateDir, 'ca.pem');
    try {
      caPem = readFileSync(caFile, 'utf8');
    } catch (error) {
      throw new EgressguardError(
        'usage',
        `Cannot read the controller's CA "${caFile}": ${(error as Error).message}`,
        {
          hint: 'pass --ca-file with the ca.pem from the server state directory',
        },
      );
    }
  }
  let connection: ControllerConnection | undefined;
  // The one place an answer takes its type: the route's response type in the protocol.
  const call = async <T>(method: 'GET' | 'POST', path: string, body?: unknown): Promise<T> => {
    connection ??= connectController(target.server, caPem);
    const answer = await connection.request(method, path, {
      token,
      ...(body === undefined ? {} : { body }),
    });
    if (answer.status >= 200 && answer.status < 300) return answer.body as T;
    const issues =
      (answer.body as { error?: { issues?: unknown[] } } | undefined)?.error?.issues ?? [];
    throw new OperatorCallError(
      answer.status,
      `Controller refused ${method} ${path.split('?')[0] ?? path} (HTTP ${answer.status}): ${describeRefusal(answer)}`,
      issues,
    );
  };
  const hostPath = (name: string): string => `/v1/hosts/${encodeURIComponent(name)}`;
  const rolloutPath = (id: string): string => `/v1/rollouts/${encodeURIComponent(id)}`;
  return {
    listHosts: () => call('GET', '/v1/hosts'),
    host: (name) => call('GET', hostPath(name)),
    hostEvents: (name, limit) => call('GET', `${hostPath(name)}/events?limit=${limit}`),
    steerHost: (verb, name) => call('POST', `${hostPath(name)}/${verb}`),
    revokeCredentials: (name) => call('POST', `${hostPath(name)}/credentials/revoke`),
    createToken: (request) => call('POST', '/v1/tokens', request),
    push: (request) => call('POST', '/v1/pushes', request),
    rollback: (request) => call('POST', '/v1/rollback', request),
    listRollouts: () => call('GET', '/v1/rollouts'),
    rollout: (id) => call('GET', rolloutPath(id)),
    resumeRollout: (id) => call('POST', `${rolloutPath(id)}/resume`),
    auditLog: (limit) => call('GET', `/v1/audit?limit=${limit}`),
    close: () => connection?.close(),
  };
}
