import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import type { HostView, RolloutView } from '../../src/fleet/index.js';
import { REPO, runCli } from '../e2e-cli/run-cli.js';
import { createScratch, startTestAgent, waitFor, type TestAgent } from './support/fleet-lab.js';
import { startPostgresCluster, type PostgresCluster } from './support/postgres-cluster.js';
import { freePort, startServerProcess, type ServerProcess } from './support/server-process.js';

const POLICY = join(REPO, 'testdata/policies/valid/linux-vpn-gateway/policy.yaml');

/** The built CLI end to end: `egressguard server` killed mid-rollout and started again. */
describe.each(['sqlite', 'postgres'] as const)('controller restart on %s (built CLI)', (kind) => {
  const scratch = createScratch();
  let cluster: PostgresCluster | undefined;
  const agents: TestAgent[] = [];
  const servers: ServerProcess[] = [];

  beforeAll(async () => {
    if (kind === 'postgres') cluster = await startPostgresCluster();
  });
  afterEach(async () => {
    await Promise.all(agents.splice(0).map((a) => a.stop()));
    for (const server of servers.splice(0)) {
      server.kill();
      await server.exited;
    }
  });
  afterAll(async () => {
    await cluster?.stop();
    scratch.cleanup();
  });

  it(
    'resumes a rollout after the controller was killed in the middle of it; no status is lost, agents keep enforcing',
    { timeout: 300_000 },
    async () => {
      const store =
        cluster === undefined
          ? `sqlite:${join(scratch.dir('db'), 'fleet.db')}`
          : await cluster.createDatabase();
      const stateDir = scratch.dir('server');
      const port = await freePort();
      const url = `https://127.0.0.1:${port}`;
      const start = async (): Promise<ServerProcess> => {
        const handle = await startServerProcess({ store, stateDir, port });
        servers.push(handle);
        return handle;
      };
      const fleet = async (
        ...args: string[]
      ): Promise<{ exitCode: number; stdout: string; stderr: string }> =>
        runCli(['fleet', ...args, '--server', url, '--state-dir', stateDir]);
      const statusJson = async (): Promise<{ hosts: HostView[]; rollouts: RolloutView[] }> =>
        JSON.parse((await fleet('status', '--json')).stdout) as {
          hosts: HostView[];
          rollouts: RolloutView[];
        };

      let server = await start();
      const tokenFile = join(stateDir, 'bootstrap.token');
      expect((await fleet('token', 'create', '--uses', '3', '--out', tokenFile)).exitCode).toBe(0);
      const { readFileSync } = await import('node:fs');
      const token = readFileSync(tokenFile, 'utf8').trim();
      const root = scratch.dir('agents');
      for (const name of ['r1', 'r2', 'r3'])
        agents.push(startTestAgent({ serverUrl: url, token, name, root }));
      await waitFor('three hosts', async () =>
        (await statusJson()).hosts.length === 3 ? true : undefined,
      );
      // No policy yet: not Ready, so status exits 1.
      expect((await fleet('status')).exitCode).toBe(1);

      // Wave 1's host is kept inside its apply until the controller is gone, so the rollout is
      // in flight at the kill however slow the machine (with a short bake the wave could start
      // and finish between two looks at the status, each seconds under load).
      const holds = new Map(agents.map((a) => [a.name, a.engine.holdApplies()]));
      onTestFinished(() => {
        for (const release of holds.values()) release();
      });
      const pushed = await fleet(
        'push',
        POLICY,
        '--canary',
        '1',
        '--max-unavailable',
        '1',
        '--bake',
        '1s',
        '--json',
      );
      expect(pushed.exitCode).toBe(0);
      const { rolloutId } = JSON.parse(pushed.stdout) as { rolloutId: string };
      const plan = (await statusJson()).rollouts.find((r) => r.id === rolloutId);
      const heldHost = plan?.waves[1]?.hosts[0];
      if (heldHost === undefined) throw new Error(`no host in wave 1: ${JSON.stringify(plan)}`);
      for (const [name, release] of holds) if (name !== heldHost) release();
      // Hang bounds, not timings: each look runs the CLI (seconds each at a load of 15).
      await waitFor(
        'wave 1 to start',
        async () => {
          const rollout = (await statusJson()).rollouts.find((r) => r.id === rolloutId);
          return rollout?.waves[1]?.state === 'progressing' ? true : undefined;
        },
        90_000,
      );
      const before = await statusJson();

      server.kill();
      await server.exited;
      holds.get(heldHost)?.();
      // The agents go on enforcing what they applied while the controller is away.
      const canary = agents.find((a) => a.engine.applies.length > 0);
      expect(canary).toBeDefined();
      await waitFor('an agent to notice the controller is away', () =>
        agents.some((a) => a.log.some((l) => l.includes('Cannot reach controller')))
          ? true
          : undefined,
      );
      expect((await canary?.engine.readStatus())?.hash).toBe(canary?.engine.applies.at(-1)?.hash);

      server = await start();
      await waitFor(
        'the rollout to succeed after the restart',
        async () =>
          (await statusJson()).rollouts.find((r) => r.id === rolloutId)?.state === 'succeeded'
            ? true
            : undefined,
        90_000,
      );
      await waitFor(
        'every host Ready',
        async () => ((await fleet('status')).exitCode === 0 ? true : undefined),
        90_000,
      );
      const after = await statusJson();
      // Nothing recorded before the kill was lost: enrollment times, the canary's hashes and history.
      for (const host of before.hosts) {
        const now = after.hosts.find((h) => h.name === host.name);
        expect(now?.enrolledAt).toBe(host.enrolledAt);
        if (host.appliedHash !== null) expect(now?.appliedHash).toBe(host.appliedHash);
      }
      const events = JSON.parse(
        (
          await runCli([
            'fleet',
            'rollout',
            'status',
            rolloutId,
            '--json',
            '--server',
            url,
            '--state-dir',
            stateDir,
          ])
        ).stdout,
      ) as RolloutView[];
      expect(events[0]?.waves.map((w) => w.state)).toEqual(['succeeded', 'succeeded', 'succeeded']);
      const audit = await fleet('audit', '--json');
      expect((JSON.parse(audit.stdout) as { action: string }[]).map((e) => e.action)).toEqual([
        'token.create',
        'host.enroll',
        'host.enroll',
        'host.enroll',
        'policy.push',
      ]);
    },
  );
});

describe('fleet CLI usage', () => {
  it('explains itself with examples and exit codes', async () => {
    const help = await runCli(['fleet', '--help']);
    expect(help.exitCode).toBe(0);
    expect(help.stdout).toMatch(/Examples:\n {2}egressguard fleet token create/);
    expect(help.stdout).toMatch(/Exit codes:/);
    for (const command of [
      'push',
      'status',
      'retry',
      'force',
      'suspend',
      'resume',
      'rollback',
      'decommission',
      'rollout',
      'token',
      'credential',
    ]) {
      expect(help.stdout).toContain(`  ${command} `);
    }
    expect((await runCli(['server', '--help'])).stdout).toMatch(/Examples:/);
    expect((await runCli(['agent', '--help'])).stdout).toMatch(/Examples:/);
  });

  it('says which controller it cannot reach, with exit code 2', async () => {
    const dir = createScratch();
    try {
      const stateDir = dir.dir('empty');
      const { writeFileSync } = await import('node:fs');
      writeFileSync(join(stateDir, 'operator.token'), 'ego1.a-token-long-enough-for-the-check\n');
      writeFileSync(join(stateDir, 'ca.pem'), '');
      const port = await freePort();
      const result = await runCli([
        'fleet',
        'status',
        '--server',
        `https://127.0.0.1:${port}`,
        '--state-dir',
        stateDir,
      ]);
      expect(result.exitCode).toBe(2);
      expect(result.stderr).toMatch(
        new RegExp(`Cannot reach controller "https://127.0.0.1:${port}": ECONNREFUSED`),
      );
      const noToken = await runCli(['fleet', 'status', '--state-dir', dir.dir('none')]);
      expect(noToken.exitCode).toBe(2);
      expect(noToken.stderr).toMatch(/Cannot find an operator token/);
    } finally {
      dir.cleanup();
    }
  });

  it('refuses plain HTTP off loopback, and an agent engine it does not have', async () => {
    const http = await runCli([
      'server',
      '--insecure-http',
      '--listen',
      '0.0.0.0:0',
      '--store',
      'sqlite::memory:',
      '--state-dir',
      '/nonexistent',
    ]);
    expect(http.exitCode).toBe(2);
    expect(http.stderr).toMatch(/Cannot serve plain HTTP on "0.0.0.0": only on a loopback address/);
    const agent = await runCli([
      'agent',
      '--server',
      'https://127.0.0.1:1',
      '--token-file',
      '/nonexistent',
      '--engine',
      'nonsense',
    ]);
    expect(agent.exitCode).toBe(2);
    expect(agent.stderr).toMatch(/Cannot use --engine "nonsense"/);
  });
});
