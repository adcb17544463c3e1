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
export { OPERATOR_TOKEN_ENV } from './operator-token.js';
