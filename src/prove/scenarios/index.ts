import type { Scenario } from '../scenario.js';
import { carrierLost } from './carrier-lost.js';
import { dnsHostResolver } from './dns-host-resolver.js';
import { ipv6TunnelClass } from './ipv6-tunnel-class.js';
import { killPoints } from './kill-points.js';
import { layerNftablesAlone } from './layer-nftables-alone.js';
import { layerRoutingAlone } from './layer-routing-alone.js';
import { reapplyUnderTraffic } from './reapply-under-traffic.js';
import { reboot } from './reboot.js';
import { steadyState } from './steady-state.js';
import { tunnelDeleted } from './tunnel-deleted.js';
import { tunnelDown } from './tunnel-down.js';
import { tunnelRecreated } from './tunnel-recreated.js';
import { tunnelRenamed } from './tunnel-renamed.js';

/** Every scenario, in the order a proof runs them; the steady state always runs first. */
export const SCENARIOS: readonly Scenario[] = [
  steadyState,
  layerNftablesAlone,
  layerRoutingAlone,
  tunnelDown,
  tunnelDeleted,
  tunnelRecreated,
  tunnelRenamed,
  carrierLost,
  ipv6TunnelClass,
  dnsHostResolver,
  killPoints,
  reboot,
  reapplyUnderTraffic,
];
