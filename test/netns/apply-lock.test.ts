import { beforeAll, describe, expect, it } from 'vitest';
import type { Lab } from '../../src/prove/index.js';
import {
  FACTS,
  POLICY_A,
  apply,
  cli,
  holdHostLock,
  liveStamp,
  startCli,
  target,
  useGatewayLab,
  writePolicyB,
} from './support/vpn-gateway-lab.js';

// An operator's `apply` while the resident mode (or a boot restore) holds the host lock: it
// waits, says for whom, and goes in once the lock is free; with `--lock-timeout 0` it fails at
// once and changes nothing. Real kernel, one lab, a state directory per case.

describe('apply and the host lock', () => {
  const { lab: current, fresh } = useGatewayLab('egtest-lock');
  let lab: Lab;
  beforeAll(() => {
    lab = current();
  });

  it('waits while another egressguard holds the lock, says so, then applies', async () => {
    const path = await fresh('wait');
    const a = await apply(lab, path, POLICY_A);
    const holder = holdHostLock(lab, path);
    const applying = startCli([
      'apply',
      writePolicyB(path),
      '--facts',
      FACTS,
      '--json',
      ...target(lab, path),
    ]);
    // The handshake: the CLI says it found the lock held and waits (the default wait is 30 s).
    await applying.stderrMatching(/waiting up to 30s$/m);
    // Still waiting while the holder lives: A is live.
    expect(await liveStamp(lab)).toBe(a.hash);
    holder.release();
    const result = await applying.result;
    expect(result.exitCode).toBe(0);
    expect(result.stderr).toMatch(
      /^warning: Cannot apply a policy: the host lock ".*" is held by pid \d+ \(repair the applied state\) since .*; waiting up to 30s$/m,
    );
    const applied = JSON.parse(result.stdout) as { hash: string; generation: number };
    expect(applied.generation).toBe(2);
    expect(await liveStamp(lab)).toBe(applied.hash);
  });

  it('fails at once with --lock-timeout 0 and changes nothing', async () => {
    const path = await fresh('no-wait');
    const a = await apply(lab, path, POLICY_A);
    const holder = holdHostLock(lab, path);
    try {
      const result = await cli([
        'apply',
        writePolicyB(path),
        '--facts',
        FACTS,
        '--lock-timeout',
        '0',
        ...target(lab, path),
      ]);
      expect(result.exitCode).toBe(2);
      expect(result.stderr).toContain('is held by pid');
      expect(result.stderr).toContain('wait for it to finish');
      expect(await liveStamp(lab)).toBe(a.hash);
    } finally {
      holder.release();
    }
  });

  it('refuses a lock timeout it cannot read', async () => {
    const path = await fresh('bad-timeout');
    const result = await cli([
      'apply',
      POLICY_A,
      '--facts',
      FACTS,
      '--lock-timeout',
      'soon',
      ...target(lab, path),
    ]);
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toContain('Cannot parse duration "soon"');
  });
});
