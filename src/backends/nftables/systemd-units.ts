import { systemdCommandLine, systemdEnvironment } from '../../core/index.js';
import type { Artifact } from '../backend.js';

export interface UnitOptions {
  /** Absolute path of the node binary. */
  readonly node: string;
  /** Absolute path of bin/egressguard.js. */
  readonly bin: string;
  readonly stateDir: string;
  /** The policy `run` keeps converged; without it only the boot-time restore is rendered. */
  readonly policy?: string;
}

/**
 * systemd units for a Linux host. The restore unit loads the last applied ruleset before any
 * network comes up (ordered like Debian's nftables.service) and must succeed with the tunnel
 * absent; the resident unit keeps things converged afterwards. Also the systemd-networkd drop-in
 * that stops networkd from deleting our routing rules.
 */
export function renderUnits(options: UnitOptions): Artifact[] {
  const exec = (...args: string[]): string =>
    systemdCommandLine(options.node, [options.bin, ...args]);
  const env = `Environment=${systemdEnvironment('EGRESSGUARD_STATE_DIR', options.stateDir)}`;
  const units: Artifact[] = [
    {
      name: 'egressguard-restore.service',
      content: [
        '[Unit]',
        'Description=egressguard: load the last applied egress policy before the network',
        'Documentation=man:nft(8) man:ip-rule(8)',
        'DefaultDependencies=no',
        'Wants=network-pre.target',
        'Before=network-pre.target shutdown.target',
        'Conflicts=shutdown.target',
        'After=local-fs.target systemd-modules-load.service',
        '',
        '[Service]',
        'Type=oneshot',
        'RemainAfterExit=yes',
        env,
        `ExecStart=${exec('restore')}`,
        '',
        '[Install]',
        'WantedBy=sysinit.target',
        '',
      ].join('\n'),
    },
    {
      name: 'egressguard-networkd.conf',
      content: [
        '# Install as /etc/systemd/networkd.conf.d/egressguard.conf: systemd-networkd deletes',
        '# routing policy rules it did not create unless told not to.',
        '[Network]',
        'ManageForeignRoutingPolicyRules=no',
        '',
      ].join('\n'),
    },
  ];
  if (options.policy !== undefined) {
    units.push({
      name: 'egressguard.service',
      content: [
        '[Unit]',
        'Description=egressguard: keep the egress policy applied and converged',
        'After=egressguard-restore.service',
        'Wants=egressguard-restore.service',
        '',
        '[Service]',
        'Type=simple',
        env,
        `ExecStart=${exec('run', options.policy)}`,
        'Restart=always',
        'RestartSec=2',
        '',
        '[Install]',
        'WantedBy=multi-user.target',
        '',
      ].join('\n'),
    });
  }
  return units;
}
