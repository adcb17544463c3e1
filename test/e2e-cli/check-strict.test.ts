import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO, runCli } from './run-cli.js';

const WARNS = join(REPO, 'testdata/policies/invalid/tunnel-without-kill-switch');
const CLEAN = join(REPO, 'testdata/policies/valid/linux-vpn-gateway/policy.yaml');

describe('check --strict: warnings fail', () => {
  it('passes a policy with only warnings without it, fails it with it', async () => {
    const lenient = await runCli(['check', 'policy.yaml'], { cwd: WARNS });
    expect(lenient.exitCode).toBe(0);
    expect(lenient.stdout).toMatch(/^✓ policy\.yaml: valid \(0 errors, 1 warning\)/m);

    const strict = await runCli(['check', '--strict', 'policy.yaml'], { cwd: WARNS });
    expect(strict.exitCode).toBe(1);
    expect(strict.stdout).toMatch(/ warning tunnel-without-kill-switch: /);
    expect(strict.stdout.split('\n').at(-1)).toBe(
      '✗ policy.yaml: invalid under --strict, which fails on warnings (0 errors, 1 warning)',
    );
    const json = await runCli(['check', '--strict', '--json', 'policy.yaml'], { cwd: WARNS });
    expect(json.exitCode).toBe(1);
    expect((JSON.parse(json.stdout) as { valid: boolean }).valid).toBe(false);
  });

  it('passes a policy with no warning', async () => {
    const result = await runCli(['check', '--strict', CLEAN]);
    expect(result.exitCode).toBe(0);
  });
});
