import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
// The pfctl MODEL's host and state file (pf cannot run here): test support, not the backend seam.
import { createMacosPfHost } from '../../sim/pf/create-macos-pf-host.js';
import { writePfctlModelState } from '../../sim/pf/pfctl-model-store.js';
import { DEFAULT_ANCHOR } from '../../src/backends/pf/index.js';
import { createHostIrBinder, type HostView } from '../../src/fleet/index.js';
import { createRunner } from '../../src/runner/index.js';
import type { RunningServer } from '../../src/server/index.js';
import { REPO } from '../e2e-cli/run-cli.js';
import { condition, createScratch, startTestServer, waitFor } from './support/fleet-lab.js';
import { startPostgresCluster, type PostgresCluster } from './support/postgres-cluster.js';

// DESIGN.md §1A as a test: a fleet's drift loop retried to a cap, then switched itself off, and
// keyed drift on the agent binary's hash, so hosts were fixed by hand. Here three real agent
// processes (the built CLI, `egressguard agent`, default firewall engine), each in its own network
// namespace with real nftables and policy routing, and a fourth on the pf backend against the
// pfctl MODEL (src/backends/pf/pfctl-model.ts: pf cannot run here), its facts those of a macOS
// runner, against a controller on SQLite and on a real PostgreSQL. Every namespace is created with
// a unique name and deleted, also on failure.

const POLICY = `apiVersion: egressguard/v1
kind: Policy
metadata:
  name: fleet-incident
interfaces:
  uplink: default-route
  tunnels:
    tun0: { description: the VPN tunnel }
classes:
  vms:
    hosts: { labels: { platform: linux } }
    ingress: [vwl0]
    sources: [10.10.0.0/24]
    via: tun0
    killSwitch: {}
    rules:
      - { id: vms-deny-metadata, action: deny, to: 169.254.169.254 }
    default: allow
  runners:
    hosts: { labels: { platform: macos } }
    ingress: [bridge100]
    sources: [192.168.64.0/22]
    via: uplink
    nat: masquerade
    rules:
      - { id: runners-deny-metadata, action: deny, to: 169.254.169.254 }
    default: allow
`;
/** A second class arriving on "ci0", which host "c" does not have. */
const POLICY_WITH_CI = `${POLICY}  ci:
    hosts: { labels: { platform: linux } }
    ingress: [ci0]
    sources: [10.20.0.0/24]
    via: uplink
    default: allow
`;
/** The same class selected by a prefix: it binds on every host, "c" included. */
const POLICY_CI_FIXED = POLICY_WITH_CI.replace('ingress: [ci0]', 'ingress: [ci*]');

/** The steering priority the policy's routing rule takes by default, and the one that fixes it. */
const DEFAULT_PRIORITY = '7350';
const FIXED_PRIORITY = '7400';
const ROLLOUT = { canary: 0, maxUnavailable: 10, bakeMs: 0, maxFailures: 10 };

const root = createRunner();
const suffix = randomBytes(3).toString('hex');

interface AgentProcess {
  readonly name: string;
  readonly ns: string;
  readonly child: ChildProcess;
  readonly log: string[];
}

async function createHostNamespace(ns: string, index: number, withCi: boolean): Promise<void> {
  await root.run(['ip', 'netns', 'add', ns], { effect: 'change' });
  const inNs = (argv: string[]) => root.run(['ip', '-n', ns, ...argv], { effect: 'change' });
  await inNs(['link', 'set', 'lo', 'up']);
  // The kernel here has no dummy links: every interface is one end of a veth pair.
  const links: [string, string][] = [
    ['eth0', `198.51.100.${10 + index}/24`],
    ['tun0', '10.200.0.2/32'],
    ['vwl0', '10.10.0.1/24'],
    ...(withCi ? ([['ci0', '10.20.0.1/24']] as [string, string][]) : []),
  ];
  for (const [name, address] of links) {
    await inNs(['link', 'add', name, 'type', 'veth', 'peer', 'name', `${name}p`]);
    await inNs(['address', 'add', address, 'dev', name]);
    await inNs(['link', 'set', name, 'up']);
    await inNs(['link', 'set', `${name}p`, 'up']);
  }
  await inNs(['route', 'add', 'default', 'via', '198.51.100.1', 'dev', 'eth0']);
}

/** Read through a call: the exit code changes while we wait. */
function isRunning(child: ChildProcess): boolean {
  return child.exitCode === null && child.signalCode === null;
}

function nft(ns: string, argv: string[]) {
  return createRunner({ netns: ns }).run(['nft', ...argv], {
    effect: argv[0] === 'list' ? 'read' : 'change',
    allowFailure: true,
  });
}

describe.each(['sqlite', 'postgres'] as const)(
  'the incident with real agent processes in namespaces (%s)',
  (kind) => {
    const scratch = createScratch();
    let cluster: PostgresCluster | undefined;
    let running: RunningServer | undefined;
    const server = {
      get controller() {
        if (running === undefined) throw new Error('the controller did not start');
        return running.controller;
      },
    };
    const agents: AgentProcess[] = [];
    const namespaces = ['a', 'b', 'c'].map(
      (h) => `egtest-fleet-${kind.slice(0, 2)}-${h}-${suffix}`,
    );
    const linuxNames = ['host-a', 'host-b', 'host-c'];
    const names = [...linuxNames, 'host-mac'];
    let pfState = '';

    const hosts = async (): Promise<Map<string, HostView>> =>
      new Map((await server.controller.listHosts()).map((h) => [h.name, h]));
    const push = async (text: string, options: Record<string, string> = {}) => {
      const result = await server.controller.push(
        { text, source: 'incident.yaml', rollout: ROLLOUT, options },
        'test',
      );
      if (!result.ok) throw new Error(result.issues.map((i) => i.message).join('; '));
      return result;
    };
    /** Runs one command line against the pfctl model of host-mac, as its agent's pfctl does. */
    const pfctlModel = (argv: string[]): string =>
      execFileSync(join(REPO, 'sim/pf/macos-tools/pfctl'), argv, {
        env: { ...process.env, EGRESSGUARD_PFCTL_MODEL_STATE: pfState },
        encoding: 'utf8',
      });
    /** What the hosts and their agents say, for a failure message. */
    const explain = async (error: unknown): Promise<never> => {
      const all = [...(await hosts()).values()].map((h) => ({
        name: h.name,
        desired: h.desiredHash?.slice(0, 12),
        applied: h.appliedHash?.slice(0, 12),
        live: h.liveHash?.slice(0, 12),
        failures: h.failures,
        conditions: h.conditions.map((c) => `${c.type}=${c.status}:${c.reason}:${c.message}`),
      }));
      const logs = agents.map((a) => `--- ${a.name}\n${a.log.join('').slice(-3000)}`).join('\n');
      throw new Error(`${(error as Error).message}\n${JSON.stringify(all, null, 2)}\n${logs}`);
    };
    /** Waits until these hosts run the newest push's hash, applied and read back. */
    const waitConverged = (which: readonly string[], pushId: string) =>
      waitFor(
        `${which.join(', ')} to converge on ${pushId}`,
        async () => {
          const all = await hosts();
          const done = which.every((name) => {
            const h = all.get(name);
            return (
              h !== undefined &&
              h.desiredPushId === pushId &&
              h.desiredHash !== null &&
              h.appliedHash === h.desiredHash &&
              h.liveHash === h.desiredHash &&
              condition(h, 'Ready').status === 'True'
            );
          });
          return done ? all : undefined;
        },
        // Generous: every pfctl call of host-mac is a process of the model's shim, seconds
        // each on a loaded machine, and one apply makes a dozen.
        300_000,
      ).catch(explain);

    beforeAll(async () => {
      if (kind === 'postgres') cluster = await startPostgresCluster();
      const dir = scratch.dir(`incident-${kind}`);
      const store =
        cluster === undefined ? `sqlite:${join(dir, 'fleet.db')}` : await cluster.createDatabase();
      running = await startTestServer({
        store,
        stateDir: join(dir, 'server'),
        // The server's own binder: host-IR bundles that the firewall engine compiles.
        binder: createHostIrBinder(),
        // A real agent's round runs processes in its namespace; on a loaded machine a check-in
        // can take seconds. Silence is not what this test is about.
        graceMs: 60_000,
      });
      for (const [i, ns] of namespaces.entries()) await createHostNamespace(ns, i, i !== 2);
      // Host b: something else owns the routing rule priority the policy steers with.
      await root.run(
        [
          'ip',
          '-n',
          namespaces[1] ?? '',
          'rule',
          'add',
          'from',
          '192.0.2.0/24',
          'lookup',
          '100',
          'priority',
          DEFAULT_PRIORITY,
        ],
        { effect: 'change' },
      );
      const { token } = await server.controller.createBootstrapToken(
        { ttlMs: 3_600_000, uses: 4 },
        'test',
      );
      const labels = join(dir, 'linux.labels');
      writeFileSync(labels, 'platform = linux\n');
      const start = (name: string, ns: string | undefined, extra: string[], env = {}): void => {
        const tokenFile = join(dir, `${name}.token`);
        writeFileSync(tokenFile, `${token}\n`, { mode: 0o600 });
        const child = spawn(
          process.execPath,
          [
            join(REPO, 'bin/egressguard.js'),
            'agent',
            '--server',
            running?.url ?? '',
            '--token-file',
            tokenFile,
            ...(ns === undefined ? [] : ['--netns', ns]),
            '--state-dir',
            join(dir, 'agents', name),
            '--hostname',
            name,
            '--retry-base',
            '200ms',
            '--retry-cap',
            '2s',
            '--start-jitter',
            '0s',
            ...extra,
          ],
          { env: { ...process.env, EGRESSGUARD_ROOTNS_GUARD: '1', NO_COLOR: '1', ...env } },
        );
        const log: string[] = [];
        child.stderr.on('data', (chunk: Buffer) => log.push(chunk.toString()));
        child.stdout.on('data', (chunk: Buffer) => log.push(chunk.toString()));
        agents.push({ name, ns: ns ?? '', child, log });
      };
      for (const [i, ns] of namespaces.entries()) {
        start(linuxNames[i] ?? '', ns, [], { EGRESSGUARD_LABELS_FILE: labels });
      }
      // The macOS runner: its facts from a file, its pfctl the model's shim on a state file.
      pfState = join(dir, 'pfctl-model.json');
      writePfctlModelState(pfState, createMacosPfHost().state);
      const facts = JSON.parse(
        readFileSync(join(REPO, 'testdata/policies/valid/macos-runner-fleet/facts.json'), 'utf8'),
      ) as object;
      const factsFile = join(dir, 'mac-facts.json');
      writeFileSync(
        factsFile,
        JSON.stringify({ ...facts, hostname: 'host-mac', labels: { platform: 'macos' } }),
      );
      start(
        'host-mac',
        undefined,
        [
          '--facts',
          factsFile,
          '--pfctl',
          join(REPO, 'sim/pf/macos-tools/pfctl'),
          '--pf-token-file',
          join(dir, 'pf-token.json'),
        ],
        { EGRESSGUARD_PFCTL_MODEL_STATE: pfState },
      );
      await waitFor(
        'four agents to enroll and report facts',
        async () => {
          const all = await hosts();
          return names.every((n) => all.get(n)?.lastCheckinAt != null) ? true : undefined;
        },
        60_000,
      );
    }, 180_000);

    afterAll(async () => {
      for (const agent of agents) {
        if (isRunning(agent.child)) {
          const exited = new Promise((resolve) => agent.child.once('exit', resolve));
          agent.child.kill('SIGTERM');
          await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 10_000))]);
          if (isRunning(agent.child)) agent.child.kill('SIGKILL');
        }
      }
      for (const ns of namespaces) {
        await root.run(['ip', 'netns', 'delete', ns], { effect: 'change', allowFailure: true });
      }
      await running?.close();
      await cluster?.stop();
      scratch.cleanup();
    }, 60_000);

    it('retries the host whose apply fails for a real reason, Degraded forever with growing backoff, the others Ready; a fixed push converges it with no manual step', async () => {
      const first = await push(POLICY);
      await waitConverged(['host-a', 'host-c', 'host-mac'], first.pushId);
      // Host b refuses: a foreign rule holds the steering priority. Degraded, never Stalled, and
      // the agent keeps trying: attempt numbers keep rising well past any cap of a few retries.
      const failing = await waitFor(
        'host-b to fail its sixth attempt',
        async () => {
          const h = (await hosts()).get('host-b');
          return h?.failures !== null && (h?.failures.count ?? 0) >= 6 ? h : undefined;
        },
        90_000,
      );
      expect(condition(failing, 'Degraded')).toEqual({ status: 'True', reason: 'ApplyFailed' });
      expect(condition(failing, 'Stalled').status).toBe('False');
      expect(failing.failures?.lastError).toContain(
        `rule at priority ${DEFAULT_PRIORITY} (from 192.0.2.0 lookup 100) is not ours`,
      );
      const events = await server.controller.events({ hostName: 'host-b', limit: 100 });
      const attempts = events
        .filter((e) => e.kind === 'apply-failed')
        .map((e) => Number(/attempt (\d+)/.exec(e.message)?.[1]))
        .sort((x, y) => x - y);
      expect(attempts.slice(0, 6)).toEqual([1, 2, 3, 4, 5, 6]);
      // The others are untouched by b's failure.
      const all = await hosts();
      for (const name of ['host-a', 'host-c', 'host-mac']) {
        expect(condition(all.get(name) as HostView, 'Ready').status).toBe('True');
      }
      // The macOS runner's anchor, as the pfctl model holds it, carries the class's rules.
      const anchor = pfctlModel(['-a', DEFAULT_ANCHOR, '-sr']);
      expect(anchor).toContain('runners-deny-metadata');
      const tableA = await nft(namespaces[0] ?? '', ['list', 'table', 'inet', 'egressguard']);
      expect(tableA.exitCode).toBe(0);

      // The fix is a policy-only change (another steering priority); the agent binary is the same.
      const fixed = await push(POLICY, { rulePriority: FIXED_PRIORITY });
      const converged = await waitConverged(names, fixed.pushId);
      expect(converged.get('host-b')?.desiredHash).not.toBe(failing.desiredHash);
      const rules = await root.run(['ip', '-n', namespaces[1] ?? '', 'rule', 'show'], {
        effect: 'read',
      });
      expect(rules.stdout).toMatch(
        new RegExp(`^${FIXED_PRIORITY}:\\s+from 10\\.10\\.0\\.0/24`, 'm'),
      );
      // The foreign rule is still there: the fix moved ours, not theirs.
      expect(rules.stdout).toMatch(
        new RegExp(`^${DEFAULT_PRIORITY}:\\s+from 192\\.0\\.2\\.0/24`, 'm'),
      );
    }, 900_000);

    it('leaves a host Stalled with the reason when a class names an interface it lacks, and a later fixed push re-arms it', async () => {
      const withCi = await push(POLICY_WITH_CI, { rulePriority: FIXED_PRIORITY });
      await waitConverged(['host-a', 'host-b', 'host-mac'], withCi.pushId);
      const stalled = await waitFor('host-c to be Stalled', async () => {
        const h = (await hosts()).get('host-c');
        return h?.desiredPushId === withCi.pushId && condition(h, 'Stalled').status === 'True'
          ? h
          : undefined;
      });
      expect(condition(stalled, 'Stalled').reason).toBe('BundleInvalidForHost');
      const message = stalled.conditions.find((c) => c.type === 'Stalled')?.message ?? '';
      expect(message).toContain('ingress interface "ci0" is not an interface of this host');
      // Stalled is not a verdict on the host: it keeps enforcing what it applied before.
      const tableC = await nft(namespaces[2] ?? '', ['list', 'table', 'inet', 'egressguard']);
      expect(tableC.exitCode).toBe(0);

      const fixed = await push(POLICY_CI_FIXED, { rulePriority: FIXED_PRIORITY });
      const all = await waitConverged(names, fixed.pushId);
      expect(condition(all.get('host-c') as HostView, 'Stalled').status).toBe('False');
    }, 700_000);

    it('detects a deleted live table, repairs it and reports it as drift', async () => {
      const before = (await hosts()).get('host-a') as HostView;
      const deletedAt = Date.now();
      const deleted = await nft(namespaces[0] ?? '', ['delete', 'table', 'inet', 'egressguard']);
      expect(deleted.exitCode).toBe(0);
      const event = await waitFor(
        'host-a to report the drift repaired',
        async () =>
          (await server.controller.events({ hostName: 'host-a', limit: 50 })).find(
            (e) => e.kind === 'drift-repaired' && e.at >= deletedAt,
          ),
        60_000,
      );
      // The agent's watchers (the resident mode's, on nftables) repaired it between polls. A round
      // that read the table while it was gone, before the watchers took the host lock, applies
      // once more: the report then names the round's repair, and counts the watchers' as earlier.
      expect(event.message).toMatch(
        /repaired between polls by the watchers: table was deleted|\(and \d+ earlier: \d+ of the table/,
      );
      const table = await nft(namespaces[0] ?? '', ['list', 'table', 'inet', 'egressguard']);
      expect(table.exitCode).toBe(0);
      expect(table.stdout).toContain(`eg-hash:${before.appliedHash ?? ''}`);
      await waitConverged(['host-a'], before.desiredPushId ?? '');

      // The same on the pf host: its anchor flushed behind the agent's back (in the model).
      const mac = (await hosts()).get('host-mac') as HostView;
      const flushedAt = Date.now();
      pfctlModel(['-a', DEFAULT_ANCHOR, '-F', 'all']);
      expect(pfctlModel(['-a', DEFAULT_ANCHOR, '-sr'])).not.toContain('runners-deny-metadata');
      const macEvent = await waitFor(
        'host-mac to report the drift repaired',
        async () =>
          (await server.controller.events({ hostName: 'host-mac', limit: 50 })).find(
            (e) => e.kind === 'drift-repaired' && e.at >= flushedAt,
          ),
        300_000,
      ).catch(explain);
      // pf has no watcher: a round of the agent found and repaired it.
      expect(macEvent.message).toContain('differed from applied');
      expect(pfctlModel(['-a', DEFAULT_ANCHOR, '-sr'])).toContain('runners-deny-metadata');
      await waitConverged(['host-mac'], mac.desiredPushId ?? '');
    }, 700_000);
  },
);
