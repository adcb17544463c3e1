/**
 * The Prometheus metrics the gateway resident (`egressguard run … --k8s` on the gateway node)
 * exports. The alert rules in deploy/prometheus/cilium-gateway.rules.yml use these names and
 * labels (the re-apply counter is for dashboards: a counter's series appears only at its first
 * increment, so an alert on it cannot see a re-apply that never happened); test/promtool checks
 * that they agree.
 */
export const GATEWAY_METRICS = {
  labelPresent: {
    name: 'egressguard_gateway_label_present',
    type: 'gauge',
    help: '1 while this node carries the egress gateway label, 0 while egressguard keeps it off',
    labels: ['node', 'gateway_label'],
  },
  ciliumNodeLabelPresent: {
    name: 'egressguard_ciliumnode_label_present',
    type: 'gauge',
    help: "1 while this node's CiliumNode carries the gateway label (what Cilium's egress gateway selects by), else 0",
    labels: ['node', 'gateway_label'],
  },
  tunnelUp: {
    name: 'egressguard_tunnel_up',
    type: 'gauge',
    help: '1 while the tunnel is up, has carrier and is routable, else 0',
    labels: ['node', 'tunnel'],
  },
  policyReapplied: {
    name: 'egressguard_egress_policy_reapplied_total',
    type: 'counter',
    help: 'Times the egress gateway policy was re-applied so Cilium selects the egress IP afresh',
    labels: ['node', 'policy'],
  },
  lastReapplied: {
    name: 'egressguard_egress_policy_reapplied_timestamp_seconds',
    type: 'gauge',
    help: 'Unix time the egress gateway policies were last re-applied; 0 until the first time',
    labels: ['node'],
  },
  lastChange: {
    name: 'egressguard_gateway_last_change_timestamp_seconds',
    type: 'gauge',
    help: 'Unix time the gateway label was last added to or removed from this node',
    labels: ['node'],
  },
  exitSeen: {
    name: 'egressguard_tunnel_exit_seen',
    type: 'gauge',
    help: "1 while the last request through the tunnel came back from the tunnel's exit (end to end), else 0",
    labels: ['node', 'tunnel'],
  },
  exitLastSeen: {
    name: 'egressguard_tunnel_exit_last_seen_timestamp_seconds',
    type: 'gauge',
    help: "Unix time a request through the tunnel last came back from the tunnel's exit; 0 until then",
    labels: ['node', 'tunnel'],
  },
  policyPresent: {
    name: 'egressguard_egress_gateway_policy_present',
    type: 'gauge',
    help: 'Per egress gateway policy the class relies on: 1 while it exists and Cilium accepts it, else 0',
    labels: ['node', 'policy'],
  },
  podsUnsteered: {
    name: 'egressguard_class_pods_unsteered',
    type: 'gauge',
    help: "Running pods of the class that Cilium's egress gateway cannot steer, per steering policy and reason (no-tunnel-gate: never held; unreadable: the pods could not be read)",
    labels: ['node', 'policy', 'reason'],
  },
} as const;
