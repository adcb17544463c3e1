import type { TunnelExitIR } from '../../ir/index.js';

/*
 * The tunnel gate: what closes the window Cilium leaves open for a new pod. The egress gateway
 * programs a pod only after its agent resolved the pod's identity to labels, a lookup retried
 * with backoff from 20 ms up to 20 minutes (pkg/egressgateway/manager.go, newEgressGatewayManager
 * and processCiliumEndpoints), and the EGW doc says so: "When new pods are started, there is a
 * delay before egress gateway policies are applied for those pods … traffic from those pods may
 * leave the cluster with a source IP address (pod IP or node IP) that doesn't match the egress
 * gateway IP". No network policy can tell a steered packet from an unsteered one: policy is
 * decided on the pod's own node before the egress gateway redirects it.
 *
 * So every pod of a tunnel class starts with an init container that asks an echo service beyond
 * the tunnel which address it sees, and exits 0 only when that is the tunnel's exit. Kubernetes
 * starts a pod's containers only after each init container completed successfully, in order
 * (kubernetes.io/docs/concepts/workloads/pods/init-containers/), so the workload sends nothing
 * until its own traffic has been seen leaving by the tunnel. A ValidatingAdmissionPolicy
 * (Kubernetes ≥ 1.30) refuses a pod of the class without the gate as its first init container,
 * and a pod relabelled into the class (init containers cannot be added to a running pod).
 */

export const GATE_CONTAINER = 'egressguard-tunnel-gate';
export const GATE_IMAGE = 'docker.io/library/busybox:1.36.1';
// One check per second, about ten minutes in all; then the container fails and the kubelet
// starts it again with its back-off: the pod stays in Init, never runs unsteered.
const GATE_ATTEMPTS = 600;

/** The gate's shell script: exits 0 once the echo service answers with a tunnel exit address. */
export function gateScript(exit: TunnelExitIR): string {
  const cases = exit.addresses.map(
    (a) => `    ${a}) echo "egressguard-gate: leaves by the tunnel exit $seen"; exit 0 ;;`,
  );
  return [
    `url='${exit.echoUrl}'`,
    'i=0',
    `while [ "$i" -lt ${GATE_ATTEMPTS} ]; do`,
    '  seen=$(wget -q -T 3 -O - "$url" 2>/dev/null | tr -d "[:space:]")',
    '  case "$seen" in',
    ...cases,
    '  esac',
    '  echo "egressguard-gate: not steered yet (the echo service saw \'${seen:-nothing}\')"',
    '  i=$((i + 1))',
    '  sleep 1',
    'done',
    'echo "egressguard-gate: never saw the tunnel exit; the kubelet retries"',
    'exit 1',
    '',
  ].join('\n');
}

/** The init container a pod of the class must list first. */
export function gateContainer(exit: TunnelExitIR): {
  readonly name: string;
  readonly image: string;
  readonly command: readonly string[];
  readonly securityContext: object;
} {
  return {
    name: GATE_CONTAINER,
    image: GATE_IMAGE,
    command: ['sh', '-c', gateScript(exit)],
    // Passes Pod Security "restricted".
    securityContext: {
      runAsNonRoot: true,
      runAsUser: 65534,
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
      seccompProfile: { type: 'RuntimeDefault' },
    },
  };
}

/** A CEL string literal (single-quoted; the values here hold no quote or backslash). */
function celString(text: string): string {
  return `'${text.replace(/\\/g, '\\\\').replace(/'/g, "\\'").replace(/\n/g, '\\n')}'`;
}

/**
 * The admission policy and its binding for one class: pods whose labels (and namespace) select
 * them into the class must start with the gate, exactly as generated, and may not use the host's
 * network (a hostNetwork pod is no Cilium endpoint: its traffic is the node's).
 */
export function gateAdmission(input: {
  readonly name: string;
  readonly className: string;
  readonly podLabels: Readonly<Record<string, string>>;
  readonly namespace: string | null;
  readonly exit: TunnelExitIR;
  readonly labels: Readonly<Record<string, string>>;
}): object[] {
  const gate = gateContainer(input.exit);
  const command = `[${gate.command.map(celString).join(', ')}]`;
  return [
    {
      apiVersion: 'admissionregistration.k8s.io/v1',
      kind: 'ValidatingAdmissionPolicy',
      metadata: { name: input.name, labels: input.labels },
      spec: {
        failurePolicy: 'Fail',
        matchConstraints: {
          resourceRules: [
            {
              apiGroups: [''],
              apiVersions: ['v1'],
              operations: ['CREATE', 'UPDATE'],
              resources: ['pods'],
            },
          ],
          // For an UPDATE, the API server matches the object selector against the old and the
          // new object: a pod relabelled into the class is checked too.
          objectSelector: { matchLabels: { ...input.podLabels } },
          ...(input.namespace === null
            ? {}
            : {
                namespaceSelector: {
                  matchLabels: { 'kubernetes.io/metadata.name': input.namespace },
                },
              }),
        },
        validations: [
          {
            expression: `!has(object.spec.hostNetwork) || !object.spec.hostNetwork`,
            message: `a pod of egressguard class ${input.className} may not use the host's network: its traffic would be the node's, never steered`,
          },
          {
            // Container names are unique in a pod, so `all` checks the first one in full; `has`
            // on the macro's variable, which every CEL implementation accepts.
            expression: [
              `has(object.spec.initContainers) && size(object.spec.initContainers) > 0`,
              `object.spec.initContainers[0].name == ${celString(GATE_CONTAINER)}`,
              `object.spec.initContainers.all(c, c.name != ${celString(GATE_CONTAINER)} || (c.image == ${celString(GATE_IMAGE)} && has(c.command) && c.command == ${command} && !has(c.args) && !has(c.restartPolicy)))`,
            ].join(' && '),
            message: `a pod of egressguard class ${input.className} must start with the init container ${GATE_CONTAINER} exactly as egressguard generated it (tunnel-gate.yaml): it holds the pod until its traffic leaves by the tunnel`,
          },
        ],
      },
    },
    {
      apiVersion: 'admissionregistration.k8s.io/v1',
      kind: 'ValidatingAdmissionPolicyBinding',
      metadata: { name: input.name, labels: input.labels },
      spec: { policyName: input.name, validationActions: ['Deny'] },
    },
  ];
}
