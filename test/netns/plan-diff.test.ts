import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { FirewallDiff } from '../../src/backends/index.js';
import { FACTS, POLICY_A, apply, cli, target, useGatewayLab } from './support/vpn-gateway-lab.js';

/** The example policy with these rules in class vpn, and its LAN network as given. */
function variant(dir: string, name: string, rules: readonly string[], lan: string): string {
  const text = readFileSync(POLICY_A, 'utf8')
    .replace('lan: [192.168.0.0/16]', `lan: [${lan}]`)
    .replace(
      '    mssClamp: pmtu\n    default: allow\n',
      `    mssClamp: pmtu\n    rules:\n${rules.map((r) => `      - ${r}\n`).join('')}    default: allow\n`,
    );
  if (!text.includes('deny-smtp') && !text.includes('deny-metadata')) {
    throw new Error('Cannot derive the variant: the example policy changed');
  }
  const file = join(dir, `${name}.yaml`);
  writeFileSync(file, text);
  return file;
}

const SMTP = '{ id: deny-smtp, action: deny, to: any, proto: tcp, ports: [25] }';
const WEB = '{ id: allow-web, action: allow, to: any, proto: tcp, ports: [443] }';
const WEB2 = '{ id: allow-web, action: allow, to: any, proto: tcp, ports: [80, 443] }';
const META = '{ id: deny-metadata, action: deny, to: 169.254.169.254 }';

// `plan` against the real kernel: what the live table (the recorded generation, stamp checked)
// becomes, rule by rule and set by set, in words and in --json, and --detailed-exitcode.
describe('plan shows rules and set elements by id', () => {
  const { lab, fresh } = useGatewayLab('egtest-plan-diff');

  it('lists rules added, removed and changed and set elements, and exits 2 with changes', async () => {
    const state = await fresh('plan');
    const before = variant(state, 'before', [SMTP, WEB], '192.168.0.0/16');
    const after = variant(state, 'after', [META, WEB2], '192.168.0.0/16, 172.16.0.0/12');
    const at = [...target(lab(), state), '--facts', FACTS];
    await apply(lab(), state, before);

    const json = await cli(['plan', after, '--json', ...at]);
    expect(json.exitCode).toBe(0);
    const plan = JSON.parse(json.stdout) as { firewall: FirewallDiff; changes: string[] };
    expect(plan.firewall.rules).toEqual({
      added: ['deny-metadata'],
      removed: ['deny-smtp'],
      changed: ['allow-web'],
    });
    expect(plan.firewall.sets).toEqual(
      expect.arrayContaining([
        {
          set: 'class vpn kill-switch exceptions',
          family: 'ipv4',
          added: 1,
          removed: 0,
          sampleAdded: ['172.16.0.0/12'],
          sampleRemoved: [],
        },
      ]),
    );

    const human = await cli(['plan', after, '--detailed-exitcode', ...at]);
    expect(human.exitCode).toBe(2);
    const lines = human.stdout.split('\n').map((l) => l.trim());
    expect(lines).toEqual(
      expect.arrayContaining([
        '+ rule "deny-metadata"',
        '- rule "deny-smtp"',
        '~ rule "allow-web"',
        '~ set "class vpn kill-switch exceptions" (ipv4): 1 added, 0 removed: +172.16.0.0/12',
      ]),
    );
    // The routing side changes too: one more throw route for the new exception.
    expect(lines.some((l) => l.startsWith('+ ') && l.includes('172.16.0.0/12'))).toBe(true);

    await apply(lab(), state, after);
    const none = await cli(['plan', after, '--detailed-exitcode', ...at]);
    expect(none.stdout).toContain('no changes: live state matches');
    expect(none.exitCode).toBe(0);
  });

  it('exits 1, not 2, on an error with --detailed-exitcode', async () => {
    const state = await fresh('plan-error');
    const result = await cli([
      'plan',
      join(state, 'missing.yaml'),
      '--detailed-exitcode',
      ...target(lab(), state),
    ]);
    expect(result.exitCode).toBe(1);
    expect(result.stderr).toContain('Cannot read policy');
  });
});
