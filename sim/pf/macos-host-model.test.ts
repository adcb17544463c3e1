import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { gatherFacts, MACOS_TOOLS_ENV, readHostFacts } from '../../src/facts/index.js';
import { createMacosPfHost } from './create-macos-pf-host.js';
import { createMacosHostModel } from './macos-host-model.js';
import { createMacosModelState } from './macos-model-shim.js';
import { createPfctlModelRunner } from './pfctl-model-runner.js';

// The macOS tool MODELS print a host in the formats the darwin fact parsers read: facts gathered
// from the model are the facts it was built from (the example runner host).
const FACTS = readHostFacts(
  join('testdata', 'policies', 'valid', 'macos-runner-fleet', 'facts.json'),
);

afterEach(() => {
  vi.unstubAllEnvs();
});

describe('darwin facts gathered from the macOS tool models', () => {
  it('gives back the interfaces, addresses, routes and versions of the modelled host', async () => {
    vi.stubEnv(MACOS_TOOLS_ENV, '/models/pfctl-model');
    const macos = createMacosModelState(createMacosHostModel(FACTS));
    const runner = createPfctlModelRunner(createMacosPfHost(), { macos });
    const facts = await gatherFacts(runner, { os: 'darwin' });
    expect(facts.os).toBe('darwin');
    expect(facts.kernel).toBe('24.6.0');
    expect(facts.tools).toEqual({ macos: '15.6' });
    expect(facts.interfaces).toEqual(FACTS.interfaces);
    expect(facts.routes).toEqual(FACTS.routes);
    expect(runner.invocations.map((i) => i.argv.join(' '))).toEqual([
      '/models/pfctl-model/ifconfig',
      '/models/pfctl-model/netstat -rn -f inet',
      '/models/pfctl-model/route -n get default',
      '/models/pfctl-model/sw_vers',
      '/models/pfctl-model/uname -r',
    ]);
  });

  it("gives back a utun's peer, by which a tunnel class finds its renumbered utun", async () => {
    vi.stubEnv(MACOS_TOOLS_ENV, '/models/pfctl-model');
    const vpn = readHostFacts(
      join('testdata', 'policies', 'valid', 'macos-vpn-runner', 'facts.json'),
    );
    const runner = createPfctlModelRunner(createMacosPfHost(), {
      macos: createMacosModelState(createMacosHostModel(vpn)),
    });
    const facts = await gatherFacts(runner, { os: 'darwin' });
    const withPeer = vpn.interfaces.filter((i) => i.peer !== undefined);
    expect(withPeer.length).toBeGreaterThan(0);
    for (const i of withPeer) {
      expect(facts.interfaces.find((g) => g.name === i.name)?.peer).toBe(i.peer);
    }
  });

  it('without a default route, route get fails and facts hold none', async () => {
    vi.stubEnv(MACOS_TOOLS_ENV, '/models/pfctl-model');
    const host = createMacosHostModel({
      ...FACTS,
      routes: FACTS.routes.filter((r) => r.destination !== 'default'),
    });
    const runner = createPfctlModelRunner(createMacosPfHost(), {
      macos: createMacosModelState(host),
    });
    const facts = await gatherFacts(runner, { os: 'darwin' });
    expect(facts.routes.some((r) => r.destination === 'default')).toBe(false);
  });

  it.skipIf(process.platform === 'darwin')(
    'refuses to read macOS facts from Linux tools',
    async () => {
      vi.stubEnv(MACOS_TOOLS_ENV, '');
      const runner = createPfctlModelRunner(createMacosPfHost(), {
        macos: createMacosModelState(),
      });
      await expect(gatherFacts(runner, { os: 'darwin' })).rejects.toThrow(
        `Cannot gather macOS facts on ${process.platform}: ifconfig, netstat and route here are not macOS's`,
      );
      expect(runner.invocations).toEqual([]);
    },
  );
});
