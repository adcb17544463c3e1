import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isMap, isSeq, parse, parseAllDocuments, visit } from 'yaml';
import { validateChainsawTest } from '../../src/backends/cilium/chainsaw-schema.js';
import { REPO, runCli } from './run-cli.js';

// `prove POLICY --emit chainsaw DIR` through the built CLI, on the incident's example: the files a
// real k3s + Cilium cluster runs, checked here against the pinned chainsaw schema and yamllint.
const POLICY = join(REPO, 'testdata/policies/valid/k3s-vpn-egress/policy.yaml');
const ECHO = 'http://203.0.113.80:8080/';

interface ScriptOp {
  script?: { content: string; timeout?: string };
  apply?: unknown;
}
interface Step {
  name: string;
  try: ScriptOp[];
  finally?: ScriptOp[];
}
interface TestDoc {
  metadata: { name: string };
  spec: { steps: Step[] };
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? filesUnder(path) : [path];
  });
}

let dir: string;
let emitted: { exitCode: number; stdout: string; stderr: string };
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'emit-chainsaw-'));
  emitted = await runCli(['prove', POLICY, '--emit', 'chainsaw', dir, '--echo-url', ECHO]);
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe('prove --emit chainsaw', () => {
  it('writes a test per requirement with pod probes, and says which requirement stays with the lab', () => {
    expect(emitted.stderr).toBe('');
    expect(emitted.exitCode).toBe(0);
    expect(emitted.stdout).toContain(`wrote the chainsaw suite (9 files) to ${dir}`);
    expect(emitted.stdout).toContain('note: R-NET-09 has no pod probe');
    expect(
      filesUnder(dir)
        .map((f) => relative(dir, f))
        .sort(),
    ).toEqual([
      'README.md',
      'r-net-06-l3-safety-critical/chainsaw-test.yaml',
      // A pod of no class that shows the far side of the UDP probe echoes.
      'r-net-06-l3-safety-critical/control.yaml',
      'r-net-06-l3-safety-critical/probe-vpn.yaml',
      'r-net-07-l3/chainsaw-test.yaml',
      'r-net-07-l3/probe-vpn.yaml',
      'r-net-08-l2/chainsaw-test.yaml',
      'r-net-08-l2/probe-vpn.yaml',
      'setup/egressguard-chainsaw.yaml',
    ]);
  });

  it('validates every test against the pinned chainsaw v1alpha1 schema', () => {
    const tests = filesUnder(dir).filter((f) => f.endsWith('chainsaw-test.yaml'));
    expect(tests).toHaveLength(3);
    for (const file of tests) {
      expect(validateChainsawTest(parse(readFileSync(file, 'utf8'))), file).toEqual([]);
    }
  });

  it('passes yamllint (Debian package, default rules, warnings are errors)', () => {
    const result = spawnSync('yamllint', ['-s', '-f', 'parsable', '-d', 'extends: default', dir], {
      encoding: 'utf8',
    });
    expect(result.error, 'yamllint must be installed (scripts/setup.sh)').toBeUndefined();
    expect(result.stdout).toBe('');
    expect(result.status).toBe(0);
  });

  it('guards every fault step with a step-level finally of scripts that restart the tunnel and the resident and re-apply the policy', () => {
    const faults: string[] = [];
    for (const file of filesUnder(dir).filter((f) => f.endsWith('chainsaw-test.yaml'))) {
      const test = parse(readFileSync(file, 'utf8')) as TestDoc;
      for (const step of test.spec.steps) {
        // A fault is a Job that stops a unit on the gateway node (the tunnel, or the resident).
        const stops = step.try.flatMap(
          (op) => /egressguard\.dev\/fault: (\S+-stop)/.exec(op.script?.content ?? '')?.[1] ?? [],
        );
        if (stops.length === 0) continue;
        faults.push(`${test.metadata.name}: ${stops.join('+')}`);
        // The fault starts the step: nothing of it runs before its finally is registered.
        expect(step.try[0]?.script?.content).toMatch(/egressguard\.dev\/fault: \S+-stop/);
        const restore = (step.finally ?? []).map((op) => op.script?.content ?? '');
        expect(restore.length, `${file}: ${step.name}`).toBeGreaterThan(0);
        expect(step.finally?.every((op) => op.script !== undefined && op.apply === undefined)).toBe(
          true,
        );
        expect(restore.some((c) => c.includes('egressguard.dev/fault: tunnel-start'))).toBe(true);
        expect(restore.some((c) => c.includes('egressguard.dev/fault: resident-start'))).toBe(true);
        expect(restore.some((c) => c.includes('kubectl annotate ciliumegressgatewaypolicy'))).toBe(
          true,
        );
        expect(restore.join('\n')).toContain('egressguard-k3s-vpn-egress-vpn');
      }
    }
    // R-NET-06 and R-NET-07 both probe with the tunnel down, each layer alone and all together:
    // the label alone (the resident stopped), the routing alone (the resident and the tunnel
    // stopped, the label put back by hand), the field's fault (the tunnel stopped).
    expect(faults).toEqual(
      ['r-net-06-l3-safety-critical', 'r-net-07-l3'].flatMap((t) => [
        `${t}: resident-stop`,
        `${t}: resident-stop+tunnel-stop`,
        `${t}: tunnel-stop`,
      ]),
    );
  });

  it('contains no =~ and no flow-style collection', () => {
    for (const file of filesUnder(dir).filter((f) => f.endsWith('.yaml'))) {
      const text = readFileSync(file, 'utf8');
      expect(text, file).not.toContain('=~');
      for (const document of parseAllDocuments(text)) {
        expect(document.errors, file).toEqual([]);
        visit(document, (_key, node) => {
          if (isMap(node) || isSeq(node)) expect(node.flow ?? false, file).toBe(false);
        });
      }
    }
  });

  it('pins the fault Jobs to the gateway node of the facts and checks answers against its WAN address', () => {
    const text = readFileSync(join(dir, 'r-net-06-l3-safety-critical/chainsaw-test.yaml'), 'utf8');
    expect(text).toContain('k3s-gw-1');
    expect(text).toContain('egressguard.dev/gateway-vpn');
    expect(text).toContain('192.168.1.21');
  });

  it('refuses without --echo-url, and an unknown format, with exit code 2 and nothing written', async () => {
    const out = mkdtempSync(join(tmpdir(), 'emit-chainsaw-refused-'));
    try {
      // Facts without a tunnel exit: no echo service to default to.
      const facts = JSON.parse(
        readFileSync(join(REPO, 'testdata/policies/valid/k3s-vpn-egress/facts.json'), 'utf8'),
      ) as { cluster: Record<string, unknown> };
      Reflect.deleteProperty(facts.cluster, 'tunnelExits');
      const factsDir = mkdtempSync(join(tmpdir(), 'emit-chainsaw-facts-'));
      const factsFile = join(factsDir, 'facts.json');
      writeFileSync(factsFile, JSON.stringify(facts));
      const missing = await runCli([
        'prove',
        POLICY,
        '--emit',
        'chainsaw',
        out,
        '--facts',
        factsFile,
      ]);
      rmSync(factsDir, { recursive: true, force: true });
      expect(missing.exitCode).toBe(2);
      expect(missing.stderr).toContain('error: Cannot write the chainsaw suite without --echo-url');
      const unknown = await runCli(['prove', POLICY, '--emit', 'kuttl', out, '--echo-url', ECHO]);
      expect(unknown.exitCode).toBe(2);
      expect(unknown.stderr).toContain('error: Cannot emit a "kuttl" suite');
      expect(readdirSync(out)).toEqual([]);
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  });
});
