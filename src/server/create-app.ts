import { setMaxListeners } from 'node:events';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { z } from 'zod';
import {
  HOST_VERBS,
  RefusedError,
  matchesSecret,
  bundleQuerySchema,
  enrollRequestSchema,
  pushRequestSchema,
  rollbackRequestSchema,
  statusReportSchema,
  tokenRequestSchema,
  type AuditResponse,
  type BundleQuery,
  type BundleResponse,
  type Controller,
  type EventsResponse,
  type HostIdentity,
  type HostResponse,
  type HostsResponse,
  type RevokeCredentialsResponse,
  type RolloutParamsInput,
  type RolloutResponse,
  type RolloutsResponse,
  type StoreFault,
  type TokenResponse,
} from '../fleet/index.js';
import { HostRateLimiter, DEFAULT_HOST_RATE_LIMIT, type HostRateLimit } from './host-rate-limit.js';
import type { ServerMetrics } from './server-metrics.js';

export interface AppOptions {
  readonly controller: Controller;
  readonly metrics: ServerMetrics;
  readonly operatorTokenHash: string;
  /** The scrape credential's hash: `/metrics` answers it (or the operator token), nobody else. */
  readonly metricsTokenHash: string;
  /** How many requests one host credential may send. */
  readonly hostRateLimit?: HostRateLimit;
  readonly https?: { readonly key: string; readonly cert: string } | undefined;
  /** Largest request body in bytes (a pushed policy may be up to `maxPolicyBytes`). */
  readonly bodyLimit?: number;
  readonly maxPolicyBytes?: number;
  readonly log?: (line: string) => void;
}

const hostParams = z.strictObject({ name: z.string().min(1).max(253) });
const rolloutParams = z.strictObject({ id: z.string().min(1).max(64) });
const limitQuery = z.strictObject({
  limit: z.coerce.number().int().min(1).max(10_000).default(100),
});
const eventsQuery = z.strictObject({
  limit: z.coerce.number().int().min(1).max(10_000).default(100),
  rollout: z.string().max(64).optional(),
});

/** Long polls waiting for a host's bundle to change, woken by the store from any replica. */
class Waiters {
  readonly #byHost = new Map<string, Set<() => void>>();

  wait(hostId: string, ms: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const set = this.#byHost.get(hostId) ?? new Set();
      this.#byHost.set(hostId, set);
      const done = (): void => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        set.delete(done);
        if (set.size === 0 && this.#byHost.get(hostId) === set) this.#byHost.delete(hostId);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener('abort', done, { once: true });
      set.add(done);
    });
  }

  wake(hostIds: readonly string[] | '*'): void {
    const ids = hostIds === '*' ? [...this.#byHost.keys()] : hostIds;
    for (const id of ids) for (const done of [...(this.#byHost.get(id) ?? [])]) done();
  }

  get size(): number {
    let n = 0;
    for (const set of this.#byHost.values()) n += set.size;
    return n;
  }
}

/** The controller's HTTP API: agents enroll, long-poll and report; operators push and steer. */
export function createApp(options: AppOptions): { app: FastifyInstance; shutdown: () => void } {
  const { controller, metrics } = options;
  const log = options.log ?? (() => undefined);
  const app = Fastify({
    logger: false,
    bodyLimit: options.bodyLimit ?? 1024 * 1024,
    ...(options.https === undefined
      ? {}
      : { https: { key: options.https.key, cert: options.https.cert } }),
    // A long poll may wait up to two minutes; keep-alive connections outlive it.
    requestTimeout: 0,
    keepAliveTimeout: 130_000,
    return503OnClosing: true,
  });
  const waiters = new Waiters();

  const stopWaking = controller.store.onWake((ids) => {
    waiters.wake(ids);
  });
  const closing = new AbortController();
  // Every waiting long poll listens for the shutdown: thousands of listeners are expected.
  setMaxListeners(0, closing.signal);

  app.addHook('onResponse', (request, reply, done) => {
    metrics.requestDuration.observe(
      {
        method: request.method,
        route: request.routeOptions.url ?? 'unknown',
        status: String(reply.statusCode),
      },
      reply.elapsedTime / 1000,
    );
    done();
  });

  app.setErrorHandler((error: unknown, _request, reply) => {
    if (error instanceof RefusedError) {
      if (error.retryAfterSeconds !== undefined)
        void reply.header('retry-after', String(error.retryAfterSeconds));
      return reply.code(error.status).send({
        error: {
          code: error.code,
          message: error.message,
          ...(error.issues === undefined ? {} : { issues: error.issues }),
        },
      });
    }
    if (error instanceof z.ZodError) {
      const issues = error.issues.map((i) => ({ path: i.path.join('.'), message: i.message }));
      const first = issues[0];
      return reply.code(400).send({
        error: {
          code: 'invalid-request',
          message: `Invalid request${first === undefined ? '' : `: ${first.path === '' ? '' : `"${first.path}": `}${first.message}`}`,
          issues,
        },
      });
    }
    const status = (error as { statusCode?: number }).statusCode;
    if (status !== undefined && status >= 400 && status < 500) {
      const code =
        status === 413
          ? 'payload-too-large'
          : status === 415
            ? 'unsupported-media-type'
            : 'invalid-request';
      return reply
        .code(status)
        .send({ error: { code, message: `Request refused: ${(error as Error).message}` } });
    }
    // The store's faults (unreachable, disk full) are the controller's state, not a bug: the
    // monitor logs each change once, and the caller is told to come back.
    const fault = controller.store.noteFailure(error);
    if (fault !== undefined) return sendStoreFault(reply, fault);
    log(`error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    return reply
      .code(500)
      .send({ error: { code: 'internal', message: 'Internal error: see the controller log' } });
  });
  app.setNotFoundHandler((request, reply) =>
    reply.code(404).send({
      error: {
        code: 'not-found',
        message: `No route for ${request.method} ${request.url.split('?')[0] ?? ''}`,
      },
    }),
  );

  const bearer = (request: FastifyRequest): string | undefined => {
    const header = request.headers.authorization;
    return header?.startsWith('Bearer ') === true
      ? header.slice('Bearer '.length).trim()
      : undefined;
  };
  const asHost = async (request: FastifyRequest): Promise<HostIdentity> => {
    const token = bearer(request);
    if (token === undefined)
      throw new RefusedError(
        'unauthenticated',
        'A host credential is required (Authorization: Bearer …)',
      );
    return controller.authenticateHost(token);
  };
  // A flood from one credential is refused before it reaches the store (per replica).
  const limiter = new HostRateLimiter(options.hostRateLimit ?? DEFAULT_HOST_RATE_LIMIT);
  const asLimitedHost = async (request: FastifyRequest): Promise<HostIdentity> => {
    const identity = await asHost(request);
    const wait = limiter.take(identity.hostId, Date.now());
    if (wait !== undefined) {
      throw new RefusedError(
        'rate-limited',
        `Too many requests from this host: wait ${wait} s (at most ${limiter.describe()})`,
        { retryAfterSeconds: wait },
      );
    }
    return identity;
  };
  const asOperator = (request: FastifyRequest): string => {
    const token = bearer(request);
    if (token === undefined || !matchesSecret(token, options.operatorTokenHash)) {
      throw new RefusedError(
        'unauthenticated',
        'An operator token is required (Authorization: Bearer …)',
      );
    }
    return 'operator';
  };

  // ── agents ────────────────────────────────────────────────────────────────────────────────

  app.post('/v1/enroll', async (request) =>
    controller.enroll(enrollRequestSchema.parse(request.body)),
  );

  app.get('/v1/bundle', async (request, reply) => {
    const identity = await asLimitedHost(request);
    const query = bundleQuerySchema.parse(request.query);
    metrics.checkins.inc();
    await controller.checkIn(identity.hostId);
    // Never longer than the poll interval: a waiting agent checks in at least that often, which
    // is what its grace (and so "silent") is measured against.
    const deadline = Date.now() + Math.min(query.wait * 1000, controller.pollIntervalMs);
    const gone = new AbortController();
    const onClose = (): void => {
      gone.abort();
    };
    request.raw.once('close', onClose);
    reply.raw.once('close', onClose);
    closing.signal.addEventListener('abort', onClose, { once: true });
    const { signal } = gone;
    try {
      for (;;) {
        const state = await controller.bundleFor(identity.hostId);
        if (state.decommissioned) throw new RefusedError('gone', 'This host was decommissioned');
        const response: BundleResponse = {
          hostId: state.hostId,
          hash: state.hash,
          bundle: state.bundle,
          retryToken: state.retryToken,
          forceToken: state.forceToken,
          suspended: state.suspended,
          pollIntervalMs: state.pollIntervalMs,
        };
        if (differs(response, query)) return response;
        const remaining = deadline - Date.now();
        if (remaining <= 0 || signal.aborted) return await reply.code(304).send();
        await waiters.wait(identity.hostId, remaining, signal);
        // A revocation or decommission wakes the host: the next round must still be allowed.
        await asHost(request);
      }
    } finally {
      request.raw.off('close', onClose);
      reply.raw.off('close', onClose);
      closing.signal.removeEventListener('abort', onClose);
    }
  });

  app.post('/v1/status', async (request) => {
    const identity = await asLimitedHost(request);
    const report = statusReportSchema.parse(request.body);
    metrics.checkins.inc();
    const taken = await controller.reportStatus(identity.hostId, report);
    if (taken.repairs > 0) metrics.driftRepairs.inc(taken.repairs);
    return { ok: true };
  });

  app.post('/v1/credential/rotate', async (request) => {
    const identity = await asLimitedHost(request);
    return { credential: await controller.rotateCredential(identity) };
  });

  // ── operators ─────────────────────────────────────────────────────────────────────────────

  app.get('/v1/hosts', async (request): Promise<HostsResponse> => {
    asOperator(request);
    return { hosts: await controller.listHosts() };
  });
  app.get('/v1/hosts/:name', async (request): Promise<HostResponse> => {
    asOperator(request);
    return { host: await controller.host(hostParams.parse(request.params).name) };
  });
  app.get('/v1/hosts/:name/events', async (request): Promise<EventsResponse> => {
    asOperator(request);
    const { limit } = limitQuery.parse(request.query);
    return {
      events: await controller.events({ hostName: hostParams.parse(request.params).name, limit }),
    };
  });
  for (const verb of HOST_VERBS) {
    app.post(`/v1/hosts/:name/${verb}`, async (request): Promise<HostResponse> => {
      const actor = asOperator(request);
      return { host: await controller[verb](hostParams.parse(request.params).name, actor) };
    });
  }
  app.post(
    '/v1/hosts/:name/credentials/revoke',
    async (request): Promise<RevokeCredentialsResponse> => {
      const actor = asOperator(request);
      return controller.revokeCredentials(hostParams.parse(request.params).name, actor);
    },
  );
  app.post('/v1/tokens', async (request): Promise<TokenResponse> => {
    const actor = asOperator(request);
    const body = tokenRequestSchema.parse(request.body ?? {});
    return controller.createBootstrapToken(
      {
        ttlMs: body.ttlSeconds * 1000,
        uses: body.uses,
        labels: body.labels,
        description: body.description,
      },
      actor,
    );
  });
  app.post(
    '/v1/pushes',
    { bodyLimit: options.maxPolicyBytes ?? 16 * 1024 * 1024 },
    async (request, reply) => {
      const actor = asOperator(request);
      const body = pushRequestSchema.parse(request.body);
      const result = await controller.push(
        {
          text: body.policy,
          source: body.source,
          rollout: stripUndefined(body.rollout),
          ...(body.options === undefined ? {} : { options: body.options }),
          ...(body.idempotencyKey === undefined ? {} : { idempotencyKey: body.idempotencyKey }),
        },
        actor,
      );
      if (!result.ok) {
        throw new RefusedError(
          'policy-invalid',
          `Cannot push policy "${body.source}": it has ${result.issues.length} problem(s)`,
          { issues: result.issues },
        );
      }
      return reply.code(result.replayed === true ? 200 : 201).send(result);
    },
  );
  app.post('/v1/rollback', async (request, reply) => {
    const actor = asOperator(request);
    const body = rollbackRequestSchema.parse(request.body ?? undefined);
    return reply.code(201).send(await controller.rollback(actor, stripUndefined(body?.rollout)));
  });
  app.get('/v1/rollouts', async (request): Promise<RolloutsResponse> => {
    asOperator(request);
    return { rollouts: await controller.listRollouts() };
  });
  app.get('/v1/rollouts/:id', async (request): Promise<RolloutResponse> => {
    asOperator(request);
    return { rollout: await controller.rolloutView(rolloutParams.parse(request.params).id) };
  });
  app.post('/v1/rollouts/:id/resume', async (request): Promise<RolloutResponse> => {
    const actor = asOperator(request);
    const { id } = rolloutParams.parse(request.params);
    return { rollout: await controller.resumeRollout(id === 'latest' ? undefined : id, actor) };
  });
  app.get('/v1/events', async (request): Promise<EventsResponse> => {
    asOperator(request);
    const query = eventsQuery.parse(request.query);
    return {
      events: await controller.events({
        limit: query.limit,
        ...(query.rollout === undefined ? {} : { rolloutId: query.rollout }),
      }),
    };
  });
  app.get('/v1/audit', async (request): Promise<AuditResponse> => {
    asOperator(request);
    return { audit: await controller.auditLog(limitQuery.parse(request.query).limit) };
  });

  // ── health and metrics ────────────────────────────────────────────────────────────────────

  // Liveness and the store's state: 503 while the store cannot be used (unreachable, disk full),
  // with what failed; the process itself keeps serving what it can.
  app.get('/healthz', (_request, reply) => {
    const store = controller.store.health();
    return reply
      .code(store.state === 'ok' ? 200 : 503)
      .send({ ok: store.state === 'ok', waiting: waiters.size, store });
  });
  // Metrics list every host, its state and its check-ins: a scrape credential is required.
  app.get('/metrics', async (request, reply) => {
    const token = bearer(request);
    if (
      token === undefined ||
      !(
        matchesSecret(token, options.metricsTokenHash) ||
        matchesSecret(token, options.operatorTokenHash)
      )
    ) {
      throw new RefusedError(
        'unauthenticated',
        'The metrics token is required (Authorization: Bearer …, from metrics.token in the server state directory or --metrics-token-file)',
      );
    }
    const body = await metrics.registry.metrics();
    return reply.header('content-type', metrics.registry.contentType).send(body);
  });

  return {
    app,
    shutdown: () => {
      closing.abort();
      stopWaking();
    },
  };
}

/** How long a caller refused for the store's sake waits (agents add their own jittered backoff). */
const STORE_RETRY_AFTER_SECONDS = 5;

function sendStoreFault(reply: FastifyReply, fault: StoreFault): FastifyReply {
  return reply
    .code(503)
    .header('retry-after', String(STORE_RETRY_AFTER_SECONDS))
    .send({
      error: {
        code: fault.state === 'disk-full' ? 'store-full' : 'store-unavailable',
        message: `The controller cannot do this now: its store: ${fault.message}; try again later`,
      },
    });
}

function differs(
  state: { hash: string | null; retryToken: number; forceToken: number; suspended: boolean },
  query: BundleQuery,
): boolean {
  return (
    (state.hash ?? '') !== query.hash ||
    state.retryToken !== query.retry ||
    state.forceToken !== query.force ||
    state.suspended !== (query.suspended === '1')
  );
}

function stripUndefined(input: Record<string, number | undefined> | undefined): RolloutParamsInput {
  return Object.fromEntries(Object.entries(input ?? {}).filter(([, v]) => v !== undefined));
}
