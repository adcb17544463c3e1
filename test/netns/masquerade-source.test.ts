import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Lab } from '../../src/prove/index.js';
import { createLab, createNonce, sendPackets, startObserver } from '../../src/prove/index.js';
import {
  DST4,
  DST6,
  HOST,
  POLICY_A,
  TUNNEL_FAR,
  UPLINK_FAR,
  VPN_SRC6,
  cli,
  createTempDir,
  gatewayTopology,
  target,
} from './support/vpn-gateway-lab.js';

// The source the kernel's IPv6 masquerade gives class vpn's packets out of tun0, against what
// `explain` says (src/ir/masquerade-source.ts), in three states of one lab: the tunnel with an
// IPv6 address of its own; without one (the kernel takes another interface's global address:
// egress was "-" before); and without any global IPv6 address on the host (the tunnel's own
// link-local one). In none of them does the kernel drop the packet: it leaves by the tunnel with
// a source the tunnel's far end did not assign, and `check` warns of the two last ones.
describe('the source of a masqueraded IPv6 packet out of a tunnel', () => {
  let lab: Lab;
  const state = createTempDir('egtest-masq6');

  beforeAll(async () => {
    // The example's lab with a tunnel that the VPN gave an IPv4 address only.
    lab = await createLab({
      ...gatewayTopology,
      links: gatewayTopology.links.map((link) =>
        link.a.iface === 'tun0'
          ? {
              ...link,
              a: { ...link.a, addresses: ['10.200.0.2/32'] },
              b: { ...link.b, addresses: ['10.200.0.1/32'] },
            }
          : link,
      ),
    });
  });

  afterAll(async () => {
    await (lab as Lab | undefined)?.destroy();
    state.dispose();
  });

  const host = (...argv: string[]) => lab.runner(HOST).run(argv, { effect: 'change' });

  /** Live facts to a file, the policy applied with them; explain's and check's answers. */
  async function applyAndExplain(name: string) {
    const facts = await cli(['facts', '--json', '--netns', lab.ns(HOST)]);
    expect(facts.exitCode).toBe(0);
    const file = join(state.path, `${name}.json`);
    writeFileSync(file, facts.stdout);
    const applied = await cli(['apply', POLICY_A, '--facts', file, ...target(lab, state.path)]);
    expect(applied.exitCode, applied.stderr).toBe(0);
    const explain = await cli([
      'explain',
      POLICY_A,
      '--facts',
      file,
      '--from',
      VPN_SRC6,
      '--to',
      DST6,
      '--proto',
      'udp',
      '--port',
      '443',
      '--json',
    ]);
    expect(explain.exitCode).toBe(0);
    const check = await cli(['check', POLICY_A, '--facts', file]);
    return {
      explained: JSON.parse(explain.stdout) as { verdict: string; egress: string; notes: string[] },
      check: check.stdout,
    };
  }

  /** The sources the far side of the tunnel saw, and how many packets reached the uplink's. */
  async function measure(): Promise<{ tunnel: string[]; uplink: number }> {
    const nonce = createNonce();
    const [tunnel, uplink] = await Promise.all([
      startObserver(lab, { ...TUNNEL_FAR, nonce, control: { from: 'vpnwl', dst: DST4 } }),
      startObserver(lab, { ...UPLINK_FAR, nonce }),
    ]);
    await Promise.all([tunnel.armed(), uplink.armed()]);
    await sendPackets(lab.runner('vpnwl'), {
      nonce,
      packets: [{ kind: 'udp', src: VPN_SRC6, dst: DST6, dport: 443, count: 3 }],
    });
    const [t, u] = await Promise.all([tunnel.stop(), uplink.stop()]);
    return { tunnel: [...new Set(t.packets.map((p) => p.src))], uplink: u.packets.length };
  }

  it("takes the tunnel's own IPv6 address when it has one", async () => {
    await host('ip', '-6', 'address', 'add', '2001:db8:200::2/128', 'dev', 'tun0', 'nodad');
    const { explained, check } = await applyAndExplain('own');
    expect(explained).toMatchObject({ verdict: 'allow', egress: '2001:db8:200::2' });
    expect(check).not.toContain('masquerade-without-address');
    expect(await measure()).toEqual({ tunnel: ['2001:db8:200::2'], uplink: 0 });
    await host('ip', '-6', 'address', 'del', '2001:db8:200::2/128', 'dev', 'tun0');
  });

  it("takes another interface's global address when the tunnel has none", async () => {
    const { explained, check } = await applyAndExplain('other');
    // RFC 6724 rule 8: vwl0's 2001:db8:10::1 shares 43 bits with 2001:db8:ff::7, eth0's 32.
    expect(explained).toMatchObject({ verdict: 'allow', egress: '2001:db8:10::1' });
    expect(explained.notes.join(' ')).toContain(
      'the masquerade gives the packet the source the kernel selects among the host\'s others (RFC 6724), 2001:db8:10::1 of "vwl0"',
    );
    expect(check).toContain('warning masquerade-without-address: Class "vpn" masquerades its IPv6');
    expect(await measure()).toEqual({ tunnel: ['2001:db8:10::1'], uplink: 0 });
  });

  it("takes the tunnel's link-local address when the host has no global IPv6 address", async () => {
    // The workloads reach the host by a link-local address instead of vwl0's global one.
    await host('ip', '-6', 'address', 'add', 'fe80::1/64', 'dev', 'vwl0', 'nodad');
    await lab
      .runner('vpnwl')
      .run(['ip', '-6', 'route', 'replace', 'default', 'via', 'fe80::1', 'dev', 'eth0'], {
        effect: 'change',
      });
    await host('ip', '-6', 'address', 'del', '2001:db8:10::1/64', 'dev', 'vwl0');
    await host('ip', '-6', 'address', 'del', '2001:db8:ffff::2/64', 'dev', 'eth0');
    const tunnelLinkLocal = /inet6 (fe80::\S+)\/64/.exec(
      (await host('ip', '-6', 'address', 'show', 'dev', 'tun0', 'scope', 'link')).stdout,
    )?.[1];
    expect(tunnelLinkLocal).toBeDefined();
    // The flows of the case before keep their mapping: the kernel forgets masquerade mappings
    // of the device that lost an address (tun0 in the case before), not those of another.
    await host('conntrack', '-F');
    const { explained } = await applyAndExplain('link-local');
    expect(explained).toMatchObject({ verdict: 'allow', egress: tunnelLinkLocal });
    expect(explained.notes.join(' ')).toContain('The host has no global IPv6 address');
    expect(await measure()).toEqual({ tunnel: [tunnelLinkLocal], uplink: 0 });
  });
});
