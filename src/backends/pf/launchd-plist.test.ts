import { describe, expect, it } from 'vitest';
import {
  createConfirmRevertDaemon,
  createReconvergeDaemon,
  lintLaunchdPlist,
  renderLaunchDaemonPlist,
} from './launchd-plist.js';

describe('LaunchDaemon plists', () => {
  it('renders the re-converge daemon: boot re-arm and every minute, valid for plutil and launchd', () => {
    const xml = renderLaunchDaemonPlist(
      createReconvergeDaemon({
        label: 'com.egressguard.reconverge',
        programArguments: [
          '/usr/local/bin/egressguard',
          'run',
          '--once',
          '--policy',
          '/etc/eg & co/policy.yaml',
        ],
        logPath: '/var/log/egressguard.log',
      }),
    );
    expect(lintLaunchdPlist(xml)).toEqual([]);
    expect(xml).toContain('<key>RunAtLoad</key>\n\t<true/>');
    expect(xml).toContain('<key>StartInterval</key>\n\t<integer>60</integer>');
    expect(xml).toContain('<string>/etc/eg &amp; co/policy.yaml</string>');
    expect(xml.startsWith('<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE plist PUBLIC')).toBe(
      true,
    );
  });

  it('renders the one-shot confirm-or-revert timer', () => {
    const xml = renderLaunchDaemonPlist(
      createConfirmRevertDaemon({
        label: 'com.egressguard.confirm-timer',
        programArguments: ['/usr/local/bin/egressguard', 'revert', '--if-unconfirmed', 'gen-7'],
        delaySeconds: 120,
      }),
    );
    expect(lintLaunchdPlist(xml)).toEqual([]);
    expect(xml).toContain('<key>RunAtLoad</key>\n\t<false/>');
    expect(xml).toContain('<key>StartInterval</key>\n\t<integer>120</integer>');
    expect(xml).toContain('<key>LaunchOnlyOnce</key>\n\t<true/>');
    expect(() =>
      renderLaunchDaemonPlist(
        createConfirmRevertDaemon({ label: 'x', programArguments: ['x'], delaySeconds: 0 }),
      ),
    ).toThrow(/StartInterval must be a positive integer/);
  });

  it('the lint catches what plutil -lint and launchd reject', () => {
    const wrap = (body: string): string =>
      `<?xml version="1.0" encoding="UTF-8"?>\n<plist version="1.0">\n<dict>\n${body}\n</dict>\n</plist>\n`;
    const ok =
      '<key>Label</key><string>a</string><key>ProgramArguments</key><array><string>/bin/true</string></array>';
    expect(lintLaunchdPlist(wrap(ok))).toEqual([]);
    const cases: [string, RegExp][] = [
      [wrap(`${ok}<key>Note</key><string>a & b</string>`), /not well-formed XML/],
      [wrap(ok).replace('</dict>', ''), /not well-formed XML/],
      [
        wrap(`${ok}<key>StartInterval</key><string>60</string>`),
        /StartInterval must be an integer, not string/,
      ],
      [wrap(`${ok}<key>StartInterval</key><integer>sixty</integer>`), /is not an integer/],
      [wrap(`${ok}<key>StartInterval</key><integer>0</integer>`), /positive number of seconds/],
      [wrap(`${ok}<key>RunAtLoad</key><string>yes</string>`), /RunAtLoad must be a boolean/],
      [wrap(`${ok}<key>RunAtLoad</key>`), /has no value/],
      [wrap(`${ok}<key>Label</key><string>b</string>`), /appears twice/],
      [wrap('<key>ProgramArguments</key><array><integer>1</integer></array>'), /Label is missing/],
      [
        wrap(
          '<key>Label</key><string>a</string><key>ProgramArguments</key><array><integer>1</integer></array>',
        ),
        /array of strings/,
      ],
      [wrap(`${ok}<key>RunAtLod</key><true/>`), /unknown launchd key "RunAtLod"/],
      ['<plist version="1.0"><array/></plist>', /top-level value is array/],
      ['<plist version="1.0"><dict/><dict/></plist>', /holds 2 values/],
      ['<dict/>', /root element is <dict>/],
      [wrap(`${ok}<key>X</key><foo/>`), /<foo> is not a property list type/],
    ];
    for (const [xml, expected] of cases) {
      expect(lintLaunchdPlist(xml).join('\n'), xml).toMatch(expected);
    }
  });
});
