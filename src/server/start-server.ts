import { hostname } from 'node:os';
import { isIP } from 'node:net';
import { join } from 'node:path';
import { EgressguardError } from '../core/index.js';
import {
  Controller,
  createHostIrBinder,
  openStore,
  systemClock,
  hashSecret,
  type BundleBinder,
  type Clock,
} from '../fleet/index.js';
import { createApp } from './create-app.js';
import type { HostRateLimit } from './host-rate-limit.js';
import { loadMetricsToken, loadOperatorToken } from './operator-token.js';
import { createServerMetrics } from './server-metrics.js';

export interface ServerOptions {
  /** `sqlite:PATH` or `postgres://…`. */
  readonly store: string;
  /** `HOST:PORT`, `[V6]:PORT` or `:PORT`. */
  readonly listen: string;
  /** Where the CA, its key and the generated operator token live. */
  readonly stateDir: string;
  /** Serve plain HTTP (loopback only). */
  readonly insecureHttp?: boolean;
  readonly tlsCertFile?: string | undefined;
  readonly tlsKeyFile?: string | undefined;
  readonly tlsCaFile?: string | undefined;
  /** More names and addresses for the generated server certificate. */
  readonly tlsNames?: readonly string[];
  readonly operatorTokenFile?: string | undefined;
  /** The scrape credential for `/metrics` (else $EGRESSGUARD_METRICS_TOKEN, else metrics.token). */
  readonly metricsTokenFile?: string | undefined;
  readonly pollIntervalMs?: number;
  readonly graceMs?: number;
  readonly restartGraceMs?: number;
  /** How many requests one host may send (default: 30 at once, then 1 a second). */
  readonly hostRateLimit?: HostRateLimit;
  /** How often rollouts are judged. */
  readonly tickMs?: number;
  readonly binder?: BundleBinder;
  readonly clock?: Clock;
  readonly log?: (line: string) => void;
}

export interface RunningServer {
  readonly url: string;
  /** The CA agents pin (null for plain HTTP). */
  readonly caPem: string | null;
  readonly caPin: string | null;
  readonly operatorToken: string;
  readonly metricsToken: string;
  readonly controller: Controller;
  close(): Promise<void>;
}

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|::1|localhost)$/;

/** Starts one controller replica: store, controller, HTTP(S) API, and the rollout ticker. */
export async function startServer(options: ServerOptions): Promise<RunningServer> {
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const { host, port } = parseListen(options.listen);
  if (options.insecureHttp === true && !LOOPBACK.test(host)) {
    throw new EgressguardError(
      'usage',
      `Cannot serve plain HTTP on "${host}": only on a loopback address`,
      {
        hint: 'drop --insecure-http (the server then creates its CA), or listen on 127.0.0.1',
      },
    );
  }
  const tls =
    options.insecureHttp === true
      ? undefined
      : await (
          await import('./server-tls.js')
        ).loadServerTls({
          stateDir: options.stateDir,
          names: [
            'localhost',
            '127.0.0.1',
            '::1',
            hostname(),
            ...(host === '0.0.0.0' || host === '::' ? [] : [host]),
            ...(options.tlsNames ?? []),
          ],
          certFile: options.tlsCertFile,
          keyFile: options.tlsKeyFile,
          caFile: options.tlsCaFile,
        });
  const operator = loadOperatorToken({
    file: options.operatorTokenFile,
    fallbackFile: join(options.stateDir, 'operator.token'),
    create: true,
  });
  const scrape = loadMetricsToken({
    file: options.metricsTokenFile,
    fallbackFile: join(options.stateDir, 'metrics.token'),
  });
  const store = await openStore(options.store, { log });
  const controller = new Controller({
    store,
    binder: options.binder ?? createHostIrBinder(),
    caPin: tls?.caPin ?? null,
    clock: options.clock ?? systemClock,
    ...(options.pollIntervalMs === undefined ? {} : { pollIntervalMs: options.pollIntervalMs }),
    ...(options.graceMs === undefined ? {} : { graceMs: options.graceMs }),
    ...(options.restartGraceMs === undefined ? {} : { restartGraceMs: options.restartGraceMs }),
  });
  try {
    // Times are stored and judged on the database's clock from the first request on.
    await controller.syncClock();
  } catch (error) {
    await store.close();
    throw new EgressguardError(
      'io',
      `Cannot read the clock of store "${store.description}": ${(error as Error).message}`,
      { cause: error },
    );
  }
  const metrics = createServerMetrics(controller);
  const { app, shutdown } = createApp({
    controller,
    metrics,
    operatorTokenHash: hashSecret(operator.token),
    metricsTokenHash: hashSecret(scrape.token),
    ...(options.hostRateLimit === undefined ? {} : { hostRateLimit: options.hostRateLimit }),
    https: tls,
    log,
  });

  let ticking = false;
  let ticks = 0;
  const ticker = setInterval(() => {
    if (ticking) return;
    ticking = true;
    ticks += 1;
    const work =
      ticks % 600 === 0
        ? controller.tick().then(() => controller.pruneEvents())
        : controller.tick();
    work
      .catch((error: unknown) => {
        // A store fault is logged once by the store's monitor, not at every tick.
        if (store.noteFailure(error) === undefined)
          log(`warning: cannot judge rollouts: ${(error as Error).message}`);
      })
      .finally(() => {
        ticking = false;
      });
  }, options.tickMs ?? 1000);

  try {
    await app.listen({ host, port });
  } catch (error) {
    clearInterval(ticker);
    shutdown();
    await store.close();
    throw new EgressguardError(
      'io',
      `Cannot listen on "${options.listen}": ${(error as Error).message}`,
      { cause: error },
    );
  }
  const address = app.server.address();
  const boundPort = typeof address === 'object' && address !== null ? address.port : port;
  const shownHost = isIP(host) === 6 ? `[${host}]` : host;
  const url = `${tls === undefined ? 'http' : 'https'}://${shownHost}:${boundPort}`;
  if (tls === undefined) {
    log(
      `warning: serving plain HTTP on ${url}: agents and operators talk without TLS (loopback only)`,
    );
  }
  log(
    `egressguard server listening on ${url} (store ${store.description}, operator token from ${operator.source})`,
  );
  if (tls !== undefined) log(`CA sha256 pin: ${tls.caPin}`);

  return {
    url,
    caPem: tls?.caPem ?? null,
    caPin: tls?.caPin ?? null,
    operatorToken: operator.token,
    metricsToken: scrape.token,
    controller,
    close: async () => {
      clearInterval(ticker);
      shutdown();
      await app.close();
      // Check-ins held in memory are written if the store can take them; they are only the
      // last-seen times, which the next poll writes again.
      await controller.flushCheckins().catch(() => undefined);
      await store.close();
    },
  };
}

/** Splits `HOST:PORT`, `[V6]:PORT` or `:PORT` (all interfaces). */
export function parseListen(listen: string): { host: string; port: number } {
  const match = /^(?:\[([^\]]+)\]|([^:]*)):(\d{1,5})$/.exec(listen);
  const port = Number(match?.[3]);
  if (match === null || !Number.isInteger(port) || port > 65_535) {
    throw new EgressguardError(
      'usage',
      `Cannot listen on "${listen}": expected HOST:PORT, [IPV6]:PORT or :PORT`,
    );
  }
  const host = match[1] ?? match[2] ?? '';
  return { host: host === '' ? '0.0.0.0' : host, port };
}
