import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createNonce, sendPackets, type Lab } from '../../src/prove/index.js';
import {
  DST4,
  POLICY_A,
  TUNNEL,
  apply,
  cliEnv,
  createGatewayLab,
  createTempDir,
  status,
  target,
} from './support/vpn-gateway-lab.js';

// The routing layer's drops made visible: with the tunnel down, steering's blackhole drops class
// vpn's packets before any filter hook, and a route counts nothing. The table counts and logs
// them ahead of routing as vpn/blackhole: `status` shows the counter move, `drops` prints them.
// Real kernel, the example's gateway lab.

const BIN = new URL('../../bin/egressguard.js', import.meta.url).pathname;

describe('drops and counters of the routing layer', () => {
  let lab: Lab;
  const state = createTempDir('egtest-drops-routing');

  beforeAll(async () => {
    lab = await createGatewayLab();
    await apply(lab, state.path, POLICY_A);
    await lab.setLinkDown(TUNNEL);
  });

  afterAll(async () => {
    await lab.destroy();
    state.dispose();
  });

  const sendVpn = (): Promise<unknown> =>
    sendPackets(lab.runner('vpnwl'), {
      nonce: createNonce(),
      packets: [{ kind: 'udp', dst: DST4, dport: 443, count: 5 }],
    });

  it('counts the packets the blackhole drops under vpn/blackhole, and no kill-switch drop', async () => {
    const before = await status(lab, state.path);
    const blackholed = (s: typeof before): number =>
      s.live.counters.find((c) => c.id === 'vpn/blackhole')?.packets ?? -1;
    const killed = (s: typeof before): number =>
      s.live.counters.find((c) => c.id === 'vpn/kill-switch')?.packets ?? -1;
    await sendVpn();
    const after = await status(lab, state.path);
    expect(blackholed(before)).toBeGreaterThanOrEqual(0);
    expect(blackholed(after) - blackholed(before)).toBe(5);
    // Routing dropped them: they never reached the forward hook's kill switch.
    expect(killed(after) - killed(before)).toBe(0);
  });

  it('prints them in drops, as the routing layer’s, with class and hook', async () => {
    const drops = execa(
      process.execPath,
      [
        BIN,
        'drops',
        POLICY_A,
        '--json',
        '--count',
        '1',
        '--duration',
        '60',
        ...target(lab, state.path),
      ],
      { env: cliEnv(), reject: false },
    );
    const done = { value: false };
    void drops.finally(() => {
      done.value = true;
    });
    // drops binds the log group a moment after it starts: send until it has printed one.
    while (!done.value) {
      await sendVpn();
      await Promise.race([drops, new Promise((r) => setTimeout(r, 200))]);
    }
    const result = await drops;
    expect(result.stderr).toBe('');
    expect(result.exitCode).toBe(0);
    expect(JSON.parse(result.stdout.trim().split('\n')[0] ?? '')).toMatchObject({
      action: 'drop',
      class: 'vpn',
      rule: 'vpn/blackhole',
      src: '10.10.0.5',
      dst: DST4,
      protocol: 'udp',
      port: 443,
      hook: 'prerouting',
      in: 'vwl0',
    });
  });
});
