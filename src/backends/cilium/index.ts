export { ciliumBackend } from './cilium-backend.js';
