import { ciliumClusterSupport } from './cluster-support.js';
import { EgressguardError } from '../../core/index.js';
import type { Applier, Backend, Inspector } from '../backend.js';
import { createCiliumCompiler, MANIFESTS_ARTIFACT } from './cilium-compiler.js';
import { DEFAULT_CILIUM_VERSION, SUPPORTED_CILIUM_VERSIONS } from './cilium-version.js';

function notHere(what: string): EgressguardError {
  return new EgressguardError(
    'unsupported',
    `Cannot ${what} with the cilium backend: egressguard does not talk to a cluster's Cilium; it compiles the manifests`,
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
    supportsSteering: true,
    supportsKillSwitch: true,
    supportsAudit: false,
    supportsMssClamp: false,
    supportsHostClasses: true,
    supportsRuleCounters: false,
    runsHere: false,
    supportsPodClasses: true,
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
  createApplier(): Applier {
    throw notHere('apply');
  },
  createInspector(): Inspector {
    throw notHere('read live state');
  },
};
