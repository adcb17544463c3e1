import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { EgressguardError } from '../core/index.js';
import { connectController, describeRefusal, type ControllerConnection } from '../fleet/index.js';
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

export interface OperatorClient {
  call(method: 'GET' | 'POST', path: string, body?: unknown): Promise<unknown>;
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
  return {
    call: async (method, path, body) => {
      connection ??= connectController(target.server, caPem);
      const answer = await connection.request(method, path, {
        token,
        ...(body === undefined ? {} : { body }),
      });
      if (answer.status >= 200 && answer.status < 300) return answer.body;
      const issues =
        (answer.body as { error?: { issues?: unknown[] } } | undefined)?.error?.issues ?? [];
      throw new OperatorCallError(
        answer.status,
        `Controller refused ${method} ${path.split('?')[0] ?? path} (HTTP ${answer.status}): ${describeRefusal(answer)}`,
        issues,
      );
    },
    close: () => connection?.close(),
  };
}
