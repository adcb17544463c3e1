import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Lab } from '../../src/prove/index.js';
import { createNonce, sendPackets, startObserver } from '../../src/prove/index.js';
import {
  cli,
  createGatewayLab,
  createTempDir,
  DST4,
  DST6,
  HOST,
  POLICY_A,
  status,
  target,
  TUNNEL_FAR,
  UPLINK_FAR,
  VPN_SRC4,
  VPN_SRC6,
} from './support/vpn-gateway-lab.js';

// Issue 8, §3: a tunnel class with IPv4 and IPv6 sources on a tunnel whose IPv6 is disabled (an
// IPv4-only tunnel). The kernel refuses `::/0 dev tun0` ("IPv6 is disabled on nexthop device"):
// apply used to fail half-way, with the new table and the IPv4 routes but no `ip rule`, so the
// class's IPv4 was killed with the tunnel up. Now the facts say what the tunnel carries: its IPv6
// is blocked for the class (the blackhole and the kill switch), its IPv4 goes through.

let lab: Lab;
const state = createTempDir('egtest-v4tun');

async function hostRun(argv: string[]): Promise<string> {
  const result = await lab.runner(HOST).run(argv, { effect: 'change' });
  return result.stdout;
}

beforeAll(async () => {
  lab = await createGatewayLab();
});

afterAll(async () => {
  await lab.destroy();
  state.dispose();
});

/** The probes' packets seen beyond the tunnel and beyond the uplink. */
async function sendVpn(family: 4 | 6): Promise<{ tunnel: number; uplink: number }> {
  const nonce = createNonce();
  const [tunnel, uplink] = await Promise.all([
    // The control takes the class's own way into the tunnel: it proves the steering too.
    startObserver(lab, { ...TUNNEL_FAR, nonce, control: { from: 'vpnwl', dst: DST4 } }),
    startObserver(lab, { ...UPLINK_FAR, nonce }),
  ]);
  await Promise.all([tunnel.armed(), uplink.armed()]);
  await sendPackets(lab.runner('vpnwl'), {
    nonce,
    packets: [
      {
        kind: 'udp',
        src: family === 4 ? VPN_SRC4 : VPN_SRC6,
        dst: family === 4 ? DST4 : DST6,
        dport: 443,
        count: 5,
      },
    ],
  });
  const [t, u] = await Promise.all([tunnel.stop(), uplink.stop()]);
  return { tunnel: t.packets.length, uplink: u.packets.length };
}

describe('a tunnel class on an IPv4-only tunnel', () => {
  it('applies with live facts: IPv4 through the tunnel, IPv6 blocked, nothing on the uplink', async () => {
    await hostRun(['sysctl', '-w', 'net.ipv6.conf.tun0.disable_ipv6=1']);
    const applied = await cli(['apply', POLICY_A, '--json', ...target(lab, state.path)]);
    expect(applied.stderr).toBe('');
    expect(applied.exitCode).toBe(0);

    // Both families are steered into the owned table; only IPv4 has a way through the tunnel.
    expect(await hostRun(['ip', '-4', 'rule', 'show'])).toMatch(
      /from 10\.10\.0\.0\/24 lookup 7350/,
    );
    expect(await hostRun(['ip', '-6', 'rule', 'show'])).toMatch(
      /from 2001:db8:10::\/64 lookup 7350/,
    );
    const routes6 = await hostRun(['ip', '-6', 'route', 'show', 'table', '7350']);
    expect(routes6).toMatch(/^blackhole default/m);
    expect(routes6).not.toMatch(/dev tun0/);
    expect(await hostRun(['ip', '-4', 'route', 'show', 'table', '7350'])).toMatch(
      /^default dev tun0/m,
    );
    expect((await status(lab, state.path)).condition).toBe('InSync');

    expect(await sendVpn(4)).toEqual({ tunnel: 5, uplink: 0 });
    expect(await sendVpn(6)).toEqual({ tunnel: 0, uplink: 0 });
  });

  it('explains the blocked family with the facts of the host', async () => {
    const facts = await cli(['facts', '--json', '--netns', lab.ns(HOST)]);
    expect(facts.exitCode).toBe(0);
    const file = `${state.path}/facts.json`;
    await import('node:fs').then((fs) => {
      fs.writeFileSync(file, facts.stdout);
    });
    const explain = async (from: string, to: string) => {
      const result = await cli([
        'explain',
        POLICY_A,
        '--facts',
        file,
        '--from',
        from,
        '--to',
        to,
        '--proto',
        'udp',
        '--port',
        '443',
        '--json',
      ]);
      expect(result.exitCode).toBe(0);
      return JSON.parse(result.stdout) as { verdict: string; rule: string; notes: string[] };
    };
    expect(await explain(VPN_SRC4, DST4)).toMatchObject({ verdict: 'allow', rule: 'vpn/default' });
    const v6 = await explain(VPN_SRC6, DST6);
    expect(v6).toMatchObject({ verdict: 'deny', rule: 'vpn/kill-switch' });
    expect(v6.notes.join(' ')).toContain('carries no IPv6');
  });

  it('re-converges when the tunnel turns IPv6 back on, and when it turns it off again', async () => {
    await hostRun(['sysctl', '-w', 'net.ipv6.conf.tun0.disable_ipv6=0']);
    const on = await cli(['apply', POLICY_A, '--json', ...target(lab, state.path)]);
    expect(on.exitCode).toBe(0);
    expect(await hostRun(['ip', '-6', 'route', 'show', 'table', '7350'])).toMatch(
      /^default dev tun0/m,
    );
    expect(await sendVpn(6)).toEqual({ tunnel: 5, uplink: 0 });

    // The kernel flushes the device's IPv6 routes with it; the next apply must not fail on them.
    await hostRun(['sysctl', '-w', 'net.ipv6.conf.tun0.disable_ipv6=1']);
    const off = await cli(['apply', POLICY_A, '--json', ...target(lab, state.path)]);
    expect(off.stderr).toBe('');
    expect(off.exitCode).toBe(0);
    expect((await status(lab, state.path)).condition).toBe('InSync');
    expect(await sendVpn(4)).toEqual({ tunnel: 5, uplink: 0 });
    expect(await sendVpn(6)).toEqual({ tunnel: 0, uplink: 0 });
  });
});
