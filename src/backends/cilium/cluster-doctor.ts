import type { DoctorFinding, DoctorReport, DoctorSeverity } from '../backend.js';
import {
  SUPPORTED_CILIUM_VERSIONS,
  formatCiliumVersion,
  isSupportedCiliumVersion,
  parseCiliumVersion,
} from './cilium-version.js';

/**
 * What must hold on a cluster for the egress gateway to be egressguard's kill switch, and what
 * the cluster says about each (`doctor --k8s`). Requirements from the EGW doc ("Preliminary
 * Considerations", "Incompatibility with other features"; ../shared/reference/cilium/NOTES.md):
 * egress gateway enabled, BPF masquerading, kube-proxy replacement, identity allocation mode
 * `crd`, no Cluster Mesh and no CiliumEndpointSlice; network policy enforced (the class's rules
 * are network policy); and a Cilium release the pinned schemas cover. Keys are those of the `cilium-config` ConfigMap the Helm chart writes.
 */
export interface ClusterSnapshot {
  /** The cilium-config ConfigMap's data, or why it could not be read. */
  readonly config: { readonly data: Readonly<Record<string, string>> } | { readonly error: string };
  /** The cilium DaemonSet's images, or why they could not be read. */
  readonly images: { readonly data: readonly string[] } | { readonly error: string };
}

interface Check {
  /** The finding's code when it does not hold. */
  readonly code: string;
  /** The checklist's code (`must-<item>`) when nothing is read. */
  readonly item: string;
  readonly requirement: string;
  /** What to set when it does not hold. */
  readonly fix: string;
  /** Whether it holds, and what was seen. */
  judge(config: Readonly<Record<string, string>>): { ok: boolean; seen: string };
}

const isTrue = (value: string | undefined): boolean => value?.toLowerCase() === 'true';
const show = (key: string, value: string | undefined): string =>
  value === undefined ? `${key} is not set` : `${key}: "${value}"`;

const CHECKS: readonly Check[] = [
  {
    code: 'egress-gateway-disabled',
    item: 'egress-gateway',
    requirement: 'the egress gateway is enabled',
    fix: 'Helm: --set egressGateway.enabled=true, then restart the cilium DaemonSet and operator',
    judge(config) {
      // 1.19 renamed the option (enable-ipv4-egress-gateway → enable-egress-gateway).
      const key =
        'enable-egress-gateway' in config ? 'enable-egress-gateway' : 'enable-ipv4-egress-gateway';
      return { ok: isTrue(config[key]), seen: show(key, config[key]) };
    },
  },
  {
    code: 'bpf-masquerade-disabled',
    item: 'bpf-masquerade',
    requirement: 'BPF masquerading is enabled',
    fix: 'Helm: --set bpf.masquerade=true',
    judge: (config) => ({
      ok: isTrue(config['enable-bpf-masquerade']),
      seen: show('enable-bpf-masquerade', config['enable-bpf-masquerade']),
    }),
  },
  {
    code: 'kube-proxy-replacement-disabled',
    item: 'kube-proxy-replacement',
    requirement: 'kube-proxy replacement is on',
    fix: 'Helm: --set kubeProxyReplacement=true (k3s: start the server with --disable-kube-proxy)',
    judge: (config) => {
      const value = config['kube-proxy-replacement'];
      // "strict" is the pre-1.14 spelling of "true".
      return {
        ok: value === 'true' || value === 'strict',
        seen: show('kube-proxy-replacement', value),
      };
    },
  },
  {
    code: 'identity-allocation-not-crd',
    item: 'identity-allocation-crd',
    requirement: 'identity allocation mode is crd',
    fix: 'Helm: --set identityAllocationMode=crd',
    judge: (config) => ({
      ok: config['identity-allocation-mode'] === 'crd',
      seen: show('identity-allocation-mode', config['identity-allocation-mode']),
    }),
  },
  {
    code: 'policy-enforcement-never',
    item: 'network-policy',
    requirement: 'network policy is enforced (the class rules and default deny are network policy)',
    fix: 'Helm: --set policyEnforcementMode=default',
    // intro.rst, "Policy Enforcement Modes": with "never", "policy enforcement is disabled on all
    // endpoints, even if rules do select specific endpoints".
    judge: (config) => ({
      ok: config['enable-policy'] !== 'never',
      seen: show('enable-policy', config['enable-policy']),
    }),
  },
  {
    code: 'cluster-mesh-in-use',
    item: 'no-cluster-mesh',
    requirement: 'no Cluster Mesh (the egress gateway is incompatible with it)',
    fix: 'run the egress gateway on a cluster that is not part of a Cluster Mesh',
    judge: (config) => {
      const id = config['cluster-id'];
      const mesh = 'clustermesh-config' in config || (id !== undefined && id !== '' && id !== '0');
      return {
        ok: !mesh,
        seen:
          'clustermesh-config' in config
            ? `clustermesh-config: "${config['clustermesh-config'] ?? ''}"`
            : show('cluster-id', id),
      };
    },
  },
  {
    code: 'endpoint-slice-enabled',
    item: 'no-endpoint-slice',
    requirement: 'CiliumEndpointSlice is off (the egress gateway is incompatible with it)',
    fix: 'Helm: --set ciliumEndpointSlice.enabled=false',
    judge: (config) => ({
      ok: !isTrue(config['enable-cilium-endpoint-slice']),
      seen: show('enable-cilium-endpoint-slice', config['enable-cilium-endpoint-slice']),
    }),
  },
];

const VERSION_REQUIREMENT = `Cilium ${SUPPORTED_CILIUM_VERSIONS.join(' or ')} (what the pinned schemas cover)`;

/** The checklist without a cluster to read: what must hold, and how to check it by hand. */
export function clusterChecklist(): DoctorReport {
  const findings: DoctorFinding[] = [
    ...CHECKS.map((check) =>
      finding(
        'info',
        'requirements',
        `must-${check.item}`,
        `Must hold: ${check.requirement}`,
        `${check.fix}; read it with: kubectl -n kube-system get configmap cilium-config -o yaml`,
      ),
    ),
    finding(
      'info',
      'requirements',
      'must-cilium-version',
      `Must hold: ${VERSION_REQUIREMENT}`,
      'read it with: kubectl -n kube-system get daemonset cilium -o jsonpath="{.spec.template.spec.containers[0].image}"',
    ),
    HOST_ROUTING_NOTE,
  ];
  return report(findings, [
    {
      title: 'Read from the cluster',
      header: ['requirement', 'seen'],
      rows: [['(no --kubeconfig given: nothing read)', '']],
    },
  ]);
}

/** Judges what was read from the cluster. */
export function diagnoseCluster(snapshot: ClusterSnapshot): DoctorReport {
  const findings: DoctorFinding[] = [];
  const rows: string[][] = [];
  if ('error' in snapshot.config) {
    findings.push(
      finding(
        'error',
        'cilium-config',
        'cilium-config-unreadable',
        snapshot.config.error,
        'check that Cilium is installed in kube-system and that the credentials may get configmaps/cilium-config (deploy/kubernetes/rbac.yaml, doctor role)',
      ),
    );
  } else {
    const config = snapshot.config.data;
    for (const check of CHECKS) {
      const { ok, seen } = check.judge(config);
      rows.push([check.requirement, seen, ok ? 'ok' : 'NOT MET']);
      if (!ok) {
        findings.push(
          finding(
            'error',
            'cilium-config',
            check.code,
            `Not met: ${check.requirement} (${seen})`,
            check.fix,
          ),
        );
      }
    }
    const legacy = isTrue(config['enable-host-legacy-routing']);
    rows.push([
      'host routing',
      show('enable-host-legacy-routing', config['enable-host-legacy-routing']),
      legacy ? 'legacy' : 'BPF (when the kernel allows)',
    ]);
  }
  if ('error' in snapshot.images) {
    findings.push(
      finding(
        'warning',
        'cilium-version',
        'cilium-version-unknown',
        `${snapshot.images.error}: the Cilium version is unknown`,
        `check by hand that the cluster runs ${VERSION_REQUIREMENT}`,
      ),
    );
  } else {
    const images = snapshot.images.data;
    const versions = images.flatMap((image) => {
      const tag = /:(v?\d+\.\d+(?:\.\d+)?)(?:@|$)/.exec(image)?.[1];
      const parsed = tag === undefined ? undefined : parseCiliumVersion(tag);
      return parsed === undefined ? [] : [{ image, version: parsed }];
    });
    const first = versions[0];
    if (first === undefined) {
      findings.push(
        finding(
          'warning',
          'cilium-version',
          'cilium-version-unknown',
          `Cannot tell the Cilium version from the images ${images.map((i) => `"${i}"`).join(', ') || '(none)'}`,
          `check by hand that the cluster runs ${VERSION_REQUIREMENT}`,
        ),
      );
    } else {
      const supported = isSupportedCiliumVersion(first.version);
      rows.push([VERSION_REQUIREMENT, first.image, supported ? 'ok' : 'NOT MET']);
      if (!supported) {
        findings.push(
          finding(
            'error',
            'cilium-version',
            'cilium-version-unsupported',
            `Not met: ${VERSION_REQUIREMENT} (the cilium DaemonSet runs ${formatCiliumVersion(first.version)})`,
            `compile with --cilium-version for the release the cluster runs, or upgrade Cilium to ${SUPPORTED_CILIUM_VERSIONS.join(' or ')}`,
          ),
        );
      }
    }
  }
  findings.push(HOST_ROUTING_NOTE);
  return report(findings, [
    { title: 'Read from the cluster', header: ['requirement', 'seen', 'verdict'], rows },
  ]);
}

const HOST_ROUTING_NOTE = finding(
  'info',
  'layers',
  'pod-traffic-bypasses-node-nftables',
  'Pod traffic under the egress gateway is enforced by Cilium, not by the node nftables table: with BPF host routing (the egress gateway requirements switch it on, kernel ≥ 5.10) it never passes netfilter',
  'the node label is the kill switch for pod traffic (egressguard run --k8s on the gateway node); the nftables table covers node-originated traffic only',
);

function finding(
  severity: DoctorSeverity,
  area: string,
  code: string,
  message: string,
  hint: string,
): DoctorFinding {
  return { severity, area, code, message, hint };
}

function report(findings: DoctorFinding[], tables: DoctorReport['tables']): DoctorReport {
  return {
    findings,
    areas: [
      { id: 'requirements', title: 'What must hold on the cluster' },
      { id: 'cilium-config', title: 'Cilium configuration (kube-system/cilium-config)' },
      { id: 'cilium-version', title: 'Cilium version (kube-system/cilium)' },
      { id: 'layers', title: 'Which layer enforces pod traffic' },
    ],
    tables,
    summary: {
      errors: findings.filter((f) => f.severity === 'error').length,
      warnings: findings.filter((f) => f.severity === 'warning').length,
      infos: findings.filter((f) => f.severity === 'info').length,
    },
  };
}
