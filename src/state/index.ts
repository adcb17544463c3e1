export { StateDir } from './state-dir.js';
export { acquireHostLock, type HostLock } from './host-lock.js';
