import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { Counter, Gauge, Registry } from 'prom-client';
import type { ClusterChange, ClusterConnection, ClusterDuty } from '../backend.js';
import { REAPPLIED_ANNOTATION } from './cilium-manifests.js';
import { GATEWAY_METRICS } from './gateway-metrics.js';
import { ROLE_LABEL } from './cilium-compiler.js';
import type { EgressGatewayPolicyObject, KubeClient } from './kube-client.js';
import { findUnsteeredPods, podListSelector, UNSTEERED_REASONS } from './unsteered-pods.js';

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
  /** Per tunnel: how to see its exit end to end, and the tunnel's own address to ask from. */
  readonly exits?: Readonly<Record<string, TunnelExitProbe>>;
  /** The least time between two exit probes of one tunnel (default 10 s). */
  readonly probeEveryMs?: number;
  /** The least time between two reads of the egress gateway policies (default 30 s). */
  readonly auditEveryMs?: number;
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
  const exitSeen = new Gauge(configOf('exitSeen'));
  const exitLastSeen = new Gauge(configOf('exitLastSeen'));
  // The link, its carrier and its routes say nothing of the far end: a WireGuard peer can be dead
  // with the link up. A request through the tunnel that comes back from its exit is the
  // end-to-end signal; it runs beside the converge and never holds the kill switch's path.
  const probes = new Map<string, { running: boolean; last: number }>();
  for (const tunnel of Object.keys(input.exits ?? {})) {
    exitSeen.set({ node, tunnel }, 0);
    exitLastSeen.set({ node, tunnel }, 0);
  }
  const probeExit = (tunnel: string): void => {
    const exit = input.exits?.[tunnel];
    if (exit === undefined) return;
    const state = probes.get(tunnel) ?? { running: false, last: -Infinity };
    probes.set(tunnel, state);
    const started = performance.now();
    if (state.running || started - state.last < (input.probeEveryMs ?? 10_000)) return;
    state.running = true;
    state.last = started;
    void askEcho(exit)
      .then(
        (seen) => {
          const ok = seen !== undefined && exit.addresses.includes(seen);
          exitSeen.set({ node, tunnel }, ok ? 1 : 0);
          if (ok) exitLastSeen.set({ node, tunnel }, now().getTime() / 1000);
        },
        () => {
          exitSeen.set({ node, tunnel }, 0);
        },
      )
      .finally(() => {
        state.running = false;
      });
  };
  // Duties converged at least once, and those whose policies still need re-applying: the first
  // pass that finds the tunnel up re-applies too (the policy may have been selected while this
  // resident was not running), and a re-apply that failed is tried again at the next pass.
  const started = new Set<string>();
  const pending = new Set<string>();
  // The tunnel state of the last converge that reached the cluster, per duty.
  const lastUp = new Map<string, boolean>();

  // Whether the policies each duty relies on exist and are accepted, from the last list: read at
  // every re-apply and at most every `auditEveryMs` besides.
  const policyPresent = new Gauge(configOf('policyPresent'));
  const audited = new Map<string, number>();
  const audit = (listed: readonly EgressGatewayPolicyObject[], duty: ClusterDuty): void => {
    audited.set(duty.id, performance.now());
    for (const name of duty.objects ?? []) {
      const found = listed.find((p) => p.name === name);
      policyPresent.set(
        { node, policy: name },
        found !== undefined && found.refused === undefined ? 1 : 0,
      );
    }
    const steering = listed.filter(
      (p) => duty.objects?.includes(p.name) === true && p.labels[ROLE_LABEL] === 'steering',
    );
    for (const policy of steering) auditPods(policy);
  };
  // The class's running pods that Cilium cannot steer (the doctor's judgement, unsteered-pods.ts),
  // beside the converge like the exit probe: two lists must never hold the kill switch's path.
  const podsUnsteered = new Gauge(configOf('podsUnsteered'));
  const podAudits = new Set<string>();
  const auditPods = (policy: EgressGatewayPolicyObject): void => {
    const selector = podListSelector(policy);
    if (selector === undefined || podAudits.has(policy.name)) return;
    podAudits.add(policy.name);
    void Promise.all([client.listPods(selector), client.listCiliumEndpoints()])
      .then(
        ([pods, endpoints]) => {
          const found = countByReason(findUnsteeredPods({ steering: [policy], pods, endpoints }));
          for (const reason of UNSTEERED_REASONS) {
            podsUnsteered.set({ node, policy: policy.name, reason }, found.get(reason) ?? 0);
          }
          podsUnsteered.set({ node, policy: policy.name, reason: 'unreadable' }, 0);
        },
        () => {
          podsUnsteered.set({ node, policy: policy.name, reason: 'unreadable' }, 1);
        },
      )
      .finally(() => {
        podAudits.delete(policy.name);
      });
  };
  const reapply = async (duty: ClusterDuty): Promise<string[]> => {
    const label = duty.nodeLabel;
    const listed = await client.listEgressGatewayPolicies();
    audit(listed, duty);
    const policies = listed.filter((p) => selectsLabel(p, label) && p.refused === undefined);
    const stamp = now().toISOString();
    for (const policy of policies) {
      await client.annotateEgressGatewayPolicy(policy.name, { [REAPPLIED_ANNOTATION]: stamp });
      reapplied.inc({ node, policy: policy.name });
    }
    lastReapplied.set({ node }, now().getTime() / 1000);
    return policies.map((p) => p.name);
  };

  // Cilium's egress gateway selects the gateway by the CiliumNode, which the node's own agent
  // copies from the Node (daemon/cmd/local_node_sync.go, pkg/nodediscovery): a label taken off
  // the Node that its CiliumNode keeps is a kill switch that never reached Cilium. Read beside
  // the converge, after each change and at each audit.
  const ciliumNodeLabel = new Gauge(configOf('ciliumNodeLabelPresent'));
  const ciliumNodeReads = new Set<string>();
  const readCiliumNode = (series: { node: string; gateway_label: string }, key: string): void => {
    if (ciliumNodeReads.has(key)) return;
    ciliumNodeReads.add(key);
    void client
      .readCiliumNodeLabels(node)
      .then(
        (labels) => {
          ciliumNodeLabel.set(series, key in labels ? 1 : 0);
        },
        () => undefined,
      )
      .finally(() => {
        ciliumNodeReads.delete(key);
      });
  };

  return {
    node,
    server: client.server,
    async converge(duty, up): Promise<ClusterChange> {
      const label = duty.nodeLabel;
      const series = { node, gateway_label: `${label.key}=${label.value}` };
      tunnelUp.set({ node, tunnel: duty.tunnel }, up ? 1 : 0);
      probeExit(duty.tunnel);
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
        readCiliumNode(series, label.key);
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
      const auditDue =
        performance.now() - (audited.get(duty.id) ?? -Infinity) >= (input.auditEveryMs ?? 30_000);
      if (changed || auditDue) readCiliumNode(series, label.key);
      if (up && pending.has(duty.id)) {
        names = await reapply(duty);
        pending.delete(duty.id);
      } else if (auditDue) {
        audit(await client.listEgressGatewayPolicies(), duty);
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

function countByReason(pods: readonly { readonly reason: string }[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const pod of pods) counts.set(pod.reason, (counts.get(pod.reason) ?? 0) + 1);
  return counts;
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

/** How the resident sees a tunnel's exit: an echo service beyond it, asked from the tunnel's address. */
export interface TunnelExitProbe {
  readonly echoUrl: string;
  /** What the echo service answers through the tunnel. */
  readonly addresses: readonly string[];
  /**
   * The tunnel's own address: a request from it follows the tunnel's policy routing (the rule
   * for Cilium's SNAT address), so it leaves by the tunnel or not at all.
   */
  readonly source: string | undefined;
}

/** The address an echo service answers with, trimmed; undefined when nothing usable came back. */
function askEcho(exit: TunnelExitProbe, timeoutMs = 3_000): Promise<string | undefined> {
  return new Promise((resolve) => {
    const url = new URL(exit.echoUrl);
    const request = (url.protocol === 'https:' ? httpsRequest : httpRequest)(
      url,
      {
        method: 'GET',
        timeout: timeoutMs,
        agent: false,
        ...(exit.source === undefined ? {} : { localAddress: exit.source }),
      },
      (response) => {
        let body = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => {
          // An address is short: a long answer is no echo service's.
          if (body.length < 256) body += chunk;
        });
        response.on('end', () => {
          resolve(response.statusCode === 200 ? body.trim() : undefined);
        });
        response.on('error', () => {
          resolve(undefined);
        });
      },
    );
    request.on('timeout', () => {
      request.destroy();
    });
    request.on('error', () => {
      resolve(undefined);
    });
    request.end();
  });
}
