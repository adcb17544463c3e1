import { Counter, Gauge, Registry } from 'prom-client';
import type { ClusterChange, ClusterConnection, ClusterDuty } from '../backend.js';
import { REAPPLIED_ANNOTATION } from './cilium-manifests.js';
import { GATEWAY_METRICS } from './gateway-metrics.js';
import type { EgressGatewayPolicyObject, KubeClient } from './kube-client.js';

/**
 * The gateway node's side of the egress gateway kill switch, on the cluster: the node carries a
 * tunnel class's gateway label only while that tunnel is up and routable. With the label gone no
 * node matches the policy's gateway nodeSelector and Cilium drops the class's traffic
 * (DROP_NO_EGRESS_GATEWAY) instead of sending it out another device with a stale egress IP. When
 * the label comes back (and on the resident's first pass) every CiliumEgressGatewayPolicy that
 * selects it is re-applied, because Cilium picks the egress IP once and "does not automatically
 * respond to a change in the gateway node's network configuration … You can force a fresh
 * selection by re-applying the Egress Gateway policy" (EGW doc; ../shared/reference/cilium/
 * NOTES.md). Re-applied here means an update of the object (an annotation with the time), which
 * Cilium's policy watcher receives as an update event; that Cilium re-selects on an update that
 * changes only metadata is the documented advice, not something measurable here: the generated
 * chainsaw suite checks it on a cluster ("after the tunnel restart").
 */
export function createGatewayConnection(input: {
  readonly client: KubeClient;
  readonly node: string;
  readonly now?: () => Date;
}): ClusterConnection {
  const { client, node } = input;
  const now = input.now ?? (() => new Date());
  const registry = new Registry();
  // Each metric as gateway-metrics.ts names it, in this connection's registry.
  const configOf = (key: keyof typeof GATEWAY_METRICS) => ({
    name: GATEWAY_METRICS[key].name,
    help: GATEWAY_METRICS[key].help,
    labelNames: GATEWAY_METRICS[key].labels,
    registers: [registry],
  });
  const labelPresent = new Gauge(configOf('labelPresent'));
  const tunnelUp = new Gauge(configOf('tunnelUp'));
  const reapplied = new Counter(configOf('policyReapplied'));
  const lastChange = new Gauge(configOf('lastChange'));
  // From the start, at 0: the alert on a label that came back without a re-apply compares it with
  // the last change, and needs the series to exist before the first re-apply does.
  const lastReapplied = new Gauge(configOf('lastReapplied'));
  lastReapplied.set({ node }, 0);
  // Duties converged at least once, and those whose policies still need re-applying: the first
  // pass that finds the tunnel up re-applies too (the policy may have been selected while this
  // resident was not running), and a re-apply that failed is tried again at the next pass.
  const started = new Set<string>();
  const pending = new Set<string>();
  // The tunnel state of the last converge that reached the cluster, per duty.
  const lastUp = new Map<string, boolean>();

  const reapply = async (duty: ClusterDuty): Promise<string[]> => {
    const label = duty.nodeLabel;
    const policies = (await client.listEgressGatewayPolicies()).filter((p) =>
      selectsLabel(p, label),
    );
    const stamp = now().toISOString();
    for (const policy of policies) {
      await client.annotateEgressGatewayPolicy(policy.name, { [REAPPLIED_ANNOTATION]: stamp });
      reapplied.inc({ node, policy: policy.name });
    }
    lastReapplied.set({ node }, now().getTime() / 1000);
    return policies.map((p) => p.name);
  };

  return {
    node,
    server: client.server,
    async converge(duty, up): Promise<ClusterChange> {
      const label = duty.nodeLabel;
      const series = { node, gateway_label: `${label.key}=${label.value}` };
      tunnelUp.set({ node, tunnel: duty.tunnel }, up ? 1 : 0);
      if (!started.has(duty.id)) {
        started.add(duty.id);
        pending.add(duty.id);
        lastChange.set({ node }, now().getTime() / 1000);
      }
      // Taking the label off is the kill switch: when the tunnel has just gone, one patch and no
      // read first (removing an absent label changes nothing, and the API server skips writes
      // that change nothing). Otherwise read, so a label someone set by hand is seen.
      if (!up && lastUp.get(duty.id) === true) {
        await client.patchNodeLabels(node, { [label.key]: null });
        lastUp.set(duty.id, false);
        pending.delete(duty.id);
        lastChange.set({ node }, now().getTime() / 1000);
        labelPresent.set(series, 0);
        return { changed: true, marked: false, reapplied: [] };
      }
      const labels = await client.readNodeLabels(node);
      const marked = labels[label.key] === label.value;
      labelPresent.set(series, label.key in labels ? 1 : 0);
      let changed = false;
      if (up && !marked) {
        await client.patchNodeLabels(node, { [label.key]: label.value });
        changed = true;
        pending.add(duty.id);
      } else if (!up && label.key in labels) {
        // Any value of our key goes: a label someone set by hand must not keep the gateway.
        await client.patchNodeLabels(node, { [label.key]: null });
        changed = true;
      }
      lastUp.set(duty.id, up);
      if (!up) pending.delete(duty.id);
      if (changed) lastChange.set({ node }, now().getTime() / 1000);
      labelPresent.set(series, up ? 1 : 0);
      let names: string[] = [];
      if (up && pending.has(duty.id)) {
        names = await reapply(duty);
        pending.delete(duty.id);
      }
      return { changed, marked: up, reapplied: names };
    },
    async metrics() {
      return { contentType: registry.contentType, text: await registry.metrics() };
    },
    async close() {
      registry.clear();
      await Promise.resolve();
    },
  };
}

/** Whether a policy's gateway nodeSelector names the label (by value, or by key in an expression). */
function selectsLabel(
  policy: EgressGatewayPolicyObject,
  label: { readonly key: string; readonly value: string },
): boolean {
  return (
    policy.nodeSelector.matchLabels[label.key] === label.value ||
    policy.nodeSelector.matchExpressions.some((e) => e.key === label.key)
  );
}
