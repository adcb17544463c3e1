import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { ciliumClusterSupport } from './cluster-support.js';
import {
  startKubeApiModel,
  type AccessRule,
  type ModelResource,
  type Verb,
} from '../../../sim/cilium/kube-api-model.js';
import type { JsonValue } from './json-patch.js';
import { testCiliumEndpoint as endpoint, testPod as pod } from '../../../sim/cilium/test-pods.js';

// doctor --k8s through the front door: the cluster support reads kube-system/cilium-config and
// the cilium DaemonSet from the MODEL of the API server (kube-api-model.ts) with
// @kubernetes/client-node and a kubeconfig, as the doctor Role of deploy/kubernetes/rbac.yaml
// allows. Config keys as Cilium's Helm chart writes them (cluster-doctor.ts cites the sources).

const tls = (file: string) =>
  readFileSync(new URL(`testdata/kube-api-tls/${file}`, import.meta.url), 'utf8');
const dir = mkdtempSync(join(tmpdir(), 'cluster-doctor-'));
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

/** The doctor Role's and ClusterRole's rules, as written in deploy/kubernetes/rbac.yaml. */
function doctorRules(): AccessRule[] {
  const text = readFileSync(
    new URL('../../../deploy/kubernetes/rbac.yaml', import.meta.url),
    'utf8',
  );
  const role = parseAllDocuments(text)
    .map(
      (d) =>
        d.toJS() as {
          kind?: string;
          metadata?: { name?: string; namespace?: string };
          rules?: { resources: string[]; verbs: string[]; resourceNames?: string[] }[];
        },
    )
    .filter(
      (d) =>
        (d.kind === 'Role' || d.kind === 'ClusterRole') &&
        d.metadata?.name === 'egressguard-doctor',
    );
  return role.flatMap((r) =>
    (r.rules ?? []).flatMap((rule) =>
      rule.resources.map((resource) => ({
        verbs: rule.verbs as Verb[],
        resource: resource as ModelResource,
        ...(r.metadata?.namespace === undefined ? {} : { namespace: r.metadata.namespace }),
        ...(rule.resourceNames === undefined ? {} : { resourceNames: rule.resourceNames }),
      })),
    ),
  );
}

// The example's compiled egress gateway policies and its gateway node, carrying its label.
const COMPILED = parseAllDocuments(
  readFileSync(
    new URL(
      '../../../testdata/policies/valid/k3s-vpn-egress/expected.cilium.manifests.yaml',
      import.meta.url,
    ),
    'utf8',
  ),
)
  .map((d) => d.toJS() as JsonValue & { kind: string; metadata: { name: string } })
  .filter((m) => m.kind === 'CiliumEgressGatewayPolicy');
const GATEWAY = { name: 'k3s-gw-1', labels: { 'egressguard.dev/gateway-vpn': 'up' } };

const VPN = { 'egress-class': 'vpn' };
// A running pod of the class, held by the gate when it started and steerable; a pod of no class.
const GOOD_PODS = [pod('vpn-1', VPN), pod('web-1', { app: 'web' }, { gate: false })];
const GOOD_ENDPOINTS = [
  endpoint('vpn-1'),
  endpoint('web-1', { labels: ['k8s:app=web', 'k8s:io.kubernetes.pod.namespace=apps'] }),
];

const GOOD_CONFIG = {
  'enable-ipv4-egress-gateway': 'true',
  'enable-bpf-masquerade': 'true',
  'kube-proxy-replacement': 'true',
  'identity-allocation-mode': 'crd',
  'cluster-id': '0',
  'cluster-name': 'default',
  devices: 'eth0 tun0',
};

async function diagnoseWith(options: {
  config?: Record<string, string> | undefined;
  image?: string;
  rules?: AccessRule[];
  policies?: JsonValue[];
  ciliumNodes?: { name: string; labels: Record<string, string> }[];
  pods?: JsonValue[];
  endpoints?: JsonValue[];
}) {
  const model = await startKubeApiModel({
    users: [{ name: 'doctor', token: 'doctor-token', rules: options.rules ?? doctorRules() }],
    nodes: [GATEWAY, { name: 'k3s-worker-1' }],
    egressGatewayPolicies: options.policies ?? COMPILED,
    ...(options.ciliumNodes === undefined ? {} : { ciliumNodes: options.ciliumNodes }),
    pods: options.pods ?? GOOD_PODS,
    ciliumEndpoints: options.endpoints ?? GOOD_ENDPOINTS,
    configMaps:
      options.config === undefined
        ? []
        : [{ namespace: 'kube-system', name: 'cilium-config', data: options.config }],
    daemonSets: [
      {
        namespace: 'kube-system',
        name: 'cilium',
        images: [options.image ?? 'quay.io/cilium/cilium:v1.18.2@sha256:0123'],
      },
    ],
    tls: { key: tls('server.key'), cert: tls('server.crt'), ca: tls('ca.crt') },
  });
  try {
    const file = join(dir, `${Math.random().toString(36).slice(2)}.kubeconfig`);
    writeFileSync(file, model.kubeconfig('doctor'));
    const report = await ciliumClusterSupport.diagnose({ credentials: file });
    return { report, requests: [...model.requests] };
  } finally {
    await model.close();
  }
}

const codes = (report: { findings: readonly { severity: string; code: string }[] }) =>
  report.findings.filter((f) => f.severity !== 'info').map((f) => f.code);

describe('doctor --k8s (cluster support, against the API model)', () => {
  it('finds nothing wrong on a cluster that meets every requirement', async () => {
    const { report, requests } = await diagnoseWith({ config: GOOD_CONFIG });
    expect(codes(report)).toEqual([]);
    expect(report.summary.errors).toBe(0);
    expect(report.tables[0]?.rows.map((r) => r[2])).toEqual([
      'ok',
      'ok',
      'ok',
      'ok',
      'ok',
      'ok',
      'ok',
      'BPF (when the kernel allows)',
      'ok',
    ]);
    // Exactly the reads the doctor Role and ClusterRole grant, all allowed.
    expect(requests.map((r) => `${r.verb} ${r.path} ${r.status}`).sort()).toEqual([
      'get /api/v1/namespaces/kube-system/configmaps/cilium-config 200',
      'get /apis/apps/v1/namespaces/kube-system/daemonsets/cilium 200',
      'list /api/v1/nodes 200',
      'list /api/v1/pods 200',
      'list /apis/cilium.io/v2/ciliumegressgatewaypolicies 200',
      'list /apis/cilium.io/v2/ciliumendpoints 200',
      'list /apis/cilium.io/v2/ciliumnodes 200',
    ]);
    // The pods are listed by the steering policy's pod labels, not all of them.
    expect(requests.find((r) => r.path === '/api/v1/pods')?.query).toEqual({
      labelSelector: 'egress-class=vpn',
    });
  });

  it('names every requirement that does not hold, with what it saw', async () => {
    const { report } = await diagnoseWith({
      config: {
        'enable-ipv4-egress-gateway': 'false',
        'kube-proxy-replacement': 'false',
        'identity-allocation-mode': 'kvstore',
        'enable-policy': 'never',
        'cluster-id': '3',
        'enable-cilium-endpoint-slice': 'true',
      },
      image: 'quay.io/cilium/cilium:v1.16.5',
    });
    expect(codes(report)).toEqual([
      'egress-gateway-disabled',
      'bpf-masquerade-disabled',
      'kube-proxy-replacement-disabled',
      'identity-allocation-not-crd',
      'policy-enforcement-never',
      'cluster-mesh-in-use',
      'endpoint-slice-enabled',
      'cilium-version-unsupported',
      'devices-auto-detected',
    ]);
    const message = (code: string) => report.findings.find((f) => f.code === code)?.message;
    expect(message('bpf-masquerade-disabled')).toContain('enable-bpf-masquerade is not set');
    expect(message('identity-allocation-not-crd')).toContain('identity-allocation-mode: "kvstore"');
    expect(message('cilium-version-unsupported')).toContain('runs 1.16');
  });

  it('takes the 1.19 name of the egress gateway option', async () => {
    const config: Record<string, string> = { ...GOOD_CONFIG, 'enable-egress-gateway': 'true' };
    Reflect.deleteProperty(config, 'enable-ipv4-egress-gateway');
    const { report } = await diagnoseWith({ config });
    expect(codes(report)).toEqual([]);
  });

  it('reports what it cannot read, with the API server’s reason', async () => {
    const missing = await diagnoseWith({ config: undefined });
    expect(codes(missing.report)).toEqual(['cilium-config-unreadable']);
    expect(missing.report.findings[0]?.message).toContain('configmaps "cilium-config" not found');
    const forbidden = await diagnoseWith({ config: GOOD_CONFIG, rules: [] });
    expect(codes(forbidden.report)).toEqual([
      'cilium-config-unreadable',
      'cilium-version-unknown',
      'cluster-list-unreadable',
      'cluster-list-unreadable',
    ]);
    expect(forbidden.report.findings[0]?.message).toContain('HTTP 403');
  });

  it("checks that the agent's devices cover the egress gateway's interface", async () => {
    const { report } = await diagnoseWith({ config: { ...GOOD_CONFIG, devices: 'eth0' } });
    expect(codes(report)).toEqual(['egress-interface-not-in-devices']);
    expect(report.findings.find((f) => f.severity === 'error')?.hint).toContain(
      "devices='eth0 tun0'",
    );
    const wildcard = await diagnoseWith({ config: { ...GOOD_CONFIG, devices: 'eth+,tun+' } });
    expect(codes(wildcard.report)).toEqual([]);
    const unset: Record<string, string> = { ...GOOD_CONFIG };
    Reflect.deleteProperty(unset, 'devices');
    expect(codes((await diagnoseWith({ config: unset })).report)).toEqual([
      'devices-auto-detected',
    ]);
  });

  it('finds a CiliumNode that still carries a gateway label its Node lost (the egress gateway reads the CiliumNode)', async () => {
    // The gateway's CiliumNode lost the label its Node has; the worker's kept one its Node lost.
    const stale = await diagnoseWith({
      config: GOOD_CONFIG,
      ciliumNodes: [
        { name: 'k3s-gw-1', labels: { 'kubernetes.io/hostname': 'k3s-gw-1' } },
        {
          name: 'k3s-worker-1',
          labels: { 'kubernetes.io/hostname': 'k3s-worker-1', 'egressguard.dev/gateway-vpn': 'up' },
        },
      ],
    });
    expect(codes(stale.report)).toEqual([
      'ciliumnode-gateway-label-differs',
      'ciliumnode-gateway-label-differs',
    ]);
  });

  it('finds a missing backstop and a steering policy Cilium refuses', async () => {
    const [steering, backstop] = COMPILED as unknown as [
      { spec: { egressGateway: Record<string, unknown> } } & Record<string, JsonValue>,
      JsonValue,
    ];
    expect(
      codes((await diagnoseWith({ config: GOOD_CONFIG, policies: [steering] })).report),
    ).toEqual(['backstop-policy-missing']);
    const refused = {
      ...steering,
      spec: {
        ...steering.spec,
        egressGateway: { ...steering.spec.egressGateway, egressIP: '10.200.0.2' },
      },
    };
    const { report } = await diagnoseWith({ config: GOOD_CONFIG, policies: [refused, backstop] });
    expect(codes(report)).toEqual(['egress-policy-refused']);
    expect(report.findings.find((f) => f.code === 'egress-policy-refused')?.message).toContain(
      'both interface and egressIP',
    );
  });

  it('finds running pods of the class that Cilium cannot steer, each with why', async () => {
    const cases: [string, JsonValue[], JsonValue[]][] = [
      ['class-pods-no-cilium-endpoint', [pod('vpn-1', VPN)], []],
      ['class-pods-host-network', [pod('vpn-1', VPN, { hostNetwork: true })], []],
      ['class-pods-no-identity', [pod('vpn-1', VPN)], [endpoint('vpn-1', { labels: null })]],
      ['class-pods-no-address', [pod('vpn-1', VPN)], [endpoint('vpn-1', { address: false })]],
      // Cilium's label filter kept the namespace but not the class label.
      [
        'class-pods-identity-lacks-class-labels',
        [pod('vpn-1', VPN)],
        [endpoint('vpn-1', { labels: ['k8s:io.kubernetes.pod.namespace=apps'] })],
      ],
      ['class-pods-no-tunnel-gate', [pod('vpn-1', VPN, { gate: false })], [endpoint('vpn-1')]],
    ];
    for (const [code, pods, endpoints] of cases) {
      const { report } = await diagnoseWith({ config: GOOD_CONFIG, pods, endpoints });
      expect(codes(report), code).toEqual([code]);
      const found = report.findings.find((f) => f.code === code);
      expect(found?.message).toContain('apps/vpn-1 on k3s-worker-1');
      expect(found?.message).toContain('"egressguard-k3s-vpn-egress-vpn"');
      expect(found?.severity).toBe(code === 'class-pods-no-tunnel-gate' ? 'warning' : 'error');
    }
    // A pod still in Init is held by its gate: nothing to report until its workload runs.
    const held = await diagnoseWith({
      config: GOOD_CONFIG,
      pods: [pod('vpn-1', VPN, { phase: 'Pending' })],
      endpoints: [],
    });
    expect(codes(held.report)).toEqual([]);
  });

  it('prints the checklist without credentials, reading nothing', async () => {
    const report = await ciliumClusterSupport.diagnose({ credentials: undefined });
    expect(report.findings.map((f) => f.code)).toEqual([
      'must-egress-gateway',
      'must-bpf-masquerade',
      'must-kube-proxy-replacement',
      'must-identity-allocation-crd',
      'must-network-policy',
      'must-no-cluster-mesh',
      'must-no-endpoint-slice',
      'must-cilium-version',
      'pod-traffic-bypasses-node-nftables',
    ]);
    expect(report.summary).toEqual({ errors: 0, warnings: 0, infos: 9 });
  });
});
