import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { KUBE_CALLS } from '../../src/backends/cilium/kube-client.js';
import { readHostFacts } from '../../src/facts/index.js';

// deploy/kubernetes: the least-privilege RBAC grants exactly the API calls the code makes
// (KUBE_CALLS in src/backends/cilium/kube-client.ts), no wildcard and nothing more; the gateway
// label test (test/netns/gateway-label.test.ts) runs the resident as a user with these very
// rules against the API model, so a call the grants miss fails there with 403. No JSON Schemas of
// the core Kubernetes kinds are pinned in this repository: the shape is checked field by field.

const folder = fileURLToPath(new URL('../../deploy/kubernetes/', import.meta.url));
const YAMLLINT = '{extends: default, rules: {line-length: {max: 100}}}';

interface Rule {
  apiGroups?: string[];
  resources?: string[];
  resourceNames?: string[];
  verbs?: string[];
  nonResourceURLs?: string[];
}
interface Doc {
  apiVersion?: string;
  kind?: string;
  metadata?: { name?: string; namespace?: string; annotations?: Record<string, string> };
  rules?: Rule[];
  roleRef?: { apiGroup: string; kind: string; name: string };
  subjects?: { kind: string; name: string; namespace?: string }[];
  type?: string;
}

function documents(file: string): Doc[] {
  return parseAllDocuments(readFileSync(join(folder, file), 'utf8')).map((d) => {
    expect(d.errors).toEqual([]);
    return d.toJS() as Doc;
  });
}

/** One line per (group, resource, verb, names), sorted: a role's grants, flattened. */
function grants(rules: readonly Rule[]): string[] {
  return rules
    .flatMap((r) =>
      (r.apiGroups ?? []).flatMap((g) =>
        (r.resources ?? []).flatMap((res) =>
          (r.verbs ?? []).map(
            (v) => `${g || 'core'} ${res} ${v}${r.resourceNames === undefined ? '' : ` [named]`}`,
          ),
        ),
      ),
    )
    .sort();
}

function calls(list: readonly { apiGroup: string; resource: string; verbs: readonly string[] }[]) {
  return list
    .flatMap((c) => c.verbs.map((v) => `${c.apiGroup || 'core'} ${c.resource} ${v}`))
    .sort();
}

const rbac = documents('rbac.yaml');
const find = (kind: string, name: string): Doc => {
  const doc = rbac.find((d) => d.kind === kind && d.metadata?.name === name);
  if (doc === undefined) throw new Error(`No ${kind} "${name}" in rbac.yaml`);
  return doc;
};

describe('deploy/kubernetes/rbac.yaml', () => {
  it('grants the gateway exactly the calls the resident makes', () => {
    const role = find('ClusterRole', 'egressguard-gateway');
    expect(grants(role.rules ?? []).map((g) => g.replace(' [named]', ''))).toEqual(
      calls(KUBE_CALLS.gateway),
    );
  });

  it('limits by name every grant RBAC can limit: the node patched and the policies annotated', () => {
    const role = find('ClusterRole', 'egressguard-gateway');
    // RBAC: resourceNames cannot restrict list (or create); everything else is named.
    for (const rule of role.rules ?? []) {
      const unnamed = (rule.verbs ?? []).filter((v) => v !== 'list' && v !== 'create');
      if (unnamed.length > 0) expect(rule.resourceNames, JSON.stringify(rule)).toBeDefined();
    }
  });

  it('grants doctor --k8s exactly two named reads in kube-system', () => {
    const role = find('Role', 'egressguard-doctor');
    expect(role.metadata?.namespace).toBe('kube-system');
    expect(grants(role.rules ?? []).map((g) => g.replace(' [named]', ''))).toEqual(
      calls(KUBE_CALLS.doctor),
    );
    for (const call of KUBE_CALLS.doctor) {
      const rule = role.rules?.find((r) => r.resources?.includes(call.resource));
      expect(rule?.resourceNames).toEqual(call.names);
    }
  });

  it("grants doctor --k8s's cluster-wide lists exactly, read only", () => {
    const role = find('ClusterRole', 'egressguard-doctor');
    expect(grants(role.rules ?? [])).toEqual(calls(KUBE_CALLS.doctorCluster));
    const binding = find('ClusterRoleBinding', 'egressguard-doctor');
    expect(binding.roleRef?.name).toBe('egressguard-doctor');
    expect(binding.subjects).toEqual([
      { kind: 'ServiceAccount', name: 'egressguard-gateway', namespace: 'egressguard' },
    ]);
  });

  it('has no wildcard, no non-resource URL and no escalation verb anywhere', () => {
    for (const doc of rbac.filter((d) => d.rules !== undefined)) {
      for (const rule of doc.rules ?? []) {
        const words = [...(rule.apiGroups ?? []), ...(rule.resources ?? []), ...(rule.verbs ?? [])];
        expect(words).not.toContain('*');
        expect(rule.nonResourceURLs).toBeUndefined();
        for (const verb of ['escalate', 'bind', 'impersonate', 'create', 'delete', 'update']) {
          expect(rule.verbs ?? []).not.toContain(verb);
        }
      }
    }
  });

  it('binds each role to the gateway service account, which exists with its token', () => {
    const account = find('ServiceAccount', 'egressguard-gateway');
    expect(account.metadata?.namespace).toBe('egressguard');
    const token = find('Secret', 'egressguard-gateway-token');
    expect(token.type).toBe('kubernetes.io/service-account-token');
    expect(token.metadata?.annotations?.['kubernetes.io/service-account.name']).toBe(
      'egressguard-gateway',
    );
    for (const [bindingKind, roleKind, name] of [
      ['ClusterRoleBinding', 'ClusterRole', 'egressguard-gateway'],
      ['RoleBinding', 'Role', 'egressguard-doctor'],
    ] as const) {
      const binding = find(bindingKind, name);
      expect(binding.roleRef).toEqual({
        apiGroup: 'rbac.authorization.k8s.io',
        kind: roleKind,
        name,
      });
      expect(binding.subjects).toEqual([
        { kind: 'ServiceAccount', name: 'egressguard-gateway', namespace: 'egressguard' },
      ]);
    }
  });

  it("names the example's gateway node and the egress gateway policy its compile writes", () => {
    // The names a user edits come from the example: its facts' hostname (the node the resident
    // patches) and the steering policy `compile --target cilium` writes for it.
    const example = join(folder, '../../testdata/policies/valid/k3s-vpn-egress');
    const facts = readHostFacts(join(example, 'facts.json'));
    const manifests = parseAllDocuments(
      readFileSync(join(example, 'expected.cilium.manifests.yaml'), 'utf8'),
    ).map((d) => d.toJS() as Doc & { metadata: { labels?: Record<string, string> } });
    const steering = manifests
      .filter(
        (m) =>
          m.kind === 'CiliumEgressGatewayPolicy' &&
          m.metadata.labels?.['egressguard.dev/role'] === 'steering',
      )
      .map((m) => m.metadata.name);
    const role = find('ClusterRole', 'egressguard-gateway');
    const named = (resource: string) =>
      (role.rules ?? [])
        .filter((r) => r.resources?.includes(resource) === true && r.resourceNames !== undefined)
        .flatMap((r) => r.resourceNames ?? []);
    expect(named('nodes')).toEqual([facts.hostname]);
    expect(named('ciliumegressgatewaypolicies')).toEqual(steering);
  });

  it('uses only API versions and kinds that exist, each object named', () => {
    const known = new Set([
      'v1/Namespace',
      'v1/ServiceAccount',
      'v1/Secret',
      'rbac.authorization.k8s.io/v1/ClusterRole',
      'rbac.authorization.k8s.io/v1/ClusterRoleBinding',
      'rbac.authorization.k8s.io/v1/Role',
      'rbac.authorization.k8s.io/v1/RoleBinding',
    ]);
    for (const doc of rbac) {
      expect(known).toContain(`${doc.apiVersion}/${doc.kind}`);
      expect(doc.metadata?.name).toMatch(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/);
    }
  });
});

describe('deploy/kubernetes/gateway-admission.yaml', () => {
  it('matches only the gateway service account, on Node updates, and denies', () => {
    const [policy, binding] = documents('gateway-admission.yaml') as [
      Doc & { spec: Record<string, unknown> },
      Doc & { spec: Record<string, unknown> },
    ];
    expect(policy.kind).toBe('ValidatingAdmissionPolicy');
    expect(JSON.stringify(policy.spec)).toContain(
      "'system:serviceaccount:egressguard:egressguard-gateway'",
    );
    expect(JSON.stringify(policy.spec)).toContain("k.startsWith('egressguard.dev/gateway-')");
    expect(binding.kind).toBe('ValidatingAdmissionPolicyBinding');
    expect(binding.spec).toMatchObject({
      policyName: policy.metadata?.name,
      validationActions: ['Deny'],
    });
  });
});

describe('deploy/kubernetes', () => {
  it('passes yamllint (Debian package, default rules, lines up to 100)', () => {
    const files = ['rbac.yaml', 'gateway-admission.yaml', 'gateway.kubeconfig'].map((f) =>
      join(folder, f),
    );
    const result = spawnSync('yamllint', ['-s', '-f', 'parsable', '-d', YAMLLINT, ...files], {
      encoding: 'utf8',
    });
    expect(result.error).toBeUndefined();
    expect(result.stdout).toBe('');
    expect(result.status).toBe(0);
  });

  it('ships a gateway unit that passes systemd-analyze verify', async () => {
    const result = await execa(
      'systemd-analyze',
      ['verify', join(folder, 'egressguard-gateway.service')],
      { reject: false },
    );
    expect(result.stderr).toBe('');
    expect(result.exitCode).toBe(0);
  });
});
