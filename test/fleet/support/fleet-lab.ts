import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  createBundleHasher,
  createRecordingEngine,
  runAgent,
  type AgentEnd,
  type RecordingEngine,
} from '../../../src/agent/index.js';
import { createRandom, packagePath } from '../../../src/core/index.js';
import { parseHostFacts, type HostFacts } from '../../../src/facts/index.js';
import { createPolicyDocumentBinder, type HostView } from '../../../src/fleet/index.js';
import { startServer, type RunningServer, type ServerOptions } from '../../../src/server/index.js';
import { StateDir } from '../../../src/state/index.js';

export const POLICY_V1 = readFileSync(
  packagePath('testdata/policies/valid/linux-vpn-gateway/policy.yaml'),
  'utf8',
);
/** The same policy, changed: another hash for every host, the agent binary unchanged. */
export function policyVariant(marker: string): string {
  return `${POLICY_V1}\n# ${marker}\n`;
}

const BASE_FACTS = readFileSync(
  packagePath('testdata/policies/valid/linux-vpn-gateway/facts.json'),
  'utf8',
);

export function factsFor(name: string): HostFacts {
  return parseHostFacts({ ...(JSON.parse(BASE_FACTS) as object), hostname: name }, name);
}

/** Temp directories the suite removes when it ends. */
export function createScratch(): { dir(prefix: string): string; cleanup(): void } {
  const dirs: string[] = [];
  return {
    dir: (prefix) => {
      const dir = mkdtempSync(join(tmpdir(), `egressguard-${prefix}-`));
      dirs.push(dir);
      return dir;
    },
    cleanup: () => {
      for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A controller replica on loopback with short intervals (a test must not wait 30 s polls). */
export function startTestServer(
  options: Partial<ServerOptions> & { store: string; stateDir: string },
): Promise<RunningServer> {
  return startServer({
    // Protocol tests: the recording agents take policy documents (the server's own binder
    // compiles host-IR bundles for the firewall engine; test/fleet/incident.test.ts runs that).
    binder: createPolicyDocumentBinder(),
    listen: '127.0.0.1:0',
    pollIntervalMs: 2_000,
    graceMs: 4_000,
    tickMs: 100,
    log: () => undefined,
    ...options,
  });
}

export interface TestAgent {
  readonly name: string;
  readonly engine: RecordingEngine;
  readonly outcome: Promise<AgentEnd>;
  readonly log: string[];
  /** How the agent ended before it was stopped (its end, or the error it threw); undefined while it runs. */
  readonly ended: string | undefined;
  stop(): Promise<void>;
}

/**
 * The real agent (enrollment, CA pinning, long poll, reports) in this process, with the recording
 * engine (the test says so: nothing is applied; test/fleet/incident.test.ts applies for real).
 */
export function startTestAgent(options: {
  serverUrl: string;
  token: string;
  name: string;
  root: string;
  seed?: number;
  /** The agent's own reconnect backoff (1 s doubling to 60 s), not the test's short one. */
  agentBackoff?: boolean;
}): TestAgent {
  const tokenFile = join(options.root, `${options.name}.token`);
  writeFileSync(tokenFile, `${options.token}\n`, { mode: 0o600 });
  const engine = createRecordingEngine({
    facts: factsFor(options.name),
    // Policy documents (the protocol tests' binder) or host-IR bundles (the server's own).
    hashBundle: createBundleHasher(),
  });
  const controller = new AbortController();
  const log: string[] = [];
  const outcome = runAgent({
    serverUrl: options.serverUrl,
    tokenFile,
    stateDir: new StateDir({ root: join(options.root, options.name) }),
    engine,
    hostname: options.name,
    agentVersion: 'test',
    signal: controller.signal,
    random: createRandom(options.seed ?? options.name.length),
    startJitterMs: 50,
    pollJitterMs: 50,
    backoff: { baseMs: 200, capMs: 2_000 },
    ...(options.agentBackoff === true ? {} : { connectBackoff: { baseMs: 100, capMs: 1_000 } }),
    log: (line) => log.push(line),
  });
  let ended: string | undefined;
  outcome.then(
    (end) => {
      if (!controller.signal.aborted) ended = end;
    },
    (error: unknown) => {
      if (controller.signal.aborted) return; // stop() takes it, as before
      ended = `threw: ${error instanceof Error ? error.message : String(error)}`;
      // Still unhandled, as before: a test that does not look at `ended` hears of it too.
      throw error;
    },
  );
  return {
    name: options.name,
    engine,
    outcome,
    log,
    get ended() {
      return ended;
    },
    stop: async () => {
      controller.abort();
      await outcome.catch(() => undefined);
    },
  };
}

/** Polls until `probe` returns a value; fails with `what` after a generous bound. */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined> | T | undefined,
  timeoutMs = 30_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: Error | undefined;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (error) {
      last = error instanceof Error ? error : new Error(String(error));
    }
    if (Date.now() > deadline) {
      throw new Error(
        `Timed out after ${timeoutMs} ms waiting for ${what}${last === undefined ? '' : `: ${last.message}`}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

export function condition(host: HostView, type: string): { status: string; reason: string } {
  const found = host.conditions.find((c) => c.type === type);
  return { status: found?.status ?? 'missing', reason: found?.reason ?? 'missing' };
}

/** Waits until every named host reports `hash` applied and live. */
export async function waitForConverged(
  server: RunningServer,
  names: readonly string[],
  hash?: string,
): Promise<HostView[]> {
  return waitFor(`hosts ${names.join(', ')} to converge`, async () => {
    const hosts = (await server.controller.listHosts()).filter((h) => names.includes(h.name));
    const done =
      hosts.length === names.length &&
      hosts.every(
        (h) =>
          h.desiredHash !== null &&
          (hash === undefined || h.desiredHash === hash) &&
          h.appliedHash === h.desiredHash &&
          h.liveHash === h.desiredHash,
      );
    return done ? hosts : undefined;
  });
}
