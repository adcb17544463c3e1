import { createServer } from 'node:net';
import { join } from 'node:path';
import { execa } from 'execa';
import { connectController, type ControllerAnswer } from '../../../src/fleet/index.js';
import { REPO } from '../../e2e-cli/run-cli.js';
import { waitFor } from './fleet-lab.js';

const BIN = join(REPO, 'bin/egressguard.js');

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      probe.close(() => {
        resolve(typeof address === 'object' && address !== null ? address.port : 0);
      });
    });
  });
}

/** `egressguard server` from the built CLI, as a process of its own: it can crash, or be killed. */
export interface ServerProcess {
  readonly url: string;
  /** Everything it wrote to stderr so far (its log). */
  readonly log: () => string;
  /** Still running: it neither exited nor was killed by a signal. */
  readonly running: () => boolean;
  /** GET or POST against it, trusting the CA in its state directory. */
  request(
    method: 'GET' | 'POST',
    path: string,
    options?: { token?: string; body?: unknown },
  ): Promise<ControllerAnswer>;
  kill(signal?: 'SIGKILL' | 'SIGTERM'): void;
  readonly exited: Promise<void>;
}

/** Starts the built CLI's server on `port` and waits until `/healthz` answers. */
export async function startServerProcess(options: {
  store: string;
  stateDir: string;
  port: number;
  pollIntervalSeconds?: number;
}): Promise<ServerProcess> {
  const url = `https://127.0.0.1:${options.port}`;
  const child = execa(
    'node',
    [
      BIN,
      'server',
      '--store',
      options.store,
      '--listen',
      `127.0.0.1:${options.port}`,
      '--state-dir',
      options.stateDir,
      '--poll-interval',
      String(options.pollIntervalSeconds ?? 2),
    ],
    { reject: false, env: { NO_COLOR: '1' }, buffer: false },
  );
  let log = '';
  child.stderr.on('data', (chunk: Buffer) => (log += chunk.toString('utf8')));
  const exited = child.then(
    () => undefined,
    () => undefined,
  );
  const running = (): boolean => child.exitCode === null && child.signalCode === null;
  const request: ServerProcess['request'] = async (method, path, extra = {}) => {
    const { readFileSync } = await import('node:fs');
    const connection = connectController(
      url,
      readFileSync(join(options.stateDir, 'ca.pem'), 'utf8'),
    );
    try {
      return await connection.request(method, path, extra);
    } finally {
      connection.close();
    }
  };
  await waitFor('the server to listen', async () => {
    if (!running()) throw new Error(`the server exited: ${log}`);
    return (await request('GET', '/healthz')).status === 200 ? true : undefined;
  });
  return {
    url,
    log: () => log,
    running,
    request,
    kill: (signal = 'SIGKILL') => child.kill(signal),
    exited,
  };
}
