import { EgressguardError, isEgressguardError } from '../core/index.js';
import { z } from 'zod';
import {
  AGENT_RECONNECT_CAP_MS,
  bundleResponseSchema,
  connectController,
  MAX_POLL_WAIT_SECONDS,
  type BackoffPolicy,
  type StatusReport,
} from '../fleet/index.js';
import { StateDir } from '../state/index.js';
import { systemAgentClock, type AgentClock } from './agent-clock.js';
import { enroll, ENROLLMENT_FILE, readEnrollment, rotate } from './agent-enrollment.js';
import type { AgentMetrics } from './agent-metrics.js';
import {
  ControllerClient,
  ControllerRefusal,
  isRetriable,
  retryDelay,
} from './controller-client.js';
import type { HostEngine, PreparedGeneration } from './host-engine.js';
import { Reconciler, type ReconcilerMemory } from './reconciler.js';
import { isAborted, keepWatching, startRound, type Round } from './watch-loop.js';

export interface AgentOptions<P extends PreparedGeneration> {
  readonly serverUrl: string;
  /** The bootstrap token file, read once, at enrollment. */
  readonly tokenFile: string;
  readonly stateDir: StateDir;
  readonly engine: HostEngine<P>;
  readonly hostname: string;
  readonly agentVersion: string;
  readonly signal: AbortSignal;
  readonly clock?: AgentClock;
  readonly random?: () => number;
  /** Backoff of failed applies (default 1 s doubling to 15 min). */
  readonly backoff?: BackoffPolicy;
  /** Backoff while the controller cannot be reached (default 1 s doubling to 60 s). */
  readonly connectBackoff?: BackoffPolicy;
  /** Backoff of restarts of the watchers after they failed (default 1 s doubling to 60 s). */
  readonly watchBackoff?: BackoffPolicy;
  /** The first poll waits up to this long (spreads a fleet that starts at once). */
  readonly startJitterMs?: number;
  /** Each later poll waits up to this long more. */
  readonly pollJitterMs?: number;
  /** Rotate the credential when it is older than this. */
  readonly rotateAfterMs?: number;
  readonly metrics?: AgentMetrics;
  readonly log?: (line: string) => void;
}

const MEMORY_FILE = 'agent-memory.json';

/**
 * Runs the agent until `signal` aborts or the controller decommissions the host: enroll once,
 * then long-poll, reconcile and report. While the controller is away it keeps what is applied,
 * repairs drift from its last bundle, and retries the connection with backoff.
 */
export async function runAgent<P extends PreparedGeneration>(
  options: AgentOptions<P>,
): Promise<AgentEnd> {
  const clock = options.clock ?? systemAgentClock;
  const random = options.random ?? Math.random;
  const log = options.log ?? (() => undefined);
  const connectBackoff = options.connectBackoff ?? {
    baseMs: 1_000,
    capMs: AGENT_RECONNECT_CAP_MS,
  };
  const { signal } = options;

  await clock.sleep(random() * (options.startJitterMs ?? 5_000), signal);
  let enrollment = readEnrollment(options.stateDir);
  let connectFailures = 0;
  while (enrollment === undefined && !signal.aborted) {
    try {
      enrollment = await enroll(options);
      log(`enrolled as "${enrollment.hostName}" (${enrollment.hostId})`);
    } catch (error) {
      if (isEgressguardError(error) && error.code !== 'io' && !isRetriable(error)) throw error;
      connectFailures += 1;
      const delay = retryDelay(error, connectFailures, connectBackoff, random);
      log(`warning: ${(error as Error).message}; trying again in ${Math.round(delay / 1000)} s`);
      await clock.sleep(delay, signal);
    }
  }
  if (enrollment === undefined) return 'stopped';
  if (enrollment.serverUrl !== options.serverUrl.replace(/\/+$/, '')) {
    throw new EgressguardError(
      'state-corrupt',
      `Cannot run the agent against "${options.serverUrl}": it enrolled with "${enrollment.serverUrl}"`,
      {
        hint: `use --server ${enrollment.serverUrl}, or remove ${options.stateDir.file(ENROLLMENT_FILE)} to enroll again`,
      },
    );
  }

  const client = new ControllerClient(connectController(enrollment.serverUrl, enrollment.caPem));
  let memoryOnDisk = options.stateDir.read(MEMORY_FILE);
  const memory = readMemory(options.stateDir);
  const reconciler = new Reconciler({
    engine: options.engine,
    clock,
    random,
    agentVersion: options.agentVersion,
    ...(options.backoff === undefined ? {} : { backoff: options.backoff }),
    ...(memory === undefined ? {} : { memory }),
  });
  let pollWaitMs = 30_000;
  let pending: StatusReport | undefined;
  connectFailures = 0;
  // Between rounds the engine's watchers (the resident mode's) repair drift as it happens; a
  // repair, or a link or route event (facts, tunnels), ends the current round's wait so the
  // controller hears of it at once rather than at the next poll. Never a backoff's: a repair
  // needs no poll, and a controller that is down must not be called at every link event.
  let round: Round | undefined;
  const watching = new AbortController();
  const stopWatching = (): void => {
    watching.abort();
  };
  signal.addEventListener('abort', stopWatching, { once: true });
  const watched = keepWatching({
    engine: options.engine,
    signal: watching.signal,
    clock,
    random,
    backoff: options.watchBackoff ?? { baseMs: 1_000, capMs: 60_000 },
    log,
    ...(options.metrics === undefined ? {} : { metrics: options.metrics }),
    onPass: (pass) => {
      if (pass.repair !== undefined) {
        reconciler.noteRepair(pass.repair);
        options.metrics?.recordRepair(pass.repair.what, 'watcher');
        log(`repaired ${pass.repair.what} between polls: ${pass.repair.message}`);
      }
      if (pass.repair !== undefined || pass.trigger === 'link' || pass.trigger === 'route') {
        round?.wake();
      }
    },
  });
  try {
    while (!signal.aborted) {
      round?.end();
      round = startRound(signal);
      // Reconcile with what we have: the controller being away never stops enforcement.
      const report = await reconciler.step((attempt) => {
        options.metrics?.recordAttempt(attempt);
      });
      // One line per attempt: what the host did is in its own log too, not only the controller's.
      const attempt = report?.attempt;
      if (attempt !== undefined) {
        log(
          `${attempt.outcome} ${attempt.hash.slice(0, 12)} (attempt ${attempt.number}, ${Math.round(attempt.durationMs)} ms)${attempt.outcome === 'applied' ? '' : `: ${attempt.message}`}`,
        );
      }
      options.metrics?.recordState(reconciler.memory.appliedHash, report);
      // A drift the round itself repaired (the watchers' repairs were counted as they happened).
      if (reconciler.roundRepaired) options.metrics?.recordRepair('generation', 'round');
      memoryOnDisk = await saveMemory(options.stateDir, reconciler.memory, memoryOnDisk);
      if (report !== undefined) pending = report;
      try {
        if (pending !== undefined) {
          await client.report(enrollment.credential, pending, signal);
          reconciler.delivered(pending);
          pending = undefined;
        }
        if (
          options.rotateAfterMs !== undefined &&
          clock.now() - enrollment.credentialIssuedAt > options.rotateAfterMs
        ) {
          enrollment = await rotate(client, enrollment, options.stateDir, clock);
          log('rotated the host credential');
        }
        const known = reconciler.known;
        const nextAttempt = reconciler.nextAttemptAt;
        const waitMs = Math.max(
          0,
          Math.min(pollWaitMs, nextAttempt === undefined ? pollWaitMs : nextAttempt - clock.now()),
        );
        const changed = await client.poll(
          enrollment.credential,
          {
            hash: known.hash,
            retry: known.retry,
            force: known.force,
            suspended: known.suspended ? '1' : '0',
            // A poll interval longer than the protocol's longest wait polls again in between.
            wait: Math.min(MAX_POLL_WAIT_SECONDS, Math.floor(waitMs / 1000)),
          },
          {
            signal: round.signal,
            timeoutMs: waitMs + 30_000,
            onAnswer: () => options.metrics?.recordReachable(true),
          },
        );
        if (changed !== undefined) {
          connectFailures = 0;
          pollWaitMs = takeBundle(reconciler, changed.body, log) ?? pollWaitMs;
          continue;
        }
        // Only an answer that is not an error ends the backoff: a controller that refuses (4xx)
        // or fails (5xx) is asked again ever more slowly, never about once a second.
        connectFailures = 0;
        await clock.sleep(
          random() * (options.pollJitterMs ?? Math.min(1_000, pollWaitMs / 20)),
          round.signal,
        );
      } catch (error) {
        if (isAborted(signal)) break;
        // The long poll ended by the watchers: report at once; the controller was not at fault.
        // Only that: a request that failed of itself while a wakeup came is a failure.
        if (round.signal.aborted && isAbortError(error)) continue;
        // The controller says this host is done (decommissioned) or its credential is no longer
        // valid (revoked): asking again changes nothing, so the agent stops, rules kept.
        if (error instanceof ControllerRefusal && error.status === 410) return decommissioned(log);
        if (error instanceof ControllerRefusal && error.status === 401) return revoked(log, error);
        // It answered (with an error) or it could not be reached.
        options.metrics?.recordReachable(error instanceof ControllerRefusal);
        connectFailures += 1;
        // A controller that answers (its store away, its disk full) is asked again at most one
        // poll interval (plus its Retry-After) apart, never more often than it is asked anyway:
        // once it works again every host hears of it within that, not a minute later.
        const backoff =
          error instanceof ControllerRefusal
            ? { ...connectBackoff, capMs: Math.min(connectBackoff.capMs, pollWaitMs) }
            : connectBackoff;
        const delay = retryDelay(error, connectFailures, backoff, random);
        log(
          `warning: ${(error as Error).message}; enforcing what is applied, trying again in ${Math.round(delay / 1000)} s`,
        );
        const nextAttempt = reconciler.nextAttemptAt;
        await clock.sleep(
          nextAttempt === undefined
            ? delay
            : Math.min(delay, Math.max(0, nextAttempt - clock.now())),
          signal,
        );
      }
    }
    return 'stopped';
  } finally {
    round?.end();
    signal.removeEventListener('abort', stopWatching);
    // The watchers finish a repair in flight before the agent says it stopped.
    watching.abort();
    await watched;
    client.close();
  }
}

function readMemory(stateDir: StateDir): ReconcilerMemory | undefined {
  const text = stateDir.read(MEMORY_FILE);
  if (text === undefined) return undefined;
  try {
    const parsed = JSON.parse(text) as { appliedHash: string | null; desired: unknown };
    const desired = bundleResponseSchema.nullable().safeParse(parsed.desired);
    return { appliedHash: parsed.appliedHash, desired: desired.success ? desired.data : null };
  } catch {
    return undefined; // only a cache: the controller sends the bundle again
  }
}

/**
 * Writes the memory when it changed since `written`; off the event loop (libuv's pool), since a
 * push makes agents write at once. Returns what is now on disk.
 */
async function saveMemory(
  stateDir: StateDir,
  memory: ReconcilerMemory,
  written: string | undefined,
): Promise<string> {
  const text = `${JSON.stringify(memory)}\n`;
  if (text !== written) await stateDir.writeAsync(MEMORY_FILE, text);
  return text;
}

/** Why `runAgent` returned: a stop signal, or the controller ending this host's membership. */
export type AgentEnd = 'stopped' | 'decommissioned' | 'revoked';

function decommissioned(log: (line: string) => void): 'decommissioned' {
  log(
    'the controller decommissioned this host: stopping (the applied rules stay; remove them with `egressguard remove`)',
  );
  return 'decommissioned';
}

function revoked(log: (line: string) => void, error: ControllerRefusal): 'revoked' {
  log(
    `${error.message}: this host's credential is no longer valid (revoked); stopping, the applied rules stay (enroll again with a new bootstrap token after removing agent-enrollment.json)`,
  );
  return 'revoked';
}

/**
 * Takes a 200 answer to the long poll; returns its poll interval. A bundle the agent cannot take
 * (it fails the wire's checks) is refused: enforcement stays as it is, and the next report tells
 * the controller why, which shows the host Degraded instead of converging for ever.
 */
function takeBundle(
  reconciler: Reconciler,
  body: unknown,
  log: (line: string) => void,
): number | undefined {
  const parsed = bundleResponseSchema.safeParse(body);
  if (parsed.success) {
    reconciler.accept(parsed.data);
    return parsed.data.pollIntervalMs;
  }
  const envelope = bundleResponseSchema.extend({ bundle: z.unknown() }).safeParse(body);
  const issue = parsed.error.issues[0];
  const why = `${issue?.path.join('.') ?? ''}: ${issue?.message ?? 'invalid'}`;
  if (!envelope.success || envelope.data.hash === null) {
    throw new EgressguardError(
      'io',
      `Cannot read the controller's answer to the long poll: ${why}`,
    );
  }
  const { hash } = envelope.data;
  const message = `the bundle fails this agent's checks at ${why}`;
  log(`warning: refused bundle ${hash.slice(0, 12)}: ${message}; keeping what is applied`);
  reconciler.refuse({ ...envelope.data, hash }, message);
  return envelope.data.pollIntervalMs;
}

/** Whether a request failed because its signal aborted (the error, or what it wraps). */
function isAbortError(error: unknown): boolean {
  for (let e: unknown = error; e instanceof Error; e = e.cause) {
    if (e.name === 'AbortError') return true;
  }
  return false;
}
