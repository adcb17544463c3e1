export {
  parseHostFacts,
  readHostFacts,
  resolveUplink,
  type HostFacts,
  type InterfaceFacts,
  type RouteFacts,
} from './host-facts.js';
export { gatherFacts } from './gather-facts.js';
