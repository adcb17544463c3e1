import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRunner } from '../../src/runner/index.js';
import { REPO, runCli } from '../e2e-cli/run-cli.js';

// The container-host example limits class backup-agent to hosts labelled role=container-host.
const POLICY = join(REPO, 'testdata/policies/valid/linux-container-host/policy.yaml');
const ns = `egtest-labels-${randomBytes(4).toString('hex')}`;
const root = createRunner();
const dir = mkdtempSync(join(tmpdir(), 'eg-labels-'));

describe('host labels on a live host', () => {
  beforeAll(async () => {
    await root.run(['ip', 'netns', 'add', ns], { effect: 'change' });
    await root.run(
      ['ip', '-n', ns, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0p'],
      {
        effect: 'change',
      },
    );
  });
  afterAll(async () => {
    await root.run(['ip', 'netns', 'delete', ns], { effect: 'change', allowFailure: true });
    rmSync(dir, { recursive: true, force: true });
  });

  const compileLive = (labelsFile: string) =>
    runCli(['plan', POLICY, '--netns', ns, '--state-dir', join(dir, 'state'), '--json'], {
      env: { EGRESSGUARD_LABELS_FILE: labelsFile, EGRESSGUARD_ROOTNS_GUARD: '1' },
    });

  it('warns that a labelled class is not enforced when the host lacks its labels', async () => {
    const result = await compileLive(join(dir, 'absent'));
    expect(result.stderr).toContain(
      'warning: class "backup-agent" is not enforced on this host: it needs labels role=container-host',
    );
  });

  it('enforces it when the labels file carries them', async () => {
    const file = join(dir, 'labels');
    writeFileSync(file, '# set by the fleet\nrole = container-host\n');
    const result = await compileLive(file);
    expect(result.stderr).not.toContain('backup-agent');
    const facts = await runCli(['facts', '--netns', ns, '--json'], {
      env: { EGRESSGUARD_LABELS_FILE: file },
    });
    expect(JSON.parse(facts.stdout)).toMatchObject({ labels: { role: 'container-host' } });
  });

  it('rejects a malformed labels file with its path and line', async () => {
    const file = join(dir, 'bad-labels');
    writeFileSync(file, 'role container-host\n');
    const result = await compileLive(file);
    expect(result.exitCode).toBe(2);
    expect(result.stdout).toContain(`Cannot parse label \\"role container-host\\" in ${file}:1`);
  });
});
