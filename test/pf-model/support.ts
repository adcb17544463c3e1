import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createMacosPfHost } from '../../sim/pf/create-macos-pf-host.js';
import { createPfctlModelRunner } from '../../sim/pf/pfctl-model-runner.js';
import { createMacosHostModel, type MacosHostModel } from '../../sim/pf/macos-host-model.js';
import { createMacosModelState, type MacosModelState } from '../../sim/pf/macos-model-shim.js';
import type { PfctlModel } from '../../sim/pf/pfctl-model.js';
import { readHostFacts, type HostFacts } from '../../src/facts/index.js';
import {
  createHostTarget,
  prepareForFacts,
  requirePolicy,
  type HostTarget,
  type Prepared,
} from '../../src/host/index.js';
import { Faults, type Runner } from '../../src/runner/index.js';

export const RUNNER_CASE = join('testdata', 'policies', 'valid', 'macos-runner-fleet');
export const FACTS: HostFacts = readHostFacts(join(RUNNER_CASE, 'facts.json'));

/** The Tart runner host of the example, as a modelled macOS host (stock pf.conf, booted). */
export function modelInterfaces(facts: HostFacts = FACTS): Record<string, string[]> {
  return Object.fromEntries(facts.interfaces.map((i) => [i.name, [...i.addresses]]));
}

export interface PfModelHost {
  readonly dir: string;
  readonly model: PfctlModel;
  /** The rest of the modelled Mac: launchd's jobs (the confirm timer's LaunchDaemons). */
  readonly macos: MacosModelState;
  readonly runner: Runner;
  readonly faults: Faults;
  readonly target: HostTarget;
  readonly tokenFile: string;
  /** How many model log entries the boot wrote (what the system ran, not egressguard). */
  readonly bootCalls: number;
  /**
   * An interface appears, changes or goes (null), for pf (the pfctl model) and for `ifconfig`
   * (the macOS host model) at once: a VPN reconnecting as another utun, say.
   */
  setInterface(
    name: string,
    iface: Omit<MacosHostModel['interfaces'][number], 'name'> | null,
  ): void;
  prepare(policy?: string): Prepared;
  cleanup(): void;
}

/**
 * A host target whose pfctl is the pfctl MODEL of a booted stock macOS host, in this process,
 * with its own state directory: the apply layer (host lock, generations) runs for real.
 */
export function createPfModelHost(
  options: {
    model?: PfctlModel;
    pfConf?: string;
    files?: Record<string, string>;
    /** Backend options beyond the token file (`pfAttach`, `pfConf`). */
    backendOptions?: Record<string, string>;
    /** The host `ifconfig` and the other tools print (the macOS host model); absent: none. */
    hostFacts?: HostFacts;
  } = {},
): PfModelHost {
  const dir = mkdtempSync(join(tmpdir(), 'eg-pf-model-'));
  const model =
    options.model ??
    createMacosPfHost({
      interfaces: modelInterfaces(),
      ...(options.pfConf === undefined ? {} : { pfConf: options.pfConf }),
      ...(options.files === undefined ? {} : { files: options.files }),
    });
  const faults = new Faults();
  const macos = createMacosModelState(
    options.hostFacts === undefined ? undefined : createMacosHostModel(options.hostFacts),
  );
  const runner = createPfctlModelRunner(model, { faults, macos });
  const tokenFile = join(dir, 'pf-token.json');
  const target: HostTarget = {
    ...createHostTarget({
      stateDir: join(dir, 'state'),
      options: { pfTokenFile: tokenFile, ...options.backendOptions },
      backend: 'pf',
    }),
    runner,
  };
  return {
    dir,
    model,
    macos,
    runner,
    faults,
    target,
    tokenFile,
    bootCalls: model.state.log.length,
    setInterface(name, iface) {
      model.setInterface(name, iface === null ? null : [...iface.addresses]);
      const host = macos.host;
      if (host === undefined) return;
      const others = host.interfaces.filter((i) => i.name !== name);
      // The model state is plain data the runner reads at each call; its types are read-only.
      (macos as { host?: MacosHostModel }).host = {
        ...host,
        interfaces: iface === null ? others : [...others, { name, ...iface }],
      };
    },
    prepare(policy = join(RUNNER_CASE, 'policy.yaml')) {
      return prepareForFacts(target, { policy: requirePolicy(policy).policy, facts: FACTS });
    },
    cleanup() {
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
