import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO, runCli } from './run-cli.js';

// Layer attribution for a Kubernetes class (issue 11): `explain --pod` names cilium as the layer,
// says node nftables does not see pod traffic and why, and names the node label kill switch.
const POLICY = join(REPO, 'testdata/policies/valid/k3s-vpn-egress/policy.yaml');

describe('explain --pod', () => {
  it('names cilium, says node nftables does not see pod traffic, and names the label kill switch', async () => {
    const result = await runCli([
      'explain',
      POLICY,
      '--pod',
      'vpn',
      '--to',
      '203.0.113.7',
      '--proto',
      'tcp',
      '--port',
      '443',
      '--json',
    ]);
    expect(result.stderr).toBe('');
    expect(result.exitCode).toBe(0);
    const json = JSON.parse(result.stdout) as { layers: string[]; notes: string[] };
    expect(json.layers).toEqual(['cilium']);
    const notes = json.notes.join('\n');
    expect(notes).toContain('Node nftables does not see this traffic');
    expect(notes).toContain('eBPF host routing');
    expect(notes).toContain('a property of the Cilium version and its Host Routing mode');
    expect(notes).toContain(
      'the gateway node carries label egressguard.dev/gateway-vpn=up only while its tunnel is up',
    );
  });

  it('states the window that stays open for a steered destination, and what closes the rest', async () => {
    const result = await runCli([
      'explain',
      POLICY,
      '--pod',
      'vpn',
      '--to',
      '203.0.113.7',
      '--json',
    ]);
    expect(result.exitCode).toBe(0);
    const notes = (JSON.parse(result.stdout) as { notes: string[] }).notes.join('\n');
    expect(notes).toContain('each pod of the class starts with the tunnel gate');
    expect(notes).toContain(
      "only the gate's requests to the echo service can leave by the pod's node",
    );
    expect(notes).toContain('a backstop policy drops the class as with the tunnel down');
    expect(notes).toContain('Not covered: the egress gateway switched off on the cluster');
  });

  it('says what happens to a service-CIDR address, and names the API service only as a possibility', async () => {
    const result = await runCli([
      'explain',
      POLICY,
      '--pod',
      'vpn',
      '--to',
      '10.43.7.7',
      '--proto',
      'tcp',
      '--port',
      '443',
      '--json',
    ]);
    expect(result.exitCode).toBe(0);
    const notes = (JSON.parse(result.stdout) as { notes: string[] }).notes.join('\n');
    expect(notes).toContain('a ClusterIP whose service has no backend is refused before policy');
    expect(notes).toContain('"Service backend not found"');
    expect(notes).toContain("an address no service holds is dropped by the class's network policy");
    expect(notes).not.toContain('(the kubernetes API service)');
    expect(notes).toContain(
      'If this address is the ClusterIP of a service whose backends are nodes',
    );
  });

  it('prints the layer for people too', async () => {
    const result = await runCli(['explain', POLICY, '--pod', 'vpn', '--to', '203.0.113.7']);
    expect(result.exitCode).toBe(0);
    expect(result.stdout).toMatch(/enforced by\s+cilium/);
  });

  it('refuses an unknown pod class, and a packet with both or neither source, with exit code 2', async () => {
    const unknown = await runCli(['explain', POLICY, '--pod', 'vnp', '--to', '203.0.113.7']);
    expect(unknown.exitCode).toBe(2);
    expect(unknown.stderr).toContain(
      'error: Cannot explain a packet of pod class "vnp": policy "k3s-vpn-egress" has no such Kubernetes class (did you mean "vpn"?)',
    );
    const both = await runCli([
      'explain',
      POLICY,
      '--pod',
      'vpn',
      '--from',
      '10.200.0.2',
      '--to',
      '203.0.113.7',
    ]);
    expect(both.exitCode).toBe(2);
    expect(both.stderr).toContain('error: Cannot explain a packet from both --from and --pod');
    const neither = await runCli(['explain', POLICY, '--to', '203.0.113.7']);
    expect(neither.exitCode).toBe(2);
    expect(neither.stderr).toContain('error: Cannot explain a packet without a source');
  });
});
