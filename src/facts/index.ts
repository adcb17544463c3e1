export { parseHostFacts, readHostFacts, resolveUplink, type HostFacts } from './host-facts.js';
export { gatherFacts, gatherInterfaces } from './gather-facts.js';
export { MACOS_TOOLS_ENV } from './gather-darwin-facts.js';
export { DEFAULT_LABELS_FILE, labelsFile, parseLabel, readHostLabels } from './host-labels.js';
export { hostOs } from './host-os.js';
export { keepAbsentTunnels } from './keep-absent-tunnels.js';
export { describeTunnelMatch, matchesTunnel, type TunnelMatch } from './match-tunnel.js';
export { refreshTunnels } from './refresh-tunnels.js';
