import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isMap, isSeq, parse, parseAllDocuments, visit } from 'yaml';
import { validateChainsawTest } from './chainsaw-schema.js';
import { REAPPLIED_ANNOTATION } from './cilium-manifests.js';
import {
  type ChainsawSuiteInput,
  type EmittedFile,
  type SuiteProblemCode,
  emitChainsawSuite,
} from './chainsaw-suite.js';

// The incident's shape (DESIGN.md §1B): vpn pods leave only through the tunnel on gw-1; a LAN
// class does not use the tunnel at all.
const INPUT: ChainsawSuiteInput = {
  policy: 'k3s-vpn-egress',
  classes: [
    { name: 'vpn', namespace: 'apps', podLabels: { 'egress-class': 'vpn' }, viaTunnel: true },
    { name: 'lan', namespace: 'tools', podLabels: { 'egress-class': 'lan' }, viaTunnel: false },
  ],
  gateway: {
    nodeName: 'gw-1',
    label: { key: 'egressguard.dev/gateway', value: 'vpn' },
    tunnelUnit: 'wg-quick@tun0.service',
    residentUnit: 'egressguard-gateway.service',
    egressGatewayPolicy: 'egressguard-vpn',
    wanAddresses: ['198.51.100.7', '2001:db8:ffff::7'],
    tunnelExitAddresses: ['203.0.113.50'],
  },
  echoUrl: 'http://203.0.113.10:8080/ip',
  requirements: [
    {
      id: 'R-NET-06',
      statement: 'Class vpn reaches the internet only through the tunnel, never by the WAN uplink',
      level: 'L3',
      safetyCritical: true,
      probes: [
        { from: 'vpn', to: '203.0.113.7', proto: 'tcp', port: 443, expect: 'allow', tunnel: 'up' },
        { from: 'vpn', to: '203.0.113.7', proto: 'tcp', port: 443, expect: 'deny', tunnel: 'down' },
        { from: 'vpn', to: '192.168.1.20', proto: 'icmp', expect: 'allow', tunnel: 'down' },
      ],
    },
    {
      id: 'R-NET-07',
      statement: 'Class lan resolves names on the LAN',
      level: 'L2',
      safetyCritical: false,
      probes: [
        { from: 'lan', to: '192.168.1.53', proto: 'udp', port: 53, expect: 'allow', tunnel: 'up' },
      ],
    },
    {
      id: 'R-DOC-01',
      statement: 'Statically checked',
      level: 'L1',
      safetyCritical: false,
      probes: [],
    },
  ],
};

function emit(input: ChainsawSuiteInput = INPUT): readonly EmittedFile[] {
  const { files, problems } = emitChainsawSuite(input);
  expect(problems).toEqual([]);
  return files;
}

function write(files: readonly EmittedFile[], dir: string): void {
  for (const file of files) {
    mkdirSync(dirname(join(dir, file.path)), { recursive: true });
    writeFileSync(join(dir, file.path), file.content);
  }
}

const yamlFiles = (files: readonly EmittedFile[]) => files.filter((f) => f.path.endsWith('.yaml'));
const testFiles = (files: readonly EmittedFile[]) =>
  files.filter((f) => f.path.endsWith('/chainsaw-test.yaml'));

interface ScriptOp {
  description?: string;
  script?: { content: string; timeout?: string; check?: Record<string, boolean> };
  apply?: unknown;
}
interface Step {
  name: string;
  try: ScriptOp[];
  finally?: ScriptOp[];
}
interface TestDoc {
  metadata: { name: string; labels: Record<string, string> };
  spec: { description: string; concurrent?: boolean; steps: Step[] };
}

const tests = (files: readonly EmittedFile[]) =>
  testFiles(files).map((f) => parse(f.content) as TestDoc);
const scripts = (step: Step) =>
  [...step.try, ...(step.finally ?? [])].flatMap((op) => (op.script ? [op.script] : []));

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'chainsaw-suite-'));
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe('emitChainsawSuite', () => {
  it('writes one test per cluster-provable requirement, with setup, probe pods and a README', () => {
    expect(emit().map((f) => f.path)).toEqual([
      'README.md',
      'r-net-06-l3-safety-critical/chainsaw-test.yaml',
      'r-net-06-l3-safety-critical/probe-vpn.yaml',
      'r-net-07-l2/chainsaw-test.yaml',
      'r-net-07-l2/probe-lan.yaml',
      'setup/egressguard-chainsaw.yaml',
    ]);
    const readme = emit().find((f) => f.path === 'README.md')?.content ?? '';
    expect(readme).toContain('R-DOC-01: Statically checked');
    expect(readme).toContain('kubectl apply -f setup/egressguard-chainsaw.yaml');
  });

  it('is deterministic', () => {
    expect(emit()).toEqual(emit());
  });

  it('validates every test against the pinned chainsaw v1alpha1 Test schema', () => {
    const docs = tests(emit());
    expect(docs).toHaveLength(2);
    for (const doc of docs) expect(validateChainsawTest(doc), doc.metadata.name).toEqual([]);
  });

  it('has a schema that really rejects a test-level finally and an apply in a step finally', () => {
    const [doc] = tests(emit());
    expect(
      validateChainsawTest({ ...doc, spec: { ...doc?.spec, finally: [] } }).join('\n'),
    ).toContain('Unknown field "finally"');
    const steps = doc?.spec.steps.map((s) =>
      s.finally ? { ...s, finally: [{ apply: { file: 'x.yaml' } }] } : s,
    );
    expect(validateChainsawTest({ ...doc, spec: { ...doc?.spec, steps } })).not.toEqual([]);
  });

  it('passes yamllint (Debian package, default rules, warnings are errors)', () => {
    const out = join(dir, 'lint');
    write(emit(), out);
    const result = spawnSync('yamllint', ['-s', '-f', 'parsable', '-d', 'extends: default', out], {
      encoding: 'utf8',
    });
    expect(result.error, 'yamllint must be installed (scripts/setup.sh)').toBeUndefined();
    expect(result.stdout).toBe('');
    expect(result.status).toBe(0);
  });

  it('yamllint would catch a flow map or a long line (the check can fail)', () => {
    const out = join(dir, 'lint-bad');
    mkdirSync(out, { recursive: true });
    writeFileSync(
      join(out, 'bad.yaml'),
      `---\nmetadata: {name: x, labels: {a: b}}\nlong: ${'x '.repeat(50)}\n`,
    );
    const result = spawnSync('yamllint', ['-s', '-f', 'parsable', '-d', 'extends: default', out], {
      encoding: 'utf8',
    });
    expect(result.stdout).toContain('line-length');
    expect(result.status).not.toBe(0);
  });

  it('uses block style only: no flow map or flow sequence anywhere in the YAML AST', () => {
    for (const file of yamlFiles(emit())) {
      const documents = parseAllDocuments(file.content);
      expect(documents.length, file.path).toBeGreaterThan(0);
      for (const document of documents) {
        expect(document.errors, file.path).toEqual([]);
        visit(document, (_key, node) => {
          if (isMap(node) || isSeq(node))
            expect(node.flow ?? false, `${file.path}: flow collection`).toBe(false);
        });
      }
    }
  });

  it('never writes =~ and uses contains() and regex_match() in checks', () => {
    const files = emit();
    for (const file of files) expect(file.content, file.path).not.toContain('=~');
    const keys = tests(files).flatMap((t) =>
      t.spec.steps.flatMap((s) => scripts(s).flatMap((sc) => Object.keys(sc.check ?? {}))),
    );
    expect(keys.some((k) => k.startsWith('(contains('))).toBe(true);
    // regex_match() appears only in the weak check of a suite without --tunnel-exit.
    const weak = tests(
      emit({
        ...INPUT,
        gateway: { ...INPUT.gateway, tunnelExitAddresses: [] },
        requirements: INPUT.requirements.map((r) => ({ ...r, safetyCritical: false })),
      }),
    );
    expect(
      weak.some((t) =>
        t.spec.steps.some((s) =>
          scripts(s).some((sc) =>
            Object.keys(sc.check ?? {}).some((k) => k.startsWith('(regex_match(')),
          ),
        ),
      ),
    ).toBe(true);
    for (const key of keys)
      expect(key).toMatch(/^\((contains|regex_match)\(.*\)\)$|^\(\$error == null\)$/);
  });

  it('sets an explicit timeout on every script (the default is 5 s)', () => {
    for (const test of tests(emit())) {
      for (const step of test.spec.steps) {
        for (const sc of scripts(step))
          expect(sc.timeout, `${test.metadata.name}: ${step.name}`).toMatch(/^\d+s$/);
      }
    }
  });

  it('guards every fault step with a step-level finally that restarts both units, waits for the label on the Node and the CiliumNode, and re-applies the policy', () => {
    const [l3] = tests(emit());
    const faultSteps =
      l3?.spec.steps.filter((s) =>
        s.try.some(
          (op) =>
            /-(stop)$/m.test(op.script?.content ?? '') ||
            (op.script?.content ?? '').includes('fault: tunnel-stop') ||
            (op.script?.content ?? '').includes('fault: resident-stop'),
        ),
      ) ?? [];
    // One step per layer alone, and one with every layer.
    expect(faultSteps.map((s) => s.name)).toEqual([
      'R-NET-06 L3: tunnel down, the gateway label alone (the tunnel stays up)',
      "R-NET-06 L3: tunnel down, the gateway node's routing alone (the label kept on by hand)",
      'R-NET-06 L3: tunnel down, every layer (stop wg-quick@tun0.service with the resident running)',
    ]);
    for (const step of faultSteps) {
      const restore = (step.finally ?? []).map((op) => op.script?.content ?? '');
      expect(step.finally?.every((op) => op.script !== undefined)).toBe(true);
      const at = (text: string) => restore.findIndex((c) => c.includes(text));
      const tunnel = at('egressguard.dev/fault: tunnel-start');
      const resident = at('egressguard.dev/fault: resident-start');
      const node = at('kubectl get nodes -l');
      const ciliumNode = at('kubectl get ciliumnodes -l');
      const reapply = at('kubectl annotate ciliumegressgatewaypolicy');
      expect(tunnel).toBe(0);
      expect(restore[tunnel]).toContain('wait --for=condition=complete');
      expect(resident).toBeGreaterThan(tunnel);
      expect(node).toBeGreaterThan(resident);
      expect(ciliumNode).toBeGreaterThan(node);
      expect(reapply).toBeGreaterThan(ciliumNode);
      // The annotation the resident writes too: one key, one domain.
      expect(restore[reapply]).toContain(`"${REAPPLIED_ANNOTATION}=$(date +%s)"`);
      expect(REAPPLIED_ANNOTATION).toBe('egressguard.dev/reapplied-at');
      // The fault is the first operation of its step: nothing can fail before the restore is armed.
      expect(step.try[0]?.script?.content).toMatch(/fault: (tunnel|resident)-stop/);
    }
    // The label-alone step stops only the resident; the routing-alone one keeps the label by hand.
    const [labelAlone, routingAlone] = faultSteps;
    const contents = (step: Step | undefined) =>
      (step?.try ?? []).map((op) => op.script?.content ?? '').join('\n');
    expect(contents(labelAlone)).not.toContain('fault: tunnel-stop');
    expect(contents(labelAlone)).toContain('kubectl get ciliumnodes -l');
    expect(contents(routingAlone)).toContain('kubectl label node "$node" "$label" --overwrite');
    expect(contents(routingAlone).indexOf('fault: tunnel-stop')).toBeGreaterThan(
      contents(routingAlone).indexOf('kubectl label node'),
    );
    // No fault outside a guarded step.
    for (const test of tests(emit())) {
      for (const step of test.spec.steps) {
        if (step.try.some((op) => /fault: (tunnel|resident)-stop/.test(op.script?.content ?? '')))
          expect(step.finally).toBeDefined();
      }
    }
    expect(l3?.spec.concurrent).toBe(false);
  });

  it('names tests and steps with the requirement id and level, and labels them', () => {
    const [l3, l2] = tests(emit());
    expect(l3?.metadata.name).toBe('r-net-06-l3-safety-critical');
    expect(l3?.metadata.labels).toMatchObject({
      'egressguard.dev/requirement': 'R-NET-06',
      'egressguard.dev/level': 'L3',
      'egressguard.dev/safety-critical': 'true',
    });
    expect(l3?.spec.description).toMatch(/^R-NET-06 \(L3, safety-critical\): Class vpn/);
    for (const step of l3?.spec.steps ?? []) expect(step.name).toMatch(/^R-NET-06 L3: /);
    expect(l2?.metadata.name).toBe('r-net-07-l2');
    expect(l2?.spec.concurrent).toBeUndefined();
    expect(l2?.spec.steps.map((s) => s.name)).toEqual([
      'R-NET-07 L2: probe pods and the gateway precondition',
      'R-NET-07 L2: tunnel up',
    ]);
  });

  it('checks the egress source of a tunnel class: the tunnel exit and nothing else; nothing while down', () => {
    const [l3] = tests(emit());
    const steps = l3?.spec.steps ?? [];
    const source = (step: Step | undefined) =>
      step?.try.find((op) => op.description?.includes('egress source'))?.script;
    const up = source(steps[1]);
    const down = [source(steps[2]), source(steps[3]), source(steps[4])];
    const after = source(steps[5]);
    expect(up?.content).toContain("url='http://203.0.113.10:8080/ip'");
    expect(up?.content).toContain('  198.51.100.7)\n    echo egressguard-source=wan ;;');
    expect(up?.content).toContain('  2001:db8:ffff::7)\n    echo egressguard-source=wan ;;');
    // Positive: the answer is the tunnel exit (a site's NAT address is "other", and fails).
    expect(up?.check).toEqual({
      '($error == null)': true,
      "(contains($stdout, 'egressguard-source=tunnel'))": true,
    });
    for (const d of down) {
      expect(d?.check).toEqual({
        '($error == null)': true,
        "(contains($stdout, 'egressguard-source=none'))": true,
      });
    }
    expect(after?.check).toEqual(up?.check);
    // The LAN class does not use the tunnel: no source check.
    const [, l2] = tests(emit());
    expect(
      l2?.spec.steps.flatMap((s) => s.try).some((op) => op.description?.includes('egress source')),
    ).toBe(false);
  });

  it('writes probe pods that Pod Security "restricted" admits, and a privileged fault namespace with the runner RBAC', () => {
    const files = emit();
    const pod = parse(files.find((f) => f.path.endsWith('probe-vpn.yaml'))?.content ?? '') as {
      metadata: { namespace: string; labels: Record<string, string> };
      spec: {
        securityContext: Record<string, unknown>;
        containers: { securityContext: Record<string, unknown> }[];
      };
    };
    expect(pod.metadata.namespace).toBe('apps');
    expect(pod.metadata.labels['egress-class']).toBe('vpn');
    expect(pod.spec.securityContext).toMatchObject({
      runAsNonRoot: true,
      seccompProfile: { type: 'RuntimeDefault' },
    });
    expect(pod.spec.containers[0]?.securityContext).toEqual({
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
    });
    const setup = parseAllDocuments(
      files.find((f) => f.path.startsWith('setup/'))?.content ?? '',
    ).map(
      (d) =>
        d.toJS() as {
          kind: string;
          metadata: { labels?: Record<string, string> };
          rules?: { resources: string[]; verbs: string[] }[];
        },
    );
    expect(setup.map((d) => d.kind)).toEqual([
      'Namespace',
      'ServiceAccount',
      'ClusterRole',
      'ClusterRoleBinding',
    ]);
    expect(setup[0]?.metadata.labels?.['pod-security.kubernetes.io/enforce']).toBe('privileged');
    const rules = setup[2]?.rules ?? [];
    const can = (resource: string, verb: string) =>
      rules.some((r) => r.resources.includes(resource) && r.verbs.includes(verb));
    expect([
      can('pods/exec', 'create'),
      can('jobs', 'create'),
      can('ciliumegressgatewaypolicies', 'patch'),
    ]).toEqual([true, true, true]);
    // The routing-alone fault keeps the label on by hand; the CiliumNode is read, never written.
    expect(can('nodes', 'patch')).toBe(true);
    expect(can('ciliumnodes', 'get')).toBe(true);
    expect(can('ciliumnodes', 'patch')).toBe(false);
  });

  it('writes scripts that sh parses, and a restore that really sends a privileged Job pinned to the gateway node', () => {
    const [l3] = tests(emit());
    for (const step of l3?.spec.steps ?? []) {
      for (const sc of scripts(step)) {
        const check = spawnSync('sh', ['-n'], { input: sc.content, encoding: 'utf8' });
        expect(check.status, `${step.name}: ${check.stderr}`).toBe(0);
      }
    }
    // Run the restore under sh with a kubectl that records its arguments and stdin: what would the
    // cluster receive?
    const bin = join(dir, 'bin');
    mkdirSync(bin, { recursive: true });
    const log = join(dir, 'kubectl.log');
    writeFileSync(
      join(bin, 'kubectl'),
      `#!/bin/sh\necho "ARGS $*" >> '${log}'\nif [ "$1 $2 $3" = "apply -f -" ]; then cat >> '${log}'; fi\n`,
    );
    chmodSync(join(bin, 'kubectl'), 0o755);
    const restore = l3?.spec.steps[2]?.finally?.[0]?.script?.content ?? '';
    execFileSync('sh', ['-c', restore], {
      env: { ...process.env, PATH: `${bin}:${process.env['PATH'] ?? ''}` },
    });
    const recorded = readFileSync(log, 'utf8');
    const [first, second, ...rest] = recorded.split('\n');
    expect(first).toBe(
      'ARGS -n egressguard-chainsaw delete job egressguard-tunnel-start --ignore-not-found --wait=true',
    );
    expect(second).toBe('ARGS apply -f -');
    const manifestText = rest.slice(0, -2).join('\n');
    const job = parse(manifestText) as {
      metadata: { name: string; namespace: string };
      spec: {
        template: {
          spec: {
            nodeName: string;
            hostPID: boolean;
            containers: { command: string[]; securityContext: unknown }[];
          };
        };
      };
    };
    expect(job.metadata).toMatchObject({
      name: 'egressguard-tunnel-start',
      namespace: 'egressguard-chainsaw',
    });
    expect(job.spec.template.spec.nodeName).toBe('gw-1');
    expect(job.spec.template.spec.hostPID).toBe(true);
    expect(job.spec.template.spec.containers[0]?.securityContext).toEqual({ privileged: true });
    expect(job.spec.template.spec.containers[0]?.command.slice(-3)).toEqual([
      'systemctl',
      'start',
      'wg-quick@tun0.service',
    ]);
    expect(rest.at(-2)).toBe(
      'ARGS -n egressguard-chainsaw wait --for=condition=complete job/egressguard-tunnel-start --timeout=120s',
    );
  });

  it('stays within yamllint with the longest names Kubernetes allows', () => {
    const long = (n: number) => 'a'.repeat(n);
    const prefix = `${long(63)}.${long(63)}.${long(63)}.${long(61)}`;
    const input: ChainsawSuiteInput = {
      ...INPUT,
      classes: INPUT.classes.map((c) => ({
        ...c,
        name: `${c.name}-${long(50)}`,
        namespace: `${c.name}-${long(58)}`.slice(0, 63),
        podLabels: { [`${prefix}/${long(63)}`]: long(63) },
      })),
      gateway: {
        ...INPUT.gateway,
        nodeName: `${long(63)}.${long(63)}.${long(63)}.${long(61)}`,
        label: { key: `${prefix}/${long(63)}`, value: long(63) },
        egressGatewayPolicy: `${long(63)}.${long(63)}.${long(63)}.${long(61)}`,
      },
      requirements: INPUT.requirements.map((r) => ({
        ...r,
        id: `${r.id}-${long(31)}`,
        probes: r.probes.map((p) => ({ ...p, from: `${p.from}-${long(50)}` })),
      })),
    };
    const out = join(dir, 'long');
    write(emit(input), out);
    const result = spawnSync('yamllint', ['-s', '-f', 'parsable', '-d', 'extends: default', out], {
      encoding: 'utf8',
    });
    expect(result.stdout).toBe('');
    for (const doc of tests(emit(input))) {
      expect(doc.metadata.name.length).toBeLessThanOrEqual(63);
      expect(validateChainsawTest(doc)).toEqual([]);
    }
  });
});

describe('emitChainsawSuite: input problems (no files written)', () => {
  const problems = (input: ChainsawSuiteInput): SuiteProblemCode[] => {
    const result = emitChainsawSuite(input);
    if (result.problems.length > 0) expect(result.files).toEqual([]);
    return result.problems.map((p) => p.code);
  };
  const requirement = INPUT.requirements[0] as ChainsawSuiteInput['requirements'][number];
  const probe = requirement.probes[0] as (typeof requirement.probes)[number];
  const withRequirement = (r: Partial<typeof requirement>): ChainsawSuiteInput => ({
    ...INPUT,
    requirements: [{ ...requirement, ...r }],
  });

  it('unknown-class, missing-port and invalid-address name the probe', () => {
    const result = emitChainsawSuite(
      withRequirement({
        probes: [
          ...requirement.probes,
          { ...probe, from: 'vnp' },
          { ...probe, port: undefined as unknown as number },
          { ...probe, to: 'example.com' },
        ],
      }),
    );
    expect(result.problems).toEqual([
      {
        code: 'unknown-class',
        path: 'requirements[0].probes[3].from',
        message: 'Probe from unknown class "vnp": use one of "vpn", "lan"',
      },
      {
        code: 'missing-port',
        path: 'requirements[0].probes[4].port',
        message: 'A tcp probe needs a port from 1 to 65535',
      },
      {
        code: 'invalid-address',
        path: 'requirements[0].probes[5].to',
        message: '"example.com" is not an IPv4 or IPv6 address: write the address itself',
      },
    ]);
  });

  it('safety-critical-below-l3, l3-without-fault, no-probes and duplicate-requirement', () => {
    expect(problems(withRequirement({ level: 'L2' }))).toEqual(['safety-critical-below-l3']);
    expect(
      problems(withRequirement({ probes: requirement.probes.filter((p) => p.tunnel === 'up') })),
    ).toEqual(['l3-without-fault']);
    expect(problems(withRequirement({ safetyCritical: false, level: 'L2', probes: [] }))).toEqual([
      'no-probes',
    ]);
    expect(problems({ ...INPUT, requirements: [requirement, requirement] })).toEqual([
      'duplicate-requirement',
    ]);
  });

  it('invalid-name, invalid-label, duplicate-class and unsafe-value for values that reach a shell', () => {
    const vpn = INPUT.classes[0] as ChainsawSuiteInput['classes'][number];
    expect(problems({ ...INPUT, classes: [...INPUT.classes, vpn] })).toEqual(['duplicate-class']);
    const lan = INPUT.classes[1] as ChainsawSuiteInput['classes'][number];
    expect(problems({ ...INPUT, classes: [{ ...vpn, namespace: 'Apps' }, lan] })).toEqual([
      'invalid-name',
    ]);
    expect(problems({ ...INPUT, classes: [{ ...vpn, podLabels: {} }, lan] })).toEqual([
      'invalid-label',
    ]);
    expect(problems(withRequirement({ id: `R-${'X'.repeat(40)}` }))).toEqual(['invalid-name']);
    expect(
      problems({
        ...INPUT,
        gateway: { ...INPUT.gateway, label: { key: 'egressguard.dev/gateway', value: 'up now' } },
      }),
    ).toEqual(['invalid-label']);
    expect(
      problems({ ...INPUT, gateway: { ...INPUT.gateway, tunnelUnit: "wg'; reboot" } }),
    ).toEqual(['unsafe-value']);
    expect(problems({ ...INPUT, echoUrl: 'http://203.0.113.10/$(id)' })).toEqual(['unsafe-value']);
    expect(problems({ ...INPUT, gateway: { ...INPUT.gateway, wanAddresses: [] } })).toEqual([
      'invalid-address',
    ]);
    expect(problems({ ...INPUT, gateway: { ...INPUT.gateway, nodeName: 'GW_1' } })).toEqual([
      'invalid-name',
    ]);
  });

  it('accepts scalars that merely look odd in YAML (yes, 0123) without changing them', () => {
    const odd: ChainsawSuiteInput = {
      ...INPUT,
      classes: [
        {
          ...(INPUT.classes[0] as ChainsawSuiteInput['classes'][number]),
          podLabels: { 'egress-class': 'yes', tier: '0123' },
        },
      ],
      requirements: [requirement],
    };
    const pod = emit(odd).find((f) => f.path.endsWith('probe-vpn.yaml'));
    const labels = (parse(pod?.content ?? '') as { metadata: { labels: Record<string, unknown> } })
      .metadata.labels;
    expect(labels['egress-class']).toBe('yes');
    expect(labels['tier']).toBe('0123');
    // Quoted, or go-yaml (kubectl, chainsaw) would read a boolean and an octal number.
    const quoted: unknown[] = [];
    for (const document of parseAllDocuments(pod?.content ?? '')) {
      visit(document, {
        Scalar(_key, node) {
          if (node.type === 'QUOTE_DOUBLE' || node.type === 'QUOTE_SINGLE') quoted.push(node.value);
        },
      });
    }
    expect(quoted).toEqual(expect.arrayContaining(['yes', '0123']));
  });
});
