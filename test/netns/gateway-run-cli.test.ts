import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Lab } from '../../src/prove/index.js';
import {
  NODE,
  OWN_POLICY,
  VPN_LABEL,
  hasGatewayLabel,
  nodeLabels,
  policyStamp,
  startGatewayCluster,
  type GatewayCluster,
} from './support/gateway-cluster.js';
import {
  TUNNEL,
  cli,
  cliEnv,
  createGatewayLab,
  createTempDir,
  liveStamp,
  pollUntil,
  target,
} from './support/vpn-gateway-lab.js';

// `egressguard run POLICY --k8s` through the built CLI (npm run build first), end to end: the
// node part applied with nftables in the lab's gateway namespace, the label kept on the API
// model's node (HTTPS, a kubeconfig with the RBAC of deploy/kubernetes/rbac.yaml), metrics served
// on --metrics-listen and scraped over HTTP, and a clean stop on SIGTERM that takes the label off
// (nothing watches the tunnel once the resident is gone).

const BIN = fileURLToPath(new URL('../../bin/egressguard.js', import.meta.url));
const EXAMPLE = fileURLToPath(
  new URL('../../testdata/policies/valid/k3s-vpn-egress/', import.meta.url),
);
const POLICY = join(EXAMPLE, 'policy.yaml');
const FACTS = join(EXAMPLE, 'facts.json');
const BOUND_MS = 30_000;
const CASE_MS = 3 * BOUND_MS;

interface Entry {
  readonly action: string;
  readonly message: string;
}

describe('egressguard run --k8s (built CLI)', () => {
  let lab: Lab;
  let cluster: GatewayCluster;
  const state = createTempDir('egtest-gateway-cli');
  const log: Entry[] = [];
  let stderr = '';
  let child: ReturnType<typeof spawn> | undefined;
  let exited: Promise<{ code: number | null; signal: string | null }>;

  const until = async (what: string, check: () => boolean): Promise<void> => {
    const done = await pollUntil(() => Promise.resolve(check() ? true : undefined), {
      timeoutMs: BOUND_MS,
      everyMs: 20,
    });
    expect(done, `${what}; log: ${JSON.stringify(log.slice(-6))}; stderr: ${stderr}`).toBe(true);
  };

  const scrape = async (): Promise<string> => {
    const watching = log.find((e) => /metrics on (http:\/\/\S+)/.test(e.message));
    const url = /metrics on (http:\/\/\S+)/.exec(watching?.message ?? '')?.[1];
    expect(url, 'the resident names its metrics address').toBeDefined();
    const response = await fetch(url ?? '');
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toContain('text/plain');
    return response.text();
  };

  beforeAll(async () => {
    lab = await createGatewayLab();
    cluster = await startGatewayCluster();
  });

  afterAll(async () => {
    if (child !== undefined && child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await exited;
    }
    await (cluster as GatewayCluster | undefined)?.dispose();
    await (lab as Lab | undefined)?.destroy();
    state.dispose();
  });

  it('refuses --k8s options without --k8s, and bad credentials before applying anything', async () => {
    const without = await cli([
      'run',
      POLICY,
      '--facts',
      FACTS,
      '--kubeconfig',
      cluster.kubeconfig,
      ...target(lab, state.path),
    ]);
    expect(without.exitCode).toBe(2);
    expect(without.stderr).toContain('Cannot use --kubeconfig without --k8s');
    const missing = await cli([
      'run',
      POLICY,
      '--facts',
      FACTS,
      '--k8s',
      '--kubeconfig',
      join(state.path, 'no-such.kubeconfig'),
      ...target(lab, state.path),
    ]);
    expect(missing.exitCode).toBe(2);
    expect(missing.stderr).toContain('Cannot read --kubeconfig');
    const unknownNode = await cli([
      'run',
      POLICY,
      '--facts',
      FACTS,
      '--k8s',
      '--kubeconfig',
      cluster.kubeconfig,
      '--node',
      'gw-9',
      ...target(lab, state.path),
    ]);
    expect(unknownNode.exitCode).toBe(2);
    // The model's RBAC names k3s-gw-1 only: reading another node is forbidden.
    expect(unknownNode.stderr).toContain('Cannot read node "gw-9"');
    expect(await liveStamp(lab)).toBeNull();
  });

  it(
    'applies, labels the node, serves metrics, and follows the tunnel',
    async () => {
      child = spawn(
        process.execPath,
        [
          BIN,
          'run',
          POLICY,
          '--facts',
          FACTS,
          '--k8s',
          '--kubeconfig',
          cluster.kubeconfig,
          '--node',
          NODE,
          '--gateway-tick',
          '500',
          '--metrics-listen',
          '127.0.0.1:0',
          '--json',
          ...target(lab, state.path),
        ],
        { env: { ...process.env, ...cliEnv() }, stdio: ['ignore', 'pipe', 'pipe'] },
      );
      const running = child;
      exited = new Promise((resolve) => {
        running.once('exit', (code, signal) => {
          resolve({ code, signal });
        });
      });
      running.stderr?.on('data', (chunk: Buffer) => {
        stderr += chunk.toString();
      });
      void (async () => {
        for await (const line of createInterface({
          input: running.stdout as NodeJS.ReadableStream,
        })) {
          try {
            log.push(JSON.parse(line) as Entry);
          } catch {
            log.push({ action: 'unparsed', message: line });
          }
        }
      })();
      await until(
        'the label is set and the policy re-applied',
        () =>
          hasGatewayLabel(cluster.model) &&
          policyStamp(cluster.model, OWN_POLICY).reapplied !== undefined,
      );
      expect(await liveStamp(lab)).not.toBeNull();
      const up = await scrape();
      const series = `node="${NODE}",gateway_label="${VPN_LABEL.key}=${VPN_LABEL.value}"`;
      expect(up).toContain(`egressguard_gateway_label_present{${series}} 1`);
      expect(up).toContain(`egressguard_tunnel_up{node="${NODE}",tunnel="tun0"} 1`);
      expect(up).toMatch(
        new RegExp(
          `egressguard_egress_policy_reapplied_total\\{node="${NODE}",policy="${OWN_POLICY}"\\} [1-9]`,
        ),
      );
      // The re-apply time the alert compares with the label's last change: set, not the 0 of start.
      const reappliedAt = Number(
        /egressguard_egress_policy_reapplied_timestamp_seconds\{node="[^"]+"\} (\S+)/.exec(up)?.[1],
      );
      const changedAt = Number(
        /egressguard_gateway_last_change_timestamp_seconds\{node="[^"]+"\} (\S+)/.exec(up)?.[1],
      );
      expect(reappliedAt).toBeGreaterThan(0);
      expect(reappliedAt).toBeGreaterThanOrEqual(changedAt);

      await lab.setLinkDown(TUNNEL);
      await until('the label is removed', () => !(VPN_LABEL.key in nodeLabels(cluster.model)));
      const down = await scrape();
      expect(down).toContain(`egressguard_gateway_label_present{${series}} 0`);
      expect(down).toContain(`egressguard_tunnel_up{node="${NODE}",tunnel="tun0"} 0`);

      const before = policyStamp(cluster.model, OWN_POLICY).reapplied;
      await lab.setLinkUp(TUNNEL);
      await until(
        'the label is back and the policy re-applied',
        () =>
          hasGatewayLabel(cluster.model) &&
          policyStamp(cluster.model, OWN_POLICY).reapplied !== before,
      );
    },
    CASE_MS,
  );

  it(
    'stops cleanly on SIGTERM, taking the label off, and leaves the node part applied',
    async () => {
      expect(child, 'the resident runs (previous case)').toBeDefined();
      child?.kill('SIGTERM');
      const { code, signal } = await exited;
      expect({ code, signal, stderr }).toEqual({ code: 0, signal: null, stderr: '' });
      expect(VPN_LABEL.key in nodeLabels(cluster.model)).toBe(false);
      expect(
        log.some((e) => e.action === 'unmarked' && e.message.includes('the resident stops')),
      ).toBe(true);
      // Rules and routes stay when `run` stops; only the cluster's label is taken off.
      expect(await liveStamp(lab)).not.toBeNull();
    },
    CASE_MS,
  );
});
