import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore } from '../../src/fleet/index.js';
import { REPO, runCli } from '../e2e-cli/run-cli.js';
import { createScratch } from './support/fleet-lab.js';
import { freePort, startServerProcess, type ServerProcess } from './support/server-process.js';

const CONTAINER_HOST = join(REPO, 'testdata/policies/valid/linux-container-host/policy.yaml');

/** A controller never opens a path a pushed policy names (built CLI, a server process of its own). */
describe('policy list files and the controller (built CLI)', () => {
  const scratch = createScratch();
  let server: ServerProcess;
  let stateDir: string;
  let store: string;

  beforeAll(async () => {
    stateDir = scratch.dir('server');
    store = `sqlite:${join(scratch.dir('db'), 'fleet.db')}`;
    server = await startServerProcess({ store, stateDir, port: await freePort() });
  });
  afterAll(async () => {
    server.kill();
    await server.exited;
    scratch.cleanup();
  });

  const operator = (): string => readFileSync(join(stateDir, 'operator.token'), 'utf8').trim();

  it('refuses a pushed policy that names list files, opening none: nothing of /etc/shadow or /etc/hostname is quoted, and a FIFO freezes nothing', async () => {
    const fifo = join(scratch.dir('fifo'), 'list');
    await execa('mkfifo', [fifo]);
    const policy = readFileSync(CONTAINER_HOST, 'utf8').replace(
      'files: [mirrors.txt]',
      `files: [/etc/shadow, ../../etc/hostname, ${fifo}]`,
    );
    const answer = await server.request('POST', '/v1/pushes', {
      token: operator(),
      body: { policy, source: 'policy.yaml' },
    });
    expect(answer.status).toBe(422);
    const issues = (answer.body as { error: { issues: { path: string; message: string }[] } }).error
      .issues;
    expect(issues.map((i) => i.path)).toEqual(
      expect.arrayContaining([
        'networks.mirrors.files[0]',
        'networks.mirrors.files[1]',
        'networks.mirrors.files[2]',
      ]),
    );
    for (const issue of issues.filter((i) => i.path.startsWith('networks.mirrors.files'))) {
      expect(issue.message).toMatch(/is not read here: a controller never opens a path/);
    }
    const body = JSON.stringify(answer.body);
    expect(body).not.toContain(readFileSync('/etc/hostname', 'utf8').trim());
    expect(body).not.toMatch(/root:/);
    expect((await server.request('GET', '/healthz')).status).toBe(200);
    expect(server.running()).toBe(true);
  });

  it('fleet push reads the list files on the operator’s side and sends their prefixes: the controller stores no files: at all', async () => {
    const pushed = await runCli([
      'fleet',
      'push',
      CONTAINER_HOST,
      '--server',
      server.url,
      '--state-dir',
      stateDir,
      '--json',
    ]);
    expect(pushed.stderr).toBe('');
    expect(pushed.exitCode).toBe(0);
    const db = await openStore(store);
    try {
      const [stored] = await db.db.selectFrom('pushes').select('policy_text').execute();
      expect(stored?.policy_text).not.toMatch(/files:/);
      // A line of mirrors.txt and one of blocklist.txt, now in the policy itself.
      expect(stored?.policy_text).toContain('203.0.113.64/27');
      expect(stored?.policy_text).toContain('2001:db8:bad::/48');
    } finally {
      await db.close();
    }
  });

  it('fleet push offers no option only a host sets', async () => {
    const help = await runCli(['fleet', 'push', '--help']);
    expect(help.stdout).toContain('--rule-priority');
    const offered = [...help.stdout.matchAll(/^ {2}(--[a-z-]+)/gm)].map((m) => m[1]);
    expect(offered).toContain('--anchor');
    for (const flag of ['--pfctl', '--pf-conf', '--pf-token-file', '--pf-attach'])
      expect(offered).not.toContain(flag);
  });
});
