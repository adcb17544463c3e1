import type { DoctorFinding, DoctorReport, DoctorSeverity } from '../backend.js';
import { ROLE_LABEL } from './cilium-compiler.js';
import type {
  CiliumEndpointObject,
  EgressGatewayPolicyObject,
  NamedLabels,
  PodObject,
} from './kube-client.js';
import { findUnsteeredPods, type UnsteeredPod, type UnsteeredReason } from './unsteered-pods.js';
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
  /** Every Node's and CiliumNode's labels, and the egress gateway policies (absent: not read). */
  readonly nodes?: Readable<readonly NamedLabels[]>;
  readonly ciliumNodes?: Readable<readonly NamedLabels[]>;
  readonly egressPolicies?: Readable<readonly EgressGatewayPolicyObject[]>;
  /** The pods egressguard's steering policies select, and every CiliumEndpoint (absent: not read). */
  readonly pods?: Readable<readonly PodObject[]>;
  readonly endpoints?: Readable<readonly CiliumEndpointObject[]>;
}

type Readable<T> = { readonly data: T } | { readonly error: string };

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
  findings.push(...diagnoseEgressGateway(snapshot));
  findings.push(HOST_ROUTING_NOTE);
  return report(findings, [
    { title: 'Read from the cluster', header: ['requirement', 'seen', 'verdict'], rows },
  ]);
}

/** Whether Cilium's `devices` option names an interface: by name, or by a prefix ending in "+". */
function devicesCover(devices: readonly string[], iface: string): boolean {
  return devices.some((d) => (d.endsWith('+') ? iface.startsWith(d.slice(0, -1)) : d === iface));
}

const GATEWAY_LABEL_PREFIX = 'egressguard.dev/gateway-';

/**
 * egressguard's own egress gateway objects on the cluster: each tunnel class's steering and
 * backstop policies present and accepted by Cilium, the tunnel interface among the agent's
 * `devices`, and every CiliumNode carrying its Node's labels (Cilium's egress gateway selects
 * gateways by CiliumNode: manager.go handleNodeEvent; the node's own agent copies the Node's
 * labels there, daemon/cmd/local_node_sync.go and pkg/nodediscovery mutateNodeResource).
 */
function diagnoseEgressGateway(snapshot: ClusterSnapshot): DoctorFinding[] {
  const findings: DoctorFinding[] = [];
  const unreadable = (what: string, read: Readable<unknown> | undefined): boolean => {
    if (read === undefined || !('error' in read)) return read === undefined;
    findings.push(
      finding(
        'warning',
        'egress-gateway',
        'cluster-list-unreadable',
        `${read.error}: ${what} not checked`,
        'grant the doctor the ClusterRole egressguard-doctor of deploy/kubernetes/rbac.yaml',
      ),
    );
    return true;
  };
  const policies = snapshot.egressPolicies;
  if (
    !unreadable('the egress gateway policies', policies) &&
    policies !== undefined &&
    'data' in policies
  ) {
    const mine = ours(policies.data);
    const classes = new Map<string, EgressGatewayPolicyObject[]>();
    for (const p of mine) {
      const key = `${p.labels['egressguard.dev/policy'] ?? '?'}/${p.labels['egressguard.dev/class'] ?? '?'}`;
      classes.set(key, [...(classes.get(key) ?? []), p]);
    }
    for (const [key, list] of classes) {
      for (const role of ['steering', 'backstop']) {
        if (!list.some((p) => p.labels[ROLE_LABEL] === role)) {
          findings.push(
            finding(
              'error',
              'egress-gateway',
              `${role}-policy-missing`,
              `Class ${key} has no ${role} egress gateway policy: ${role === 'steering' ? 'its pods are dropped by the backstop (no egress at all)' : 'a deleted or refused steering policy would let its pods leave unsteered'}`,
              "re-apply egressguard's compiled manifests.yaml",
            ),
          );
        }
      }
    }
    for (const p of mine) {
      if (p.refused !== undefined) {
        findings.push(
          finding(
            'error',
            'egress-gateway',
            'egress-policy-refused',
            `Cilium refuses egress gateway policy "${p.name}" (${p.refused}): it keeps the last version it accepted, or none`,
            "re-apply egressguard's compiled manifests.yaml; never edit them by hand",
          ),
        );
      }
    }
    const config = 'data' in snapshot.config ? snapshot.config.data : undefined;
    const interfaces = [
      ...new Set(mine.flatMap((p) => (p.interface === undefined ? [] : [p.interface]))),
    ];
    const devicesText = config?.['devices'];
    if (config !== undefined && interfaces.length > 0) {
      // EGW doc: "the user must ensure that Cilium is running on the device that has the egress IP
      // assigned to it, by setting the --devices agent option accordingly".
      if (devicesText === undefined || devicesText.trim() === '') {
        findings.push(
          finding(
            'warning',
            'egress-gateway',
            'devices-auto-detected',
            `devices is not set: Cilium picks its devices itself, and must run on ${interfaces.map((i) => `"${i}"`).join(', ')} (the egress gateway's interface)`,
            `check that \`cilium status\` on the gateway node lists it, or set Helm --set devices='<uplink> ${interfaces.join(' ')}'`,
          ),
        );
      } else {
        const devices = devicesText.split(/[\s,]+/).filter((d) => d !== '');
        for (const iface of interfaces.filter((i) => !devicesCover(devices, i))) {
          findings.push(
            finding(
              'error',
              'egress-gateway',
              'egress-interface-not-in-devices',
              `Not met: the egress gateway's interface "${iface}" is among Cilium's devices (devices: "${devicesText}")`,
              `Helm: --set devices='${[...devices, iface].join(' ')}', then restart the cilium DaemonSet`,
            ),
          );
        }
      }
    }
  }
  if (
    policies !== undefined &&
    'data' in policies &&
    !unreadable("the class's pods", snapshot.pods) &&
    !unreadable('the CiliumEndpoints', snapshot.endpoints) &&
    snapshot.pods !== undefined &&
    'data' in snapshot.pods &&
    snapshot.endpoints !== undefined &&
    'data' in snapshot.endpoints
  ) {
    findings.push(
      ...diagnosePods(
        findUnsteeredPods({
          steering: ours(policies.data).filter((p) => p.labels[ROLE_LABEL] === 'steering'),
          pods: snapshot.pods.data,
          endpoints: snapshot.endpoints.data,
        }),
      ),
    );
  }
  const nodes = snapshot.nodes;
  const ciliumNodes = snapshot.ciliumNodes;
  if (
    !unreadable('the Node labels', nodes) &&
    !unreadable('the CiliumNode labels', ciliumNodes) &&
    nodes !== undefined &&
    'data' in nodes &&
    ciliumNodes !== undefined &&
    'data' in ciliumNodes
  ) {
    for (const node of nodes.data) {
      const cilium = ciliumNodes.data.find((c) => c.name === node.name);
      if (cilium === undefined) continue;
      const keys = new Set([...Object.keys(node.labels), ...Object.keys(cilium.labels)]);
      const differ = [...keys].filter((k) => node.labels[k] !== cilium.labels[k]).sort();
      if (differ.length === 0) continue;
      const gateway = differ.some((k) => k.startsWith(GATEWAY_LABEL_PREFIX));
      findings.push(
        finding(
          gateway ? 'error' : 'warning',
          'egress-gateway',
          gateway ? 'ciliumnode-gateway-label-differs' : 'ciliumnode-labels-differ',
          `The CiliumNode of node "${node.name}" does not carry its Node's labels (${differ.map((k) => `${k}: Node "${node.labels[k] ?? '(none)'}", CiliumNode "${cilium.labels[k] ?? '(none)'}"`).join('; ')})${gateway ? ": Cilium's egress gateway selects by the CiliumNode, so it still follows the old gateway label" : ''}`,
          "check the cilium agent on that node (it copies the Node's labels to its CiliumNode); the gateway resident takes a gateway label off both",
        ),
      );
    }
  }
  return findings;
}

/** egressguard's own egress gateway policies. */
export function ours(policies: readonly EgressGatewayPolicyObject[]): EgressGatewayPolicyObject[] {
  return policies.filter((p) => p.labels['app.kubernetes.io/managed-by'] === 'egressguard');
}

/** Why each kind of pod has no egress gateway entry, and what to do. */
const UNSTEERED: Readonly<
  Record<UnsteeredReason, { severity: DoctorSeverity; why: string; hint: string }>
> = {
  'host-network': {
    severity: 'error',
    why: "use the host's network: their traffic is the node's, which no egress gateway policy steers",
    hint: 'apply admission.yaml (it refuses such pods) and recreate them without hostNetwork',
  },
  'no-cilium-endpoint': {
    severity: 'error',
    why: 'have no CiliumEndpoint: Cilium does not manage them (the cilium agent on their node is not running, or they started before it), so the egress gateway has no entry for them and they leave unsteered by their node',
    hint: 'check the cilium agent on their node (kubectl -n kube-system get pods -l k8s-app=cilium -o wide), then delete the pods so they start again under Cilium',
  },
  'no-identity': {
    severity: 'error',
    why: 'have a CiliumEndpoint without an identity: the egress gateway skips an endpoint until it has one, and they leave unsteered by their node',
    hint: 'check the cilium agent and operator logs for identity allocation errors',
  },
  'no-address': {
    severity: 'error',
    why: 'have a CiliumEndpoint without an address: the egress gateway has nothing to program for them',
    hint: 'check the cilium agent on their node',
  },
  'identity-lacks-class-labels': {
    severity: 'error',
    why: "have a Cilium identity without the class's labels: Cilium's label filter (its `labels` option) leaves them out, so the steering policy never selects the pods and they leave unsteered by their node",
    hint: "let the class's label keys into the identity (Helm --set labels='k8s:<key> …', keeping the keys you use today), or choose class labels Cilium keeps; then restart the cilium agents",
  },
  'no-tunnel-gate': {
    severity: 'warning',
    why: 'run without the tunnel gate as their first init container: they were never held until Cilium steered them, and may have sent traffic unsteered when they started',
    hint: 'apply admission.yaml, list the container of tunnel-gate.yaml first in their spec, and restart them',
  },
};

/** One finding per kind of pod that has no egress gateway entry (or was never held by the gate). */
function diagnosePods(unsteered: readonly UnsteeredPod[]): DoctorFinding[] {
  return (Object.keys(UNSTEERED) as UnsteeredReason[]).flatMap((reason) => {
    const pods = unsteered.filter((p) => p.reason === reason);
    if (pods.length === 0) return [];
    const { severity, why, hint } = UNSTEERED[reason];
    const names = pods
      .slice(0, 10)
      .map((p) => `${p.namespace}/${p.name}${p.node === undefined ? '' : ` on ${p.node}`}`);
    const more = pods.length > 10 ? ` and ${pods.length - 10} more` : '';
    const policies = [...new Set(pods.map((p) => `"${p.policy}"`))].join(', ');
    return [
      finding(
        severity,
        'egress-gateway',
        `class-pods-${reason}`,
        `${pods.length} running pod(s) of the class steered by ${policies} ${why}: ${names.join(', ')}${more}`,
        hint,
      ),
    ];
  });
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
      { id: 'egress-gateway', title: "egressguard's egress gateway on the cluster" },
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
