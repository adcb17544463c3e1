import { ciliumClusterSupport } from './cluster-support.js';
import { EgressguardError } from '../../core/index.js';
import type { Applier, Backend, Inspector } from '../backend.js';
import { CHAINSAW_OPTIONS, emitChainsawFromPolicy } from './chainsaw-from-policy.js';
import { createCiliumCompiler, MANIFESTS_ARTIFACT } from './cilium-compiler.js';
import { DEFAULT_CILIUM_VERSION, SUPPORTED_CILIUM_VERSIONS } from './cilium-version.js';

function notHere(what: string): EgressguardError {
  return new EgressguardError(
    'unsupported',
    `Cannot ${what} with the cilium backend: egressguard compiles the manifests and kubectl applies them; the gateway node keeps its label with run --k8s`,
    {
      hint: 'run `egressguard compile POLICY --target cilium --out DIR` and `kubectl apply -f DIR/manifests.yaml`; the gateway node runs `egressguard run --k8s`',
    },
  );
}

/**
 * Kubernetes (Cilium): the pod classes of a policy as a CiliumEgressGatewayPolicy per tunnel
 * class and a network policy per class, plus the gateway node's own nftables table. It compiles
 * only: the manifests go to the cluster with kubectl, and nothing here runs on this machine.
 */
export const ciliumBackend: Backend = {
  name: 'cilium',
  layer: 'cilium',
  // The cluster side of a gateway node: `run --k8s` and `doctor --k8s` (cluster-support.ts).
  cluster: ciliumClusterSupport,
  capabilities: {
    runsHere: false,
    supportsPodClasses: true,
    // shared/reference/cilium/NOTES.md, "eBPF host routing / EGW and node netfilter".
    podLayerNotes: [
      "Node nftables does not see this traffic: Cilium's eBPF host routing redirects pod packets past netfilter, on the pod's node and on the egress gateway (a property of the Cilium version and its Host Routing mode: `cilium status` shows \"Host Routing: BPF\"; with bpf.hostLegacyRouting=true it would pass netfilter). The gateway node's nftables table covers only what the node itself sends",
    ],
  },
  options: [
    {
      key: 'ciliumVersion',
      flag: '--cilium-version <version>',
      description: `the Cilium release to compile for (${SUPPORTED_CILIUM_VERSIONS.join(', ')})`,
      default: DEFAULT_CILIUM_VERSION,
    },
  ],
  artifactRoles: { [MANIFESTS_ARTIFACT]: 'other' },
  describeScope() {
    return 'CiliumEgressGatewayPolicy and Cilium network policies labelled app.kubernetes.io/managed-by=egressguard';
  },
  createCompiler: createCiliumCompiler,
  suites: {
    formats: ['chainsaw'],
    options: CHAINSAW_OPTIONS,
    emit: (input) => emitChainsawFromPolicy(input),
  },
  createApplier(): Applier {
    throw notHere('apply');
  },
  createInspector(): Inspector {
    throw notHere('read live state');
  },
};
