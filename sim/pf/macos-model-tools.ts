import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The macOS tool shims, each a MODEL (pfctl, launchctl, ifconfig, netstat, route, sw_vers,
 * uname): point EGRESSGUARD_PFCTL, EGRESSGUARD_LAUNCHCTL or EGRESSGUARD_MACOS_TOOLS here.
 */
export const MACOS_MODEL_TOOLS = fileURLToPath(new URL('./macos-tools', import.meta.url));

/** The pfctl model's shim, exec'd in place of /sbin/pfctl. */
export const PFCTL_MODEL_SHIM = join(MACOS_MODEL_TOOLS, 'pfctl');

/** The launchctl model's shim, exec'd in place of /bin/launchctl. */
export const LAUNCHCTL_MODEL_SHIM = join(MACOS_MODEL_TOOLS, 'launchctl');

/** Every shim's path: programs the root-namespace guard may let act, as they change nothing here. */
export function listMacosModelTools(): string[] {
  return readdirSync(MACOS_MODEL_TOOLS)
    .sort()
    .map((tool) => join(MACOS_MODEL_TOOLS, tool));
}
