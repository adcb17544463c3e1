export {
  startServer,
  parseListen,
  type RunningServer,
  type ServerOptions,
} from './start-server.js';
export {
  createOperatorClient,
  OperatorCallError,
  type OperatorClient,
  type OperatorTarget,
} from './operator-client.js';
export { METRICS_TOKEN_ENV, OPERATOR_TOKEN_ENV } from './operator-token.js';
export { DEFAULT_HOST_RATE_LIMIT, type HostRateLimit } from './host-rate-limit.js';
export {
  SERVER_STATE_DIR,
  SERVER_UNIT_KINDS,
  renderServerUnit,
  serverUnitPathProblem,
  type ServerUnitKind,
} from './server-units.js';
