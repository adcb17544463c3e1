import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, describe, expect, it } from 'vitest';
import { REPO } from '../e2e-cli/run-cli.js';

const DEMO = join(REPO, 'scripts/fleet-demo.sh');

/** A listener on a port the OS picked: a free port while open, a taken one for the controller. */
function listen(): Promise<{ server: Server; port: number }> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      resolve({ server, port: typeof address === 'object' && address !== null ? address.port : 0 });
    });
  });
}

async function namespacesOf(output: string): Promise<{ named: string[]; left: string[] }> {
  const named = [...output.matchAll(/^host (egdemo-[ab]-[0-9a-f]+):/gm)].map((m) => m[1] ?? '');
  const list = (await execa('ip', ['netns', 'list'])).stdout;
  return { named, left: named.filter((ns) => list.includes(ns)) };
}

// The README's fleet demo, as a user runs it: it installs and builds what it lacks (npm test has
// built the bundle, and scripts/test.sh's setup the addon, so here it only checks), then shows a
// canary rollout and a repaired drift, and removes what it made.
describe('scripts/fleet-demo.sh', () => {
  const held: Server[] = [];
  afterAll(() => {
    for (const server of held) server.close();
  });

  it('rolls a policy out to two agents, repairs a deleted table, and cleans up', async () => {
    const { server, port } = await listen();
    await new Promise<void>((resolve) =>
      server.close(() => {
        resolve();
      }),
    );
    const run = await execa('bash', [DEMO], {
      env: { EGRESSGUARD_DEMO_PORT: String(port), NO_COLOR: '1' },
      all: true,
      reject: false,
    });
    expect(run.exitCode, run.all).toBe(0);
    expect(run.all).toMatch(/^egressguard server listening on https:\/\/127\.0\.0\.1:\d+/m);
    expect(run.all).toContain('2 hosts, 2 Ready');
    // The watchers repaired it; a round that read the table while it was gone applies once more,
    // and the report then names the round's repair and counts the watchers' as earlier.
    expect(run.all).toMatch(
      /drift-repaired: (repaired .*table was deleted|.*\(and \d+ earlier: \d+ of the table)/,
    );
    const { named, left } = await namespacesOf(run.all);
    expect(named).toHaveLength(2);
    expect(left).toEqual([]);
  }, 900_000);

  it("stops at once with the controller's own error when the controller exits", async () => {
    const { server, port } = await listen();
    held.push(server); // the controller cannot listen there: it exits with EADDRINUSE
    const run = await execa('bash', [DEMO], {
      env: { EGRESSGUARD_DEMO_PORT: String(port), NO_COLOR: '1' },
      all: true,
      reject: false,
    });
    expect(run.exitCode).toBe(1);
    expect(run.all).toContain(
      'fleet-demo: the controller exited while waiting for controller listening; its log:',
    );
    expect(run.all).toContain(`error: Cannot listen on "127.0.0.1:${port}": listen EADDRINUSE`);
    expect(run.all).not.toContain('== 3.');
    const { named, left } = await namespacesOf(run.all);
    expect(named).toHaveLength(2);
    expect(left).toEqual([]);
  }, 900_000);
});
