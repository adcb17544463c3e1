export { parseHostFacts, readHostFacts, resolveUplink, type HostFacts } from './host-facts.js';
export { gatherFacts } from './gather-facts.js';
