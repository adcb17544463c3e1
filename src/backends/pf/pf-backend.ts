import { gatherInterfaces } from '../../facts/index.js';
import type { Backend } from '../backend.js';
import { classifyLaunchctlCommand, createLaunchdConfirmTimer } from './launchd-confirm-timer.js';
import { createPfApplier } from './pf-applier.js';
import { pfDoctor } from './pf-doctor.js';
import { ANCHOR_ARTIFACT, createPfCompiler, LOCKDOWN_ARTIFACT } from './pf-compiler.js';
import { createPfInspector } from './pf-inspector.js';
import { parsePfOptions, PF_OPTIONS } from './pf-options.js';
import { classifyPfctlCommand, createPfctl } from './pfctl-command.js';
import { createPfSelftest } from './pf-selftest.js';
import { pfUnits } from './pf-units.js';

/**
 * macOS: one pf anchor (by default `com.apple/250.egressguard`, reached through the stock
 * `anchor "com.apple/*"` hooks, so pf.conf is never edited), loaded alone and atomically, kept
 * enabled by our own `-E` reference; the confirm timer is a one-shot LaunchDaemon. pf does not run here: the applier and inspector are tested
 * against the pfctl model (pfctl-model.ts), the compiler against the pf evaluator.
 */
export const pfBackend: Backend = {
  name: 'pf',
  layer: 'pf',
  // route-to in the anchor picks a tunnel class's exit: no routing layer beside pf.
  routingLayer: 'pf',
  capabilities: {
    runsHere: false,
  },
  options: PF_OPTIONS,
  artifactRoles: { [ANCHOR_ARTIFACT]: 'firewall', [LOCKDOWN_ARTIFACT]: 'lockdown' },
  describeScope(options) {
    const parsed = parsePfOptions(options);
    return `pf anchor "${parsed.anchor}" and the pf enable reference recorded in "${parsed.tokenFile}"`;
  },
  classifyCommand: (argv) => classifyPfctlCommand(argv) ?? classifyLaunchctlCommand(argv),
  readInterfaces: (runner) => gatherInterfaces(runner, { os: 'darwin' }),
  createCompiler: createPfCompiler,
  createApplier(context) {
    const options = parsePfOptions(context.options);
    return createPfApplier(createPfctl(context.runner, options), options, context.runner);
  },
  createInspector(context) {
    const options = parsePfOptions(context.options);
    return createPfInspector(createPfctl(context.runner, options), options, () =>
      gatherInterfaces(context.runner, { os: 'darwin' }),
    );
  },
  doctor: pfDoctor,
  units: pfUnits,
  confirmTimer: createLaunchdConfirmTimer(),
  selftest: createPfSelftest(),
};
