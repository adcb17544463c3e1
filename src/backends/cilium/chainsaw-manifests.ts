import { REAPPLIED_ANNOTATION } from './cilium-manifests.js';

/**
 * The Kubernetes objects and shell scripts the chainsaw suite is made of. Pure builders: every
 * value interpolated into a script has been checked by planChainsawSuite (safe characters only),
 * and scripts are kept under yamllint's 80 columns once indented in a test file.
 */

export type Labels = Readonly<Record<string, string>>;

const MANAGED = { 'app.kubernetes.io/managed-by': 'egressguard' } as const;

export interface ProbePodSpec {
  readonly name: string;
  readonly namespace: string;
  readonly labels: Labels;
  readonly image: string;
}

/**
 * A sleeping probe pod in the class's namespace, with the class's labels so Cilium's policies
 * select it. Its security context passes Pod Security "restricted"; ping works unprivileged
 * through net.ipv4.ping_group_range, a sysctl Pod Security counts as safe.
 */
export function buildProbePod(spec: ProbePodSpec): object {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: spec.name,
      namespace: spec.namespace,
      labels: { ...spec.labels, ...MANAGED, 'egressguard.dev/probe': 'true' },
    },
    spec: {
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 1,
      automountServiceAccountToken: false,
      securityContext: {
        runAsNonRoot: true,
        runAsUser: 65534,
        runAsGroup: 65534,
        seccompProfile: { type: 'RuntimeDefault' },
        sysctls: [{ name: 'net.ipv4.ping_group_range', value: '0 2147483647' }],
      },
      containers: [
        {
          name: 'probe',
          image: spec.image,
          command: ['sleep', '86400'],
          securityContext: {
            allowPrivilegeEscalation: false,
            readOnlyRootFilesystem: true,
            capabilities: { drop: ['ALL'] },
          },
        },
      ],
    },
  };
}

export interface FaultJobSpec {
  readonly name: string;
  readonly namespace: string;
  readonly nodeName: string;
  readonly image: string;
  readonly action: 'stop' | 'start';
  readonly unit: string;
  /** What the Job does, for its label: tunnel-stop, resident-start… */
  readonly fault: string;
}

/**
 * A privileged Job pinned to the gateway node by name that runs `systemctl ACTION UNIT` in the
 * host's namespaces. Pinned by nodeName, not by the gateway label: the label goes away when the
 * tunnel stops, and the restart Job must still land on that node.
 */
export function buildFaultJob(spec: FaultJobSpec): object {
  const labels = { ...MANAGED, 'egressguard.dev/fault': spec.fault };
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: { name: spec.name, namespace: spec.namespace, labels },
    spec: {
      backoffLimit: 0,
      activeDeadlineSeconds: 90,
      ttlSecondsAfterFinished: 600,
      template: {
        metadata: { labels },
        spec: {
          nodeName: spec.nodeName,
          hostPID: true,
          restartPolicy: 'Never',
          automountServiceAccountToken: false,
          tolerations: [{ operator: 'Exists' }],
          containers: [
            {
              name: 'systemctl',
              image: spec.image,
              command: [
                'nsenter',
                '--target',
                '1',
                '--mount',
                '--uts',
                '--ipc',
                '--net',
                '--pid',
                '--',
                'systemctl',
                spec.action,
                spec.unit,
              ],
              securityContext: { privileged: true },
            },
          ],
        },
      },
    },
  };
}

/** The namespace fault Jobs run in: Pod Security "privileged" (hostPID, privileged container). */
export function buildFaultNamespace(name: string): object {
  const level = 'privileged';
  return {
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: {
      name,
      labels: {
        ...MANAGED,
        'pod-security.kubernetes.io/enforce': level,
        'pod-security.kubernetes.io/audit': level,
        'pod-security.kubernetes.io/warn': level,
      },
    },
  };
}

/**
 * What the identity running chainsaw needs: its own test namespaces, the probe pods and exec into
 * them, the fault Jobs, reading nodes (the gateway label) and annotating the egress gateway
 * policy to re-apply it. kubectl exec over WebSockets (kubectl ≥ 1.30) asks for `get` on
 * pods/exec, older ones `create`.
 */
export function buildRunnerRbac(namespace: string, serviceAccount: string): object[] {
  const name = 'egressguard-chainsaw-runner';
  return [
    {
      apiVersion: 'v1',
      kind: 'ServiceAccount',
      metadata: { name: serviceAccount, namespace, labels: MANAGED },
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name, labels: MANAGED },
      rules: [
        {
          apiGroups: [''],
          resources: ['namespaces', 'pods'],
          verbs: ['get', 'list', 'watch', 'create', 'delete'],
        },
        { apiGroups: [''], resources: ['pods/exec'], verbs: ['create', 'get'] },
        { apiGroups: [''], resources: ['pods/log', 'events'], verbs: ['get', 'list'] },
        // patch: the fault that keeps the gateway label on by hand while the tunnel is down.
        { apiGroups: [''], resources: ['nodes'], verbs: ['get', 'list', 'watch', 'patch'] },
        { apiGroups: ['cilium.io'], resources: ['ciliumnodes'], verbs: ['get', 'list', 'watch'] },
        {
          apiGroups: ['batch'],
          resources: ['jobs'],
          verbs: ['get', 'list', 'watch', 'create', 'delete'],
        },
        {
          apiGroups: ['cilium.io'],
          resources: ['ciliumegressgatewaypolicies'],
          verbs: ['get', 'list', 'patch'],
        },
      ],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name, labels: MANAGED },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name },
      subjects: [{ kind: 'ServiceAccount', name: serviceAccount, namespace }],
    },
  ];
}

// --- scripts (sh) ---------------------------------------------------------------------------------
//
// Every value from the input is assigned to a shell variable on a line of its own: such a line has
// no space, which yamllint's line-length rule allows at any length (allow-non-breakable-words), so
// long names never push a script line past 80 columns. The values were checked to hold no quote,
// space, backslash or "$".

/** Lines of a shell script. */
function lines(...parts: string[]): string {
  return `${parts.join('\n')}\n`;
}

/** `name='value'` for each pair. */
function assign(values: Readonly<Record<string, string>>): string[] {
  return Object.entries(values).map(([name, value]) => `${name}='${value}'`);
}

/** A here-document; quoted (no expansion) unless the body must see the script's variables. */
function heredoc(command: string, body: string, expand = false): string[] {
  const delimiter = expand ? 'EGRESSGUARD' : "'EGRESSGUARD'";
  return [`${command} <<${delimiter}`, ...body.trimEnd().split('\n'), 'EGRESSGUARD'];
}

/** kubectl exec of a script read from stdin, so the in-pod script needs no quoting. */
function execInPod(namespace: string, pod: string, script: string[]): string[] {
  return [
    ...assign({ ns: namespace, pod }),
    ...heredoc('kubectl exec -i -n "$ns" "$pod" -- sh -s', script.join('\n')),
  ];
}

export interface ProbeCommand {
  readonly to: string;
  readonly proto: 'tcp' | 'udp' | 'icmp';
  readonly port: number | undefined;
}

// A DNS query for the root's NS records, id 0x4567 with recursion desired (RFC 1035 §4.1): any
// DNS server answers it, even with REFUSED, and an answer carries the id with the QR bit set.
const DNS_QUERY =
  '\\105\\147\\001\\000\\000\\001\\000\\000\\000\\000\\000\\000\\000\\000\\002\\000\\001';

/** The in-pod test of a probe: true when the packet got through and was answered. */
function probeTest(probe: ProbeCommand): string[] {
  const port = String(probe.port);
  if (probe.port === 53 && probe.proto !== 'icmp') {
    // A real DNS query: a resolver never echoes a datagram. Over TCP with its length prefix.
    // The query sits in a variable on a line without spaces (yamllint allows those at any length).
    return [
      `q='${probe.proto === 'udp' ? '' : '\\000\\021'}${DNS_QUERY}'`,
      `reply=$(printf "$q" | nc ${probe.proto === 'udp' ? '-u ' : ''}-w 3 ${probe.to} 53 \\`,
      "  | od -An -tx1 | tr -d ' \\n')",
      `case "$reply" in ${probe.proto === 'udp' ? '' : '????'}4567[89a-f]*) ok=1 ;; *) ok=0 ;; esac`,
      'if [ "$ok" = 1 ]; then',
    ];
  }
  switch (probe.proto) {
    case 'tcp':
      return [`if nc -z -w 3 ${probe.to} ${port}; then`];
    case 'udp':
      // UDP has no handshake: the far side echoes the datagram (a control proves it does).
      return [
        `reply=$(echo egressguard | nc -u -w 3 ${probe.to} ${port})`,
        'if [ "$reply" = egressguard ]; then',
      ];
    case 'icmp':
      return [`if ping -c 1 -W 3 ${probe.to}; then`];
  }
}

/**
 * Runs a probe in the pod and prints `egressguard-probe=allow` or `=deny`: the verdict comes from
 * inside the pod, so a failing kubectl (a missing pod) is an error, never a "deny".
 */
export function probeScript(namespace: string, pod: string, probe: ProbeCommand): string {
  return lines(
    ...execInPod(namespace, pod, [
      ...probeTest(probe),
      '  echo egressguard-probe=allow',
      'else',
      '  echo egressguard-probe=deny',
      'fi',
    ]),
  );
}

export interface SourceCheck {
  readonly url: string;
  readonly wanAddresses: readonly string[];
  readonly tunnelExitAddresses: readonly string[];
}

/**
 * Asks the echo service beyond the gateway for the address it sees, and classifies it in the pod:
 * `egressguard-source=wan` (a leak), `=tunnel` (a known tunnel exit), `=other`, or `=none` when
 * nothing answered. The raw answer is printed too, for the report.
 */
export function sourceScript(namespace: string, pod: string, check: SourceCheck): string {
  const patterns = (addresses: readonly string[], tag: string): string[] =>
    addresses.flatMap((address) => [`  ${address})`, `    echo egressguard-source=${tag} ;;`]);
  return lines(
    ...execInPod(namespace, pod, [
      ...assign({ url: check.url }),
      'if ! seen=$(wget -q -T 5 -O - "$url"); then',
      '  echo egressguard-source=none',
      '  exit 0',
      'fi',
      'seen=$(echo "$seen" | tr -d "[:space:]")',
      'echo "egressguard-address=$seen"',
      'case "$seen" in',
      ...patterns(check.wanAddresses, 'wan'),
      ...patterns(check.tunnelExitAddresses, 'tunnel'),
      '  *)',
      '    echo egressguard-source=other ;;',
      'esac',
    ]),
  );
}

export function waitPodReadyScript(namespace: string, pod: string): string {
  return lines(
    ...assign({ ns: namespace, pod }),
    'kubectl wait --for=condition=Ready -n "$ns" "pod/$pod" \\',
    '  --timeout=120s',
  );
}

/** Prints `egressguard-gateway=present` if the node carries the gateway label, else `=absent`. */
export function gatewayScript(labelKey: string, labelValue: string, node: string): string {
  return lines(
    ...assign({ selector: `${labelKey}=${labelValue}`, node }),
    'if kubectl get nodes -l "$selector" -o name \\',
    '  | grep -qx "node/$node"; then',
    '  echo egressguard-gateway=present',
    'else',
    '  echo egressguard-gateway=absent',
    'fi',
  );
}

/**
 * Polls until no node carries the gateway label ("gone") or the node carries it again ("back");
 * the script's timeout bounds it. A failed kubectl proves nothing either way: it polls again.
 */
export function waitGatewayScript(
  labelKey: string,
  labelValue: string,
  until: 'gone' | 'back',
  node: string,
  resource: 'nodes' | 'ciliumnodes' = 'nodes',
): string {
  // `-o name` prints node/NAME and ciliumnode.cilium.io/NAME.
  const kind = resource === 'nodes' ? 'node' : 'ciliumnode.cilium.io';
  const done =
    until === 'gone'
      ? '    echo "$nodes" | grep -qx "$kind/$node" || break'
      : '    echo "$nodes" | grep -qx "$kind/$node" && break';
  return lines(
    ...assign({ selector: `${labelKey}=${labelValue}`, node, kind }),
    'while :; do',
    `  if nodes=$(kubectl get ${resource} -l "$selector" -o name); then`,
    done,
    '  fi',
    '  sleep 1',
    'done',
    `echo egressguard-gateway=${until}`,
  );
}

/** Puts the gateway label on the node by hand (the fault that keeps it while the tunnel is down). */
export function labelNodeScript(labelKey: string, labelValue: string, node: string): string {
  return lines(
    ...assign({ label: `${labelKey}=${labelValue}`, node }),
    'kubectl label node "$node" "$label" --overwrite',
  );
}

export interface JobRun {
  readonly namespace: string;
  readonly job: string;
  readonly node: string;
  readonly unit: string;
  readonly image: string;
  readonly action: 'stop' | 'start';
  /** The Job's fault label (tunnel-stop, resident-start…). */
  readonly fault: string;
}

/**
 * Replaces the fault Job (a finished one of the same name would make `kubectl wait` return at
 * once) and waits for it to complete. The manifest is a here-document that expands the script's
 * variables.
 */
export function runJobScript(run: JobRun, toYaml: (manifest: object) => string): string {
  const manifest = buildFaultJob({
    name: '${job}',
    namespace: '${ns}',
    nodeName: '${node}',
    image: '${image}',
    action: run.action,
    unit: '${unit}',
    fault: run.fault,
  });
  return lines(
    ...assign({
      ns: run.namespace,
      job: run.job,
      node: run.node,
      unit: run.unit,
      image: run.image,
    }),
    'kubectl -n "$ns" delete job "$job" --ignore-not-found \\',
    '  --wait=true',
    ...heredoc('kubectl apply -f -', toYaml(manifest), true),
    'kubectl -n "$ns" wait --for=condition=complete "job/$job" \\',
    '  --timeout=120s',
  );
}

/**
 * Re-applies the egress gateway policy: any change is a new resourceVersion, upon which Cilium
 * selects the egress IP afresh (EGW doc: "You can force a fresh selection by re-applying the
 * Egress Gateway policy"); the spec stays as it is.
 */
export function reapplyPolicyScript(policy: string): string {
  return lines(
    ...assign({ policy }),
    'kubectl annotate ciliumegressgatewaypolicy "$policy" \\',
    `  --overwrite "${REAPPLIED_ANNOTATION}=$(date +%s)"`,
  );
}
