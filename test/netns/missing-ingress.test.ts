import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  FACTS,
  POLICY_A,
  cli,
  liveStamp,
  target,
  useGatewayLab,
} from './support/vpn-gateway-lab.js';

const REFUSAL =
  'error: Cannot apply: class "vpn" names ingress "vwl1" (did you mean "vwl0"?), which host "vpn-gw-1" does not have';

// A class's ingress the host does not have (vwl1 for vwl0): the class would filter nothing and the
// workloads behind vwl0 would leave unfiltered. apply refuses it unless told it is expected, plan
// and doctor say so; the real kernel and the lab's interfaces.
describe('an ingress interface the host does not have', () => {
  const { lab, fresh } = useGatewayLab('egtest-missing-ingress');
  const typo = (dir: string): string => {
    const file = join(dir, 'typo.yaml');
    const text = readFileSync(POLICY_A, 'utf8').replace('ingress: [vwl0]', 'ingress: [vwl1]');
    if (!text.includes('vwl1')) throw new Error('Cannot derive the typo: the example changed');
    writeFileSync(file, text);
    return file;
  };

  it('apply refuses it and changes nothing; --allow-missing-ingress applies with a warning', async () => {
    const state = await fresh('apply');
    const policy = typo(state);
    const facts = JSON.parse(readFileSync(FACTS, 'utf8')) as { hostname: string };
    expect(facts.hostname).toBe('vpn-gw-1');
    const at = [...target(lab(), state), '--facts', FACTS];

    const refused = await cli(['apply', policy, ...at]);
    expect(refused.exitCode).toBe(2);
    expect(refused.stderr).toContain(REFUSAL);
    expect(refused.stderr).toContain('pass --allow-missing-ingress');
    expect(await liveStamp(lab())).toBeNull();

    const plan = await cli(['plan', policy, ...at]);
    expect(plan.exitCode).toBe(0);
    expect(plan.stderr).toContain('warning: class "vpn" names ingress "vwl1"');

    const allowed = await cli(['apply', policy, '--allow-missing-ingress', ...at]);
    expect(allowed.exitCode).toBe(0);
    expect(allowed.stderr).toContain('warning: class "vpn" names ingress "vwl1"');
    expect(await liveStamp(lab())).not.toBeNull();
  });

  it('doctor reports it from the live interfaces', async () => {
    const state = await fresh('doctor');
    const doctor = await cli(['doctor', typo(state), '--json', ...target(lab(), state)]);
    const report = JSON.parse(doctor.stdout) as {
      findings: { code: string; severity: string; message: string }[];
    };
    expect(report.findings).toContainEqual(
      expect.objectContaining({
        code: 'ingress-missing',
        severity: 'warning',
        message: expect.stringContaining(
          'Class "vpn" names ingress "vwl1", which this host does not have (did you mean "vwl0"?)',
        ) as unknown,
      }),
    );
    // The example as written names what the lab has: nothing to report.
    const clean = await cli(['doctor', POLICY_A, '--json', ...target(lab(), state)]);
    const codes = (JSON.parse(clean.stdout) as { findings: { code: string }[] }).findings.map(
      (f) => f.code,
    );
    expect(codes).not.toContain('ingress-missing');
  });
});
