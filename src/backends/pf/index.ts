export { pfBackend } from './pf-backend.js';
export { ANCHOR_ARTIFACT, createPfCompiler } from './pf-compiler.js';
export { DEFAULT_ANCHOR } from './pf-options.js';
