export { StateDir } from './state-dir.js';
export {
  acquireHostLock,
  acquireHostLockWaiting,
  hostLockHolder,
  type HostLock,
} from './host-lock.js';
export {
  currentBootId,
  identityOf,
  isProcessAlive,
  ownIdentity,
  type ProcessIdentity,
} from './process-identity.js';
