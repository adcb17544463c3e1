export { nftablesBackend } from './nftables-backend.js';
export { createNftCompiler, LOG_GROUP, RULESET_ARTIFACT } from './nft-compiler.js';
export { DEFAULT_TABLE } from './nft-names.js';
export { STEERING_ARTIFACT, STEERING_DEFAULTS, type SteeringSpec } from './steering.js';
