import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, describe, expect, it } from 'vitest';
import { REPO, runCli } from './run-cli.js';

describe('systemd units', () => {
  const out = mkdtempSync(join(tmpdir(), 'eg-units-'));
  afterAll(() => {
    rmSync(out, { recursive: true, force: true });
  });

  it('pass systemd-analyze verify, with the boot ordering of DESIGN.md', async () => {
    const policy = join(REPO, 'testdata/policies/valid/linux-vpn-gateway/policy.yaml');
    const result = await runCli(['units', '--policy', policy, '--out', out]);
    expect(result.exitCode).toBe(0);
    const restore = readFileSync(join(out, 'egressguard-restore.service'), 'utf8');
    for (const line of [
      'DefaultDependencies=no',
      'Wants=network-pre.target',
      'Before=network-pre.target shutdown.target',
      'After=local-fs.target systemd-modules-load.service',
    ]) {
      expect(restore).toContain(line);
    }
    expect(readFileSync(join(out, 'egressguard-networkd.conf'), 'utf8')).toContain(
      'ManageForeignRoutingPolicyRules=no',
    );
    const verify = await execa(
      'systemd-analyze',
      ['verify', join(out, 'egressguard-restore.service'), join(out, 'egressguard.service')],
      { reject: false },
    );
    expect(verify.stderr).toBe('');
    expect(verify.exitCode).toBe(0);
  });
});
