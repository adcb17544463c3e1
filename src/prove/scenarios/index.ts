import type { Backend } from '../../backends/index.js';
import type { Scenario } from '../scenario.js';
import { carrierLost } from './carrier-lost.js';
import { dnsHostResolver } from './dns-host-resolver.js';
import { ipv6TunnelClass } from './ipv6-tunnel-class.js';
import { killPoints } from './kill-points.js';
import { filterAlone, routingAlone } from './layer-alone.js';
import { reapplyUnderTraffic } from './reapply-under-traffic.js';
import { reboot } from './reboot.js';
import { steadyState } from './steady-state.js';
import { tableDeleted } from './table-deleted.js';
import { tunnelDeleted } from './tunnel-deleted.js';
import { tunnelDown } from './tunnel-down.js';
import { tunnelRecreated } from './tunnel-recreated.js';
import { tunnelRenamed } from './tunnel-renamed.js';

/** Every scenario for a backend, in the order a proof runs them; the steady state runs first. */
export function scenariosFor(backend: Backend): Scenario[] {
  return [
    steadyState,
    filterAlone(backend),
    routingAlone(backend),
    tunnelDown,
    tunnelDeleted,
    tunnelRecreated,
    tunnelRenamed,
    carrierLost,
    tableDeleted,
    ipv6TunnelClass,
    dnsHostResolver,
    killPoints,
    reboot,
    reapplyUnderTraffic,
  ];
}
