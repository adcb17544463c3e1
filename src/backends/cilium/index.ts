export { ciliumBackend } from './cilium-backend.js';
export { ciliumClusterSupport } from './cluster-support.js';
