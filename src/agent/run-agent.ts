import { readFileSync } from 'node:fs';
import { EgressguardError, isEgressguardError } from '../core/index.js';
import { z } from 'zod';
import {
  AGENT_RECONNECT_CAP_MS,
  backoffDelay,
  bundleResponseSchema,
  connectController,
  describeRefusal,
  enrollResponseSchema,
  fetchPinnedCa,
  MAX_POLL_WAIT_SECONDS,
  parseBootstrapToken,
  rotateResponseSchema,
  type BackoffPolicy,
  type Clock,
  type ControllerAnswer,
  type ControllerConnection,
  type StatusReport,
} from '../fleet/index.js';
import { StateDir } from '../state/index.js';
import type { ResidentPass } from '../apply/index.js';
import type { AgentMetrics } from './agent-metrics.js';
import type { HostEngine, PreparedGeneration } from './host-engine.js';
import { Reconciler, type ReconcilerMemory } from './reconciler.js';

/** A clock the agent can also wait on; tests pass one they drive. */
export interface AgentClock extends Clock {
  sleep(ms: number, signal: AbortSignal): Promise<void>;
}

export const systemAgentClock: AgentClock = {
  now: () => Date.now(),
  sleep: (ms, signal) =>
    new Promise((resolve) => {
      if (signal.aborted) {
        resolve();
        return;
      }
      const timer = setTimeout(done, ms);
      function done(): void {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        resolve();
      }
      signal.addEventListener('abort', done, { once: true });
    }),
};

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

/** What the agent keeps in its state directory (0600: it holds the host credential). */
interface Enrollment {
  readonly serverUrl: string;
  readonly hostId: string;
  readonly hostName: string;
  readonly credential: string;
  readonly credentialIssuedAt: number;
  /** The pinned controller CA (null for a plain-HTTP loopback controller). */
  readonly caPem: string | null;
}

const ENROLLMENT_FILE = 'agent-enrollment.json';
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

  const connection = connectController(enrollment.serverUrl, enrollment.caPem);
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
          const answer = await connection.request('POST', '/v1/status', {
            body: pending,
            token: enrollment.credential,
            signal,
          });
          if (answer.status !== 200) throw refusal('report status', answer);
          reconciler.delivered(pending);
          pending = undefined;
        }
        if (
          options.rotateAfterMs !== undefined &&
          clock.now() - enrollment.credentialIssuedAt > options.rotateAfterMs
        ) {
          enrollment = await rotate(connection, enrollment, options.stateDir, clock);
          log('rotated the host credential');
        }
        const known = reconciler.known;
        const nextAttempt = reconciler.nextAttemptAt;
        const waitMs = Math.max(
          0,
          Math.min(pollWaitMs, nextAttempt === undefined ? pollWaitMs : nextAttempt - clock.now()),
        );
        const query = new URLSearchParams({
          hash: known.hash,
          retry: String(known.retry),
          force: String(known.force),
          suspended: known.suspended ? '1' : '0',
          // A poll interval longer than the protocol's longest wait polls again in between.
          wait: String(Math.min(MAX_POLL_WAIT_SECONDS, Math.floor(waitMs / 1000))),
        });
        const answer = await connection.request('GET', `/v1/bundle?${query.toString()}`, {
          token: enrollment.credential,
          signal: round.signal,
          timeoutMs: waitMs + 30_000,
        });
        options.metrics?.recordReachable(true);
        if (answer.status === 200) {
          connectFailures = 0;
          pollWaitMs = takeBundle(reconciler, answer.body, log) ?? pollWaitMs;
          continue;
        }
        if (answer.status !== 304) throw refusal('poll for a bundle', answer);
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
    connection.close();
  }
}

/** One round's signal: aborted by the agent's stop or by a wakeup from the watchers. */
interface Round {
  readonly signal: AbortSignal;
  wake(): void;
  /** Takes its listener off the stop signal. */
  end(): void;
}

/**
 * A controller per round, whose listener on the long-lived stop signal is removed at the round's
 * end. Not AbortSignal.any([stop, wakeup]) each round: on Node 20 every combined signal stays
 * among the stop signal's dependants (nodejs/node#55351, #54614), one more per round for ever.
 */
function startRound(stop: AbortSignal): Round {
  const controller = new AbortController();
  const abort = (): void => {
    controller.abort();
  };
  if (stop.aborted) abort();
  else stop.addEventListener('abort', abort, { once: true });
  return {
    signal: controller.signal,
    wake: abort,
    end: () => {
      stop.removeEventListener('abort', abort);
    },
  };
}

/**
 * Runs the engine's watchers until `signal` aborts, and starts them again with backoff when they
 * fail (a monitor died): without them drift is repaired only at each round, minutes apart.
 */
async function keepWatching<P extends PreparedGeneration>(input: {
  readonly engine: HostEngine<P>;
  readonly signal: AbortSignal;
  readonly clock: AgentClock;
  readonly random: () => number;
  readonly backoff: BackoffPolicy;
  readonly log: (line: string) => void;
  readonly metrics?: AgentMetrics;
  readonly onPass: (pass: ResidentPass) => void;
}): Promise<void> {
  const { engine, signal, clock, backoff, log } = input;
  if (engine.watch === undefined) return;
  let failures = 0;
  let restarts = 0;
  while (!signal.aborted) {
    const started = clock.now();
    try {
      // Resolves when stopped, or at once when the host's backend cannot watch.
      await engine.watch({ signal, log, onPass: input.onPass });
      return;
    } catch (error) {
      if (isAborted(signal)) return;
      // Watchers that ran longer than the cap were healthy: count failures afresh.
      if (clock.now() - started >= backoff.capMs) failures = 0;
      failures += 1;
      restarts += 1;
      const delay = backoffDelay(failures, backoff, input.random);
      input.metrics?.recordWatcherRestart();
      log(
        `warning: the watchers stopped: ${(error as Error).message}; starting them again in ${(delay / 1000).toFixed(1)} s (restart ${restarts}); drift is repaired at each round meanwhile`,
      );
      await clock.sleep(delay, signal);
    }
  }
}

async function enroll<P extends PreparedGeneration>(options: AgentOptions<P>): Promise<Enrollment> {
  let text: string;
  try {
    text = readFileSync(options.tokenFile, 'utf8');
  } catch (error) {
    throw new EgressguardError(
      'usage',
      `Cannot read the bootstrap token "${options.tokenFile}": ${(error as Error).message}`,
    );
  }
  const token = parseBootstrapToken(text);
  if (token === undefined) {
    throw new EgressguardError(
      'usage',
      `Cannot use the bootstrap token in "${options.tokenFile}": it is not an egressguard token (egb1.…)`,
      {
        hint: 'mint one with `egressguard fleet token create`',
      },
    );
  }
  const serverUrl = options.serverUrl.replace(/\/+$/, '');
  const https = serverUrl.startsWith('https:');
  if (https && token.caPin === null) {
    throw new EgressguardError(
      'usage',
      `Cannot enroll with "${serverUrl}": the bootstrap token carries no CA pin (it was minted by a plain-HTTP controller)`,
    );
  }
  const caPem = https && token.caPin !== null ? await fetchPinnedCa(serverUrl, token.caPin) : null;
  const connection = connectController(serverUrl, caPem);
  try {
    const facts = await options.engine.readFacts();
    const answer = await connection.request('POST', '/v1/enroll', {
      body: {
        token: text.trim(),
        hostname: options.hostname,
        agentVersion: options.agentVersion,
        facts,
      },
    });
    if (answer.status !== 200) throw refusal('enroll', answer);
    const enrolled = enrollResponseSchema.parse(answer.body);
    const enrollment: Enrollment = {
      serverUrl,
      hostId: enrolled.hostId,
      hostName: enrolled.hostName,
      credential: enrolled.credential,
      credentialIssuedAt: (options.clock ?? systemAgentClock).now(),
      caPem,
    };
    options.stateDir.write(ENROLLMENT_FILE, `${JSON.stringify(enrollment, null, 2)}\n`);
    return enrollment;
  } finally {
    connection.close();
  }
}

async function rotate(
  connection: ControllerConnection,
  enrollment: Enrollment,
  stateDir: StateDir,
  clock: Clock,
): Promise<Enrollment> {
  const answer = await connection.request('POST', '/v1/credential/rotate', {
    token: enrollment.credential,
  });
  if (answer.status !== 200) throw refusal('rotate the credential', answer);
  const next = {
    ...enrollment,
    credential: rotateResponseSchema.parse(answer.body).credential,
    credentialIssuedAt: clock.now(),
  };
  // Written before first use: the controller retires the old credential only when the new one is used.
  stateDir.write(ENROLLMENT_FILE, `${JSON.stringify(next, null, 2)}\n`);
  return next;
}

function readEnrollment(stateDir: StateDir): Enrollment | undefined {
  const text = stateDir.read(ENROLLMENT_FILE);
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text) as Enrollment;
  } catch (error) {
    throw new EgressguardError(
      'state-corrupt',
      `Cannot read "${stateDir.file(ENROLLMENT_FILE)}": ${(error as Error).message}`,
      {
        hint: 'remove it and enroll again with a new bootstrap token',
      },
    );
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

/** A controller's answer that is not what was asked for: its status and when to ask again. */
class ControllerRefusal extends EgressguardError {
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

function refusal(action: string, answer: ControllerAnswer): ControllerRefusal {
  return new ControllerRefusal(action, answer);
}

/** A refusal that may end by itself: the controller busy (429) or failing (5xx). */
function isRetriable(error: unknown): boolean {
  return error instanceof ControllerRefusal && (error.status === 429 || error.status >= 500);
}

/**
 * How long to wait after failure number `failures`: the controller's `Retry-After` at least, plus
 * the agent's own full-jitter backoff, so a fleet told the same delay does not return at once.
 */
function retryDelay(
  error: unknown,
  failures: number,
  backoff: BackoffPolicy,
  random: () => number,
): number {
  const floor = error instanceof ControllerRefusal ? error.retryAfterMs : 0;
  return floor + backoffDelay(failures, backoff, random);
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

/** Read through a call: TypeScript would narrow `signal.aborted` to false inside the loop. */
function isAborted(signal: AbortSignal): boolean {
  return signal.aborted;
}
