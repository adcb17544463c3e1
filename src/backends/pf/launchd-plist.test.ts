import { describe, expect, it } from 'vitest';
import {
  createConfirmRevertDaemon,
  createReconvergeDaemon,
  lintLaunchdPlist,
  readLaunchDaemonPlist,
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

  it('renders the one-shot confirm-or-revert timer: at the deadline, or at the wake after it', () => {
    const at = { scheduledAt: Date.UTC(2026, 4, 9, 21, 58, 40), timeZone: 'Europe/Paris' };
    const daemon = createConfirmRevertDaemon({
      label: 'com.egressguard.confirm-timer',
      programArguments: ['/usr/local/bin/egressguard', 'revert', '--if-unconfirmed', 'gen-7'],
      delaySeconds: 120,
      deadline: at.scheduledAt + 120_000,
      ...at,
    });
    const xml = renderLaunchDaemonPlist(daemon);
    expect(lintLaunchdPlist(xml)).toEqual([]);
    expect(xml).toContain('<key>RunAtLoad</key>\n\t<false/>');
    expect(xml).toContain('<key>StartInterval</key>\n\t<integer>120</integer>');
    expect(xml).toContain('<key>LaunchOnlyOnce</key>\n\t<true/>');
    // 22:00:40 UTC is 00:00:40 on 10 May in Paris (CEST): the first whole minute after is 00:01.
    expect(xml).toContain(
      [
        '<key>StartCalendarInterval</key>',
        '\t<array>',
        '\t\t<dict>',
        '\t\t\t<key>Month</key>\n\t\t\t<integer>5</integer>',
        '\t\t\t<key>Day</key>\n\t\t\t<integer>10</integer>',
        '\t\t\t<key>Hour</key>\n\t\t\t<integer>0</integer>',
        '\t\t\t<key>Minute</key>\n\t\t\t<integer>1</integer>',
        '\t\t</dict>',
        '\t</array>',
      ].join('\n'),
    );
    expect(readLaunchDaemonPlist(xml).startCalendarInterval).toEqual([
      { month: 5, day: 10, hour: 0, minute: 1 },
    ]);
    expect(() => renderLaunchDaemonPlist({ ...daemon, startInterval: 0 })).toThrow(
      /StartInterval must be a positive integer/,
    );
    expect(() =>
      renderLaunchDaemonPlist({ ...daemon, startCalendarInterval: [{ minute: 60 }] }),
    ).toThrow(/StartCalendarInterval Minute must be 0–59, not 60/);
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
      [
        wrap(`${ok}<key>StartCalendarInterval</key><integer>5</integer>`),
        /StartCalendarInterval must be a dict of integers or an array of them/,
      ],
      [
        wrap(
          `${ok}<key>StartCalendarInterval</key><dict><key>Hour</key><integer>24</integer></dict>`,
        ),
        /StartCalendarInterval Hour must be an integer 0–23/,
      ],
      [
        wrap(
          `${ok}<key>StartCalendarInterval</key><array><dict><key>Second</key><integer>0</integer></dict></array>`,
        ),
        /unknown StartCalendarInterval key "Second"/,
      ],
    ];
    for (const [xml, expected] of cases) {
      expect(lintLaunchdPlist(xml).join('\n'), xml).toMatch(expected);
    }
  });
});
