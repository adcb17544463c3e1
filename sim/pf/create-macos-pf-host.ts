import { readFileSync } from 'node:fs';
import { createPfctlModelState, PfctlModel } from './pfctl-model.js';

const FIXTURES = new URL('../../src/backends/pf/fixtures/', import.meta.url);

/** Apple's stock `/etc/pf.conf` and `/etc/pf.anchors/com.apple` (fixtures/SOURCES.md). */
export function readStockPfFiles(variant: 'current' | 'legacy' = 'current'): {
  pfConf: string;
  comApple: string;
} {
  const folder = variant === 'current' ? 'macos-stock' : 'macos-stock-legacy';
  return {
    pfConf: readFileSync(new URL(`${folder}/pf.conf`, FIXTURES), 'utf8'),
    comApple: readFileSync(new URL(`${folder}/pf.anchors/com.apple`, FIXTURES), 'utf8'),
  };
}

/** A Tart runner host's interfaces: the uplink, the vmnet bridge of the VMs, loopback. */
export const RUNNER_INTERFACES: Record<string, string[]> = {
  lo0: ['127.0.0.1/8', '::1/128'],
  en0: ['203.0.113.10/24', '2001:db8:10::10/64'],
  bridge100: ['192.168.64.1/22'],
};

/**
 * A modelled macOS host as it is after boot: the system's boot job has loaded `/etc/pf.conf`
 * ("the main ruleset, which gets automatically loaded at startup", stock pf.conf), a system
 * component holds a `-E` reference (the Application Firewall's `socketfilterfw` token, NOTES §5),
 * and, when asked, Internet Sharing / vmnet has inserted its top-level
 * `com.apple.internet-sharing` anchors and NAT (NOTES §5, observed `pfctl -sn` output).
 */
export function createMacosPfHost(
  options: {
    variant?: 'current' | 'legacy';
    /** Replaces the stock /etc/pf.conf (e.g. with an installer's stanza added). */
    pfConf?: string;
    files?: Record<string, string>;
    interfaces?: Record<string, string[]>;
    systemReference?: boolean;
    internetSharing?: boolean;
  } = {},
): PfctlModel {
  const stock = readStockPfFiles(options.variant);
  const model = new PfctlModel(
    createPfctlModelState({
      interfaces: options.interfaces ?? RUNNER_INTERFACES,
      files: {
        '/etc/pf.conf': options.pfConf ?? stock.pfConf,
        '/etc/pf.anchors/com.apple': stock.comApple,
        ...options.files,
      },
    }),
  );
  bootMacosPfHost(model, options);
  return model;
}

/** What macOS does with pf at boot: load /etc/pf.conf, then system components enable pf. */
export function bootMacosPfHost(
  model: PfctlModel,
  options: { systemReference?: boolean; internetSharing?: boolean } = {},
): { bootLoad: ReturnType<PfctlModel['run']> } {
  const bootLoad = model.run(['-f', '/etc/pf.conf'], { pid: 1, processName: 'launchd' });
  if (options.systemReference ?? true) {
    model.run(['-E'], { pid: 312, processName: 'socketfilterfw' });
  }
  if (options.internetSharing ?? false) startInternetSharing(model);
  return { bootLoad };
}

/**
 * vmnet's shared network: Internet Sharing inserts its anchor points into the main ruleset and
 * its NAT into `com.apple.internet-sharing/shared_v4` (observed `pfctl -a
 * com.apple.internet-sharing/shared_v4 -s nat` output quoted in NOTES §1 and §5).
 */
export function startInternetSharing(
  model: PfctlModel,
  options: { uplink?: string; bridge?: string; subnet?: string; gateway?: string } = {},
): void {
  const uplink = options.uplink ?? 'en0';
  const bridge = options.bridge ?? 'bridge100';
  const subnet = options.subnet ?? '192.168.64.0/22';
  const gateway = options.gateway ?? '192.168.64.1';
  model.insertSystemRules(
    '',
    [
      'nat-anchor "com.apple.internet-sharing/*"',
      'rdr-anchor "com.apple.internet-sharing/*"',
      'anchor "com.apple.internet-sharing/*"',
      '',
    ].join('\n'),
  );
  model.insertSystemRules(
    'com.apple.internet-sharing/shared_v4',
    [
      `nat on ${uplink} inet from ${subnet} to any -> (${uplink}:0) extfilter ei`,
      `no nat on ${bridge} inet from ${gateway} to ${subnet}`,
      '',
    ].join('\n'),
  );
  // Its own enable reference: "each component which utilizes PF is responsible for enabling"
  // it with -E (stock pf.conf); the process name is illustrative.
  model.run(['-E'], { pid: 401, processName: 'InternetSharing' });
}
