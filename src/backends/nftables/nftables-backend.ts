import type { Backend } from '../backend.js';
import { createNftCompiler } from './nft-compiler.js';

/** Linux: one owned nftables table plus policy routing for tunnel classes. */
export const nftablesBackend: Backend = {
  name: 'nftables',
  layer: 'nftables',
  capabilities: {
    supportsSteering: true,
    supportsKillSwitch: true,
    supportsAudit: true,
    supportsMssClamp: true,
    supportsHostClasses: true,
    supportsRuleCounters: true,
    runsHere: true,
  },
  createCompiler: createNftCompiler,
  createApplier: () => {
    throw new Error('The nftables applier is not built yet');
  },
  createInspector: () => {
    throw new Error('The nftables inspector is not built yet');
  },
};
