import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startKubeApiModel, type KubeApiModel } from '../../sim/cilium/kube-api-model.js';
import { REPO, runCli } from './run-cli.js';

// `egressguard doctor --k8s` through the built CLI: the checklist alone without credentials, and
// what the cluster says with a kubeconfig (the MODEL of the API server over HTTPS on loopback,
// serving kube-system/cilium-config and the cilium DaemonSet).

const tls = (file: string) =>
  readFileSync(join(REPO, 'src/backends/cilium/testdata/kube-api-tls', file), 'utf8');

let model: KubeApiModel;
let dir: string;
let kubeconfig: string;

beforeAll(async () => {
  model = await startKubeApiModel({
    users: [
      {
        name: 'doctor',
        token: 'doctor-token',
        rules: [
          { verbs: ['get'], resource: 'configmaps', namespace: 'kube-system' },
          { verbs: ['get'], resource: 'daemonsets', namespace: 'kube-system' },
        ],
      },
    ],
    configMaps: [
      {
        namespace: 'kube-system',
        name: 'cilium-config',
        data: {
          'enable-ipv4-egress-gateway': 'true',
          'enable-bpf-masquerade': 'true',
          'kube-proxy-replacement': 'false',
          'identity-allocation-mode': 'crd',
        },
      },
    ],
    daemonSets: [
      { namespace: 'kube-system', name: 'cilium', images: ['quay.io/cilium/cilium:v1.18.2'] },
    ],
    tls: { key: tls('server.key'), cert: tls('server.crt'), ca: tls('ca.crt') },
  });
  dir = mkdtempSync(join(tmpdir(), 'doctor-k8s-'));
  kubeconfig = join(dir, 'doctor.kubeconfig');
  writeFileSync(kubeconfig, model.kubeconfig('doctor'));
});

afterAll(async () => {
  await model.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('egressguard doctor --k8s', () => {
  it('prints the checklist without a kubeconfig and exits 0', async () => {
    const result = await runCli(['doctor', '--k8s']);
    expect(result.exitCode).toBe(0);
    expect(result.stdout).toContain('What must hold on the cluster');
    expect(result.stdout).toContain(
      'must-identity-allocation-crd: Must hold: identity allocation mode is crd',
    );
    const json = await runCli(['doctor', '--k8s', '--json']);
    const report = JSON.parse(json.stdout) as { findings: { code: string }[] };
    expect(report.findings.map((f) => f.code)).toContain('must-no-cluster-mesh');
  });

  it('reads the cluster with a kubeconfig and exits 1 on a requirement not met', async () => {
    const result = await runCli(['doctor', '--k8s', '--kubeconfig', kubeconfig]);
    expect(result.stderr).toBe('');
    expect(result.exitCode).toBe(1);
    expect(result.stdout).toContain(
      'kube-proxy-replacement-disabled: Not met: kube-proxy replacement is on (kube-proxy-replacement: "false")',
    );
    expect(result.stdout).toContain('quay.io/cilium/cilium:v1.18.2');
    expect(result.stdout).toContain('1 error');
  });

  it('refuses a policy with --k8s, and --kubeconfig without --k8s', async () => {
    const policy = join(REPO, 'testdata/policies/valid/k3s-vpn-egress/policy.yaml');
    const both = await runCli(['doctor', policy, '--k8s']);
    expect(both.exitCode).toBe(2);
    expect(both.stderr).toContain('with --k8s');
    const alone = await runCli(['doctor', '--kubeconfig', kubeconfig]);
    expect(alone.exitCode).toBe(2);
    expect(alone.stderr).toContain('Cannot use --kubeconfig without --k8s');
  });
});
