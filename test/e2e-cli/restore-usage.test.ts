import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli } from './run-cli.js';

// Usage errors of `restore` stop it before it reads state or touches any firewall.
describe('restore: bad seconds', () => {
  const state = mkdtempSync(join(tmpdir(), 'eg-restore-usage-'));
  afterAll(() => {
    rmSync(state, { recursive: true, force: true });
  });

  it.each([
    ['--after', 'abc'],
    ['--after', ''],
    ['--lock-wait', '-5'],
    ['--lock-wait', '1e3'],
  ])('%s %j is refused at once, with a hint', async (option, value) => {
    const result = await runCli(['restore', option, value, '--state-dir', state], {
      env: { EGRESSGUARD_ROOTNS_GUARD: '1' },
    });
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toContain(`error: Cannot use ${option} "${value}": it takes seconds`);
    expect(result.stderr).toContain(`hint: write ${option} 30`);
    expect(readdirSync(state)).toEqual([]);
  });
});
