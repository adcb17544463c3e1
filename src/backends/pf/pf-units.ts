import { dirname, join } from 'node:path';
import type { Artifact, UnitsSupport } from '../backend.js';
import {
  createReconvergeDaemon,
  lintLaunchdPlist,
  renderLaunchDaemonPlist,
  type LaunchDaemon,
} from './launchd-plist.js';

const RESTORE_LABEL = 'dev.egressguard.restore';
const RECONVERGE_LABEL = 'dev.egressguard.reconverge';

/**
 * The LaunchDaemons of a macOS host (for /Library/LaunchDaemons): at boot, `restore` loads the
 * last applied anchor (or, when a tunnel found by `match` moved or it cannot load, the lockdown)
 * before anything else re-arms pf; with a policy, a daemon that applies it at load and every
 * minute, so a flush, a reboot or a renumbered utun is re-converged, and a failure is recorded in
 * the state directory where `status` reports it. The facts file sits beside the policy
 * (`facts.json`); the tunnels are read live.
 */
export const pfUnits: UnitsSupport = {
  description: 'LaunchDaemons (restore at boot, re-converge every minute)',
  render(input) {
    const base = [input.node, input.bin];
    const log = `${input.stateDir}/launchd.log`;
    const daemons: LaunchDaemon[] = [
      {
        label: RESTORE_LABEL,
        programArguments: [...base, 'restore', '--state-dir', input.stateDir],
        runAtLoad: true,
        launchOnlyOnce: true,
        processType: 'Background',
        standardOutPath: log,
        standardErrorPath: log,
      },
    ];
    if (input.policy !== undefined) {
      daemons.push(
        createReconvergeDaemon({
          label: RECONVERGE_LABEL,
          programArguments: [
            ...base,
            'apply',
            input.policy,
            // A reviewed facts file beside the policy: live macOS facts are verified only against
            // hand-written tool output (docs/macos.md). Its tunnels found by `match` are read live
            // (`ifconfig` alone): a utun is renumbered on every VPN reconnect, which no reviewed
            // file follows, and a misread tunnel binds as absent, its class dropped (fail closed),
            // where a misread uplink or route would send the VMs the wrong way.
            '--facts',
            join(dirname(input.policy), 'facts.json'),
            '--live-tunnels',
            '--state-dir',
            input.stateDir,
            '--lock-timeout',
            '30s',
          ],
          intervalSeconds: 60,
          logPath: log,
        }),
      );
    }
    return daemons.map((daemon): Artifact => {
      const content = renderLaunchDaemonPlist(daemon);
      const problems = lintLaunchdPlist(content);
      if (problems.length > 0) {
        throw new Error(`Rendered an invalid plist for ${daemon.label}: ${problems.join('; ')}`);
      }
      return { name: `${daemon.label}.plist`, content };
    });
  },
};
