import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseIpv4 } from '../../src/core/index.js';
import { createMacosPfHost, startInternetSharing } from './create-macos-pf-host.js';
import {
  createPfctlModelState,
  findForbiddenPfctlForms,
  PFCTL_LOAD_WARNING,
  PfctlModel,
} from './pfctl-model.js';
import { readPfctlModelState, writePfctlModelState } from './pfctl-model-store.js';
import { runPfctlModelShim } from './pfctl-model-shim.js';
import { PFCTL_MODEL_SHIM } from './macos-model-tools.js';

const OURS = 'com.apple/250.egressguard';
const ANCHOR = `table <vm_sources> { 192.168.64.0/22 }
table <blocked> { 198.51.100.0/24 }
nat on en0 inet from <vm_sources> to any -> (en0)
block in quick on bridge100 inet from <vm_sources> to <blocked> label "eg:r1"
pass in quick on bridge100 inet from <vm_sources> to any label "eg:r2"
`;

function hostWithAnchor(text = ANCHOR): PfctlModel {
  const model = createMacosPfHost({ files: { '/var/db/egressguard/anchor.pf': text } });
  const load = model.run(['-a', OURS, '-f', '/var/db/egressguard/anchor.pf']);
  expect(load).toEqual({ exitCode: 0, stdout: '', stderr: PFCTL_LOAD_WARNING });
  return model;
}

const VM = parseIpv4('192.168.64.5') as number;
function vmTo(destination: string, port = 443): Parameters<PfctlModel['forwardPacket']>[0] {
  return {
    family: 4,
    source: VM,
    destination: parseIpv4(destination) as number,
    protocol: 6,
    sourcePort: 50000,
    destinationPort: port,
    ingress: 'bridge100',
    egress: 'en0',
  };
}

describe('pfctl model: enable references (XNU pf_ioctl.c, NOTES §3)', () => {
  it('-E hands out a token per call and counts references; -X releases exactly one', () => {
    const model = new PfctlModel(createPfctlModelState());
    const first = model.run(['-E'], { pid: 10 });
    expect(first.exitCode).toBe(0);
    const token = /Token : (\d+)/.exec(first.stderr)?.[1] ?? '';
    expect(token).toMatch(/^\d{16,}$/);
    const second = /Token : (\d+)/.exec(model.run(['-E'], { pid: 11 }).stderr)?.[1];
    expect(second).not.toBe(token);
    const references = model.run(['-s', 'References']).stdout;
    expect(references).toContain(token);
    expect(references).toContain(second);
    expect(references.match(/pfctl/g)).toHaveLength(2); // the calling process: pfctl itself

    expect(model.run(['-X', token]).exitCode).toBe(0);
    expect(model.run(['-s', 'info']).stdout).toMatch(/^Status: Enabled/); // one reference left
    expect(model.run(['-s', 'References']).stdout).not.toContain(token);
    const unknown = model.run(['-X', token]);
    expect(unknown.exitCode).toBe(1);
    expect(unknown.stderr).toContain('Invalid argument');
    expect(model.run(['-X', second ?? '']).stderr).toBe('pf disabled\n');
    expect(model.run(['-s', 'info']).stdout).toMatch(/^Status: Disabled/);
  });

  it('-d stops pf and invalidates every token; -e on a running pf is EEXIST', () => {
    const model = new PfctlModel(createPfctlModelState());
    const token = /Token : (\d+)/.exec(model.run(['-E']).stderr)?.[1] ?? '';
    expect(model.run(['-e'])).toMatchObject({ exitCode: 1, stderr: 'pfctl: pf already enabled\n' });
    expect(model.run(['-d'])).toMatchObject({ exitCode: 0, stderr: 'pf disabled\n' });
    expect(model.run(['-s', 'References']).stdout).not.toContain(token);
    expect(model.run(['-X', token]).exitCode).toBe(1);
    expect(model.run(['-d'])).toMatchObject({ exitCode: 1, stderr: 'pfctl: pf not enabled\n' });
  });

  it('-E after -f in one call enables only when the load succeeded (F93 pfctl.c main order)', () => {
    const model = new PfctlModel(createPfctlModelState());
    const failed = model.run(['-E', '-a', 'x', '-f', '-'], { stdin: 'pass out bogus\n' });
    expect(failed.exitCode).toBe(1);
    expect(model.state.tokens).toHaveLength(0);
    expect(model.state.enabled).toBe(false);
    const loaded = model.run(['-E', '-a', 'x', '-f', '-'], { stdin: 'pass out all\n' });
    expect(loaded.exitCode).toBe(0);
    expect(model.state.tokens).toHaveLength(1);
  });
});

describe('pfctl model: loading an anchor with -a (NOTES §2, §4)', () => {
  it('replaces the anchor rules, nat and tables in one transaction and leaves the main ruleset alone', () => {
    const model = hostWithAnchor();
    const main = model.run(['-sr']).stdout;
    expect(model.run(['-a', OURS, '-sr']).stdout).toBe(
      'block drop in quick on bridge100 inet from <vm_sources> to <blocked> label "eg:r1"\n' +
        'pass in quick on bridge100 inet from <vm_sources> to any flags S/SA keep state label "eg:r2"\n',
    );
    // `(en0)` may hold several addresses: parse.y makes it a round-robin pool (DYNIF_MULTIADDR)
    // and print_pool says so.
    expect(model.run(['-a', OURS, '-sn']).stdout).toBe(
      'nat on en0 inet from <vm_sources> to any -> (en0) round-robin\n',
    );
    expect(model.run(['-a', OURS, '-T', 'show', '-t', 'blocked']).stdout).toBe(
      '   198.51.100.0/24\n',
    );
    model.state.files['/var/db/egressguard/anchor.pf'] =
      'table <vm_sources> { 192.168.64.0/24 }\npass in quick on bridge100 from <vm_sources>\n';
    expect(model.run(['-a', OURS, '-f', '/var/db/egressguard/anchor.pf']).exitCode).toBe(0);
    expect(model.run(['-a', OURS, '-sn']).stdout).toBe('');
    expect(model.run(['-a', OURS, '-T', 'show', '-t', 'blocked']).exitCode).toBe(1);
    expect(model.run(['-a', OURS, '-T', 'show', '-t', 'vm_sources']).stdout).toBe(
      '   192.168.64.0/24\n',
    );
    expect(model.run(['-sr']).stdout).toBe(main);
  });

  it('a parse error changes nothing and is reported like pfctl', () => {
    const model = hostWithAnchor();
    const before = JSON.stringify(model.state.anchors);
    const broken = model.run(['-a', OURS, '-f', '-'], {
      stdin: 'table <x> { 10.0.0.0/8 }\nmatch out on en0 nat-to (en0)\n',
    });
    expect(broken).toEqual({
      exitCode: 1,
      stdout: '',
      stderr: `${PFCTL_LOAD_WARNING}stdin:2: syntax error\npfctl: Syntax error in config file: pf rules not loaded\n`,
    });
    expect(JSON.stringify(model.state.anchors)).toBe(before);
  });

  it('-n -a parses only: no rules, no tables, no ticket change', () => {
    const model = hostWithAnchor();
    const before = JSON.stringify({ a: model.state.anchors, t: model.state.tickets });
    const check = model.run(['-n', '-a', OURS, '-f', '-'], { stdin: 'pass out all\n' });
    expect(check.exitCode).toBe(0);
    expect(JSON.stringify({ a: model.state.anchors, t: model.state.tickets })).toBe(before);
    expect(model.run(['-nv', '-a', OURS, '-f', '-'], { stdin: 'pass out all\n' }).stdout).toBe(
      'pass out all flags S/SA keep state\n',
    );
  });

  it('refuses `route-to (ifname)` and a route-to interface the host lacks, at -n and at load', () => {
    // parse.y route_host (1.291, 1.449): `STRING | '(' STRING host ')'`, each action checking
    // ifa_exists while parsing, so -n fails as the load does and no rule changes (a load's
    // begun transaction is rolled back; its tickets have moved, as the kernel's do).
    const model = hostWithAnchor();
    const before = JSON.stringify(model.state.anchors);
    const rule = (target: string): string =>
      `pass in quick on bridge100 route-to ${target} inet all tag EG keep state (if-bound) label "ks"\n`;
    const notLoaded = 'pfctl: Syntax error in config file: pf rules not loaded\n';
    for (const argv of [
      ['-n', '-a', OURS, '-f', '-'],
      ['-a', OURS, '-f', '-'],
    ]) {
      const warning = argv[0] === '-n' ? '' : PFCTL_LOAD_WARNING;
      expect(model.run(argv, { stdin: rule('(en0)') })).toEqual({
        exitCode: 1,
        stdout: '',
        stderr: `${warning}stdin:1: syntax error\n${notLoaded}`,
      });
      for (const target of ['utun3', '(utun3 10.8.0.1)']) {
        expect(model.run(argv, { stdin: rule(target) })).toEqual({
          exitCode: 1,
          stdout: '',
          stderr: `${warning}stdin:1: routeto: unknown interface utun3\n${notLoaded}`,
        });
      }
    }
    expect(JSON.stringify(model.state.anchors)).toBe(before);
    // Once the interface exists, both forms load, and -sr prints the bare one bare (print_pool).
    model.setInterface('utun3', ['10.8.0.2/32']);
    expect(model.run(['-n', '-a', OURS, '-f', '-'], { stdin: rule('utun3') }).exitCode).toBe(0);
    expect(model.run(['-a', OURS, '-f', '-'], { stdin: rule('utun3') }).exitCode).toBe(0);
    expect(model.run(['-a', OURS, '-sr']).stdout).toBe(
      'pass in quick on bridge100 route-to utun3 inet all flags S/SA keep state (if-bound) label "ks" tag EG\n',
    );
    // Gone after the load, it stays in the loaded rule (the kernel keeps the name): the rules
    // read back as they were, and only a new load is refused.
    model.setInterface('utun3', null);
    expect(model.run(['-a', OURS, '-sr']).stdout).toContain('route-to utun3 inet');
    expect(model.run(['-n', '-a', OURS, '-f', '-'], { stdin: rule('utun3') }).exitCode).toBe(1);
  });

  it('ignores `load anchor` in a file loaded with -a (pfctl.c:1505-1507)', () => {
    const model = hostWithAnchor();
    const result = model.run(['-a', OURS, '-f', '-'], {
      stdin: 'pass out all\nload anchor "other" from "/nonexistent"\n',
    });
    expect(result.exitCode).toBe(0);
    expect(model.state.anchors['other']).toBeUndefined();
  });

  it('two loads of one anchor in one transaction collide; an injected collision does too', () => {
    const model = hostWithAnchor();
    model.injectTransactionCollision(OURS);
    const collided = model.run(['-a', OURS, '-f', '/var/db/egressguard/anchor.pf']);
    expect(collided.exitCode).toBe(1);
    expect(collided.stderr).toBe(
      PFCTL_LOAD_WARNING +
        '/var/db/egressguard/anchor.pf:1: cannot define table vm_sources: Resource busy\n' +
        '/var/db/egressguard/anchor.pf:2: cannot define table blocked: Resource busy\n' +
        'pfctl: Syntax error in config file: pf rules not loaded\n',
    );
    // An anchor file without tables passes the definitions and fails at commit instead.
    model.injectTransactionCollision(OURS);
    const commit = model.run(['-a', OURS, '-f', '-'], { stdin: 'pass out all\n' });
    expect(commit).toMatchObject({
      exitCode: 1,
      stderr: `${PFCTL_LOAD_WARNING}pfctl: DIOCXCOMMIT: Resource busy\n`,
    });
    expect(model.run(['-a', OURS, '-sr']).stdout).toContain('eg:r2'); // unchanged
  });

  it('refuses reserved anchor names from the command line', () => {
    const model = hostWithAnchor();
    expect(model.run(['-a', '_x', '-sr']).exitCode).toBe(1);
  });
});

describe('pfctl model: anchors and evaluation through the kernel state', () => {
  it('lists sub-anchors in name order and evaluates them in that order', () => {
    const model = hostWithAnchor();
    model.run(['-a', 'com.apple/0.early', '-f', '-'], {
      stdin: 'pass in quick on bridge100 all label "sibling"\n',
    });
    expect(model.run(['-a', 'com.apple', '-s', 'Anchors']).stdout).toBe(
      '  com.apple/0.early\n  com.apple/200.AirDrop\n  com.apple/250.ApplicationFirewall\n  com.apple/250.egressguard\n',
    );
    const blocked = model.forwardPacket(vmTo('198.51.100.9'));
    // The sibling's `pass quick` ends evaluation before ours (DESIGN.md §4 pf).
    expect(blocked.verdict).toBe('pass');
    expect(blocked.inbound.label).toBe('sibling');
    expect(blocked.inbound.evaluated.some((ref) => ref.anchor === OURS)).toBe(false);
    model.run(['-a', 'com.apple/0.early', '-F', 'all']);
    // States outlive the rules that made them (DESIGN.md §4 pf): the flow still passes…
    expect(model.forwardPacket(vmTo('198.51.100.9')).inbound.decidedBy).toBe('state');
    // …until its states are killed.
    model.run(['-k', '192.168.64.5']);
    expect(model.forwardPacket(vmTo('198.51.100.9')).verdict).toBe('block');
  });

  it('moves -vsr counters as packets are evaluated, and keeps states that -k kills', () => {
    const model = hostWithAnchor();
    const before = model.run(['-a', OURS, '-vsr']).stdout;
    expect(before).toContain(
      '[ Evaluations: 0         Packets: 0         Bytes: 0           States: 0     ]',
    );
    const passed = model.forwardPacket({ ...vmTo('192.0.2.80'), bytes: 1500 });
    expect(passed.verdict).toBe('pass');
    expect(passed.leaving?.source).toBe(parseIpv4('203.0.113.10'));
    const after = model.run(['-a', OURS, '-vsr']).stdout;
    // Evaluated in on bridge100 (its match) and out on en0 (no skip steps in the model).
    expect(after).toContain(
      'label "eg:r2"\n  [ Evaluations: 2         Packets: 1         Bytes: 1500        States: 1     ]',
    );
    expect(model.run(['-a', OURS, '-vsn']).stdout).toContain('Packets: 1 ');
    const states = model.run(['-s', 'states']).stdout;
    expect(states).toContain('all tcp 192.0.2.80:443 <- 192.168.64.5:50000');
    expect(states).toContain('all tcp 192.168.64.5:50000 (203.0.113.10:50000) -> 192.0.2.80:443');
    // The next packet of the flow matches the state before any rule.
    expect(model.forwardPacket(vmTo('192.0.2.80')).inbound.decidedBy).toBe('state');
    const killed = model.run(['-k', '192.168.64.0/22']);
    expect(killed.stderr).toBe('killed 2 states from 1 sources and 0 destinations\n');
    expect(model.run(['-s', 'states']).stdout).toBe('');
    expect(model.forwardPacket(vmTo('192.0.2.80')).inbound.decidedBy).toBe('rule');
  });

  it('-F without -a flushes the main ruleset, so our anchor is no longer consulted', () => {
    const model = hostWithAnchor();
    expect(model.run(['-a', OURS, '-F', 'all']).stderr).toBe(
      'rules cleared\nnat cleared\n2 tables deleted.\n',
    );
    hostWithAnchor(); // a fresh host for the main flush
    const other = hostWithAnchor();
    const flush = other.run(['-F', 'all']);
    expect(flush.exitCode).toBe(0);
    expect(other.run(['-sr']).stdout).toBe('');
    expect(other.forwardPacket(vmTo('198.51.100.9')).verdict).toBe('pass'); // not consulted
    expect(other.state.log.map((l) => l.argv.join(' '))).toContain('-F all');
  });

  it('Internet Sharing NAT comes after com.apple/*: our NAT decides, first match', () => {
    const model = hostWithAnchor('nat on en0 inet from 192.168.64.0/22 to any -> 203.0.113.99\n');
    startInternetSharing(model);
    const result = model.forwardPacket(vmTo('192.0.2.80'));
    expect(result.leaving?.source).toBe(parseIpv4('203.0.113.99'));
    expect(result.outbound?.translation?.rule?.anchor).toBe(OURS);
  });

  it('a main-ruleset load replaces what system services inserted into it', () => {
    const model = hostWithAnchor('');
    startInternetSharing(model);
    expect(model.run(['-sn']).stdout).toContain('nat-anchor "com.apple.internet-sharing/*" all');
    const load = model.run(['-f', '/etc/pf.conf']);
    expect(load.exitCode).toBe(0);
    expect(load.stderr).toContain('Use of -f option, could result in flushing of rules');
    expect(model.run(['-sn']).stdout).not.toContain('internet-sharing');
    expect(model.forwardPacket(vmTo('192.0.2.80')).leaving?.source).toBe(VM);
  });

  it('takes options from a main-ruleset load only, and tables from files', () => {
    const model = new PfctlModel(
      createPfctlModelState({
        interfaces: { bridge100: ['192.168.64.1/22'], lo0: ['127.0.0.1/8'] },
        files: {
          '/etc/pf.conf': 'loop = "lo0"\nset skip on { $loop }\nblock in all\n',
          '/etc/blocked.txt': '198.51.100.0/24\n# a comment\n!198.51.100.7\n',
        },
      }),
    );
    model.run(['-E']);
    expect(model.run(['-f', '/etc/pf.conf']).exitCode).toBe(0);
    expect(model.state.skip).toEqual(['lo0']);
    const local = { family: 4 as const, source: 2130706433, destination: 2130706433, protocol: 6 };
    expect(model.sendPacket({ ...local, direction: 'in', interface: 'lo0' }).decidedBy).toBe(
      'skip',
    );
    expect(model.sendPacket({ ...local, direction: 'in', interface: 'bridge100' }).verdict).toBe(
      'block',
    );
    // -a ignores options (F93 pfctl.c:2191).
    model.run(['-a', 'x', '-f', '-'], { stdin: 'set skip on bridge100\npass in all\n' });
    expect(model.state.skip).toEqual(['lo0']);
    model.run(['-a', 'x', '-f', '-'], { stdin: 'table <b> file "/etc/blocked.txt"\n' });
    expect(model.run(['-a', 'x', '-T', 'show', '-t', 'b']).stdout).toBe(
      '   198.51.100.0/24\n  !198.51.100.7\n',
    );
  });

  it('flags the forms egressguard must never run (DESIGN.md §4 pf) in the log', () => {
    expect(findForbiddenPfctlForms(['-a', OURS, '-f', '/x'])).toEqual([]);
    expect(findForbiddenPfctlForms(['-n', '-a', OURS, '-f', '/x'])).toEqual([]);
    expect(findForbiddenPfctlForms(['-na', OURS, '-f/x'])).toEqual([]);
    expect(findForbiddenPfctlForms(['-nf', '/etc/pf.conf'])).toEqual([
      'loads the main ruleset (-f without -a)',
    ]);
    expect(findForbiddenPfctlForms(['-Fa'])).toEqual(['flushes without -a']);
    expect(findForbiddenPfctlForms(['-a', OURS, '-F', 'all'])).toEqual([]);
    expect(findForbiddenPfctlForms(['-d'])).toEqual(['disables pf (-d)']);
    expect(findForbiddenPfctlForms(['-vsr', '-X', '123'])).toEqual([]);
    // `-t d…` is a value, not -d.
    expect(findForbiddenPfctlForms(['-T', 'show', '-t', 'dns'])).toEqual([]);
    const model = hostWithAnchor();
    model.run(['-d']);
    expect(model.state.log.at(-1)?.forbidden).toEqual(['disables pf (-d)']);
    expect(model.state.log[0]?.forbidden).toEqual(['loads the main ruleset (-f without -a)']); // the boot job
  });

  it('-nf on the main ruleset parses every load anchor, begins nothing, and passes a duplicated one', () => {
    // F93 pfctl.c pfctl_rules: DIOCXBEGIN only without -n; pfctl_load_anchors parses each
    // `load anchor` either way; parse.y defines tables only without -n.
    const model = hostWithAnchor();
    const tickets = structuredClone(model.state.tickets);
    const anchors = JSON.stringify(model.state.anchors);
    const stock = model.state.files['/etc/pf.conf'] ?? '';
    const twice = `${stock}load anchor "com.apple" from "/etc/pf.anchors/com.apple"\n`;
    model.state.files['/etc/pf.conf'] = twice;
    expect(model.run(['-nf', '/etc/pf.conf'])).toEqual({ exitCode: 0, stdout: '', stderr: '' });
    expect(model.state.tickets).toEqual(tickets);
    expect(JSON.stringify(model.state.anchors)).toBe(anchors);
    // The load itself collides with itself: the second begin of the anchor moves the ticket
    // the first holds, and the commit finds it stale (pf_ioctl.c DIOCXCOMMIT).
    const load = model.run(['-f', '/etc/pf.conf']);
    expect(load.exitCode).toBe(1);
    expect(load.stderr).toContain('pfctl: DIOCXCOMMIT: Resource busy');
    // A file that uses what the model does not implement is not a pfctl refusal: exit 2.
    const other = model.run(['-n', '-a', OURS, '-f', '-'], {
      stdin: 'pass in from any os "OpenBSD" to any\n',
    });
    expect(other.exitCode).toBe(2);
    expect(other.stderr).toMatch(/not modelled/);
  });

  it('optimizes an anchor as pfctl does by default, and -o none keeps every rule', () => {
    const model = hostWithAnchor();
    const hosts = ['10.0.0.1', '10.0.0.2', '10.0.0.3', '10.0.0.4', '10.0.0.5', '10.0.0.6'];
    const text = [
      ...hosts.map((h) => `block drop in quick on bridge100 from any to ${h}`),
      'pass in on bridge100 proto tcp from any to any port 22',
      'pass in on bridge100 proto tcp from any to 10.1.0.1 port 22',
      ...hosts.map((h) => `pass in on bridge100 from any to ${h} label "kept"`),
    ].join('\n');
    const basic = model.run(['-nv', '-a', OURS, '-f', '-'], { stdin: text });
    // combine_rules: six rules differing in one address become one rule on a table; the
    // subset rule (port 22 to one host, after the rule to any host) is removed; labelled rules
    // are superblocks of their own and stay (pfctl_optimize.c BARRIER).
    expect(basic.stdout.split('\n').filter((l) => l !== '')).toEqual([
      'table <__automatic_0> const { 10.0.0.1, 10.0.0.2, 10.0.0.3, 10.0.0.4, 10.0.0.5, 10.0.0.6 }',
      'block drop in quick on bridge100 inet from any to <__automatic_0>',
      'pass in on bridge100 proto tcp from any to any port = 22 flags S/SA keep state',
      ...hosts.map(
        (h) => `pass in on bridge100 inet from any to ${h} flags S/SA keep state label "kept"`,
      ),
    ]);
    const none = model.run(['-o', 'none', '-nv', '-a', OURS, '-f', '-'], { stdin: text });
    expect(none.stdout.split('\n').filter((l) => l !== '')).toHaveLength(14);
  });

  it('keeps an invocation log of every call with its exit code', () => {
    const model = hostWithAnchor();
    model.run(['-s', 'Bogus']);
    model.run(['-Z']);
    const log = model.state.log.slice(-3);
    expect(log.map((l) => [l.argv.join(' '), l.exitCode])).toEqual([
      ['-a com.apple/250.egressguard -f /var/db/egressguard/anchor.pf', 0],
      ['-s Bogus', 2],
      ['-Z', 1],
    ]);
  });
});

describe('pfctl model shim: the model from a separate process', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  it('runs pfctl command lines against a state file, in process and as an executable', () => {
    const dir = mkdtempSync(join(tmpdir(), 'pfctl-model-'));
    dirs.push(dir);
    const statePath = join(dir, 'state.json');
    const model = createMacosPfHost();
    writePfctlModelState(statePath, model.state);
    const anchorFile = join(dir, 'anchor.pf');
    writeFileSync(anchorFile, ANCHOR);
    const env = { EGRESSGUARD_PFCTL_MODEL_STATE: statePath };

    const missing = runPfctlModelShim(['-sr'], { env: {}, readStdin: () => '', pid: 1 });
    expect(missing.exitCode).toBe(2);
    expect(missing.stderr).toContain('EGRESSGUARD_PFCTL_MODEL_STATE is not set');

    const load = runPfctlModelShim(['-a', OURS, '-f', anchorFile], {
      env,
      readStdin: () => '',
      pid: 4242,
    });
    expect(load.exitCode).toBe(0);
    expect(readPfctlModelState(statePath).anchors[OURS]?.pid).toBe(4242);

    const shim = PFCTL_MODEL_SHIM;
    const shown = execFileSync(shim, ['-a', OURS, '-sr'], { env: { ...process.env, ...env } });
    expect(shown.toString()).toContain('label "eg:r1"');
    const stdinLoad = spawnSync(shim, ['-a', OURS, '-f', '-'], {
      env: { ...process.env, ...env },
      input: 'pass out all label "from-stdin"\n',
    });
    expect(stdinLoad.status).toBe(0);
    const enable = spawnSync(shim, ['-E'], { env: { ...process.env, ...env } });
    expect(enable.stderr.toString()).toMatch(/^pf enabled\nToken : \d+\n$/);
    const state = readPfctlModelState(statePath);
    expect(state.tokens.some((t) => t.pid === enable.pid)).toBe(true);
    expect(state.log.map((l) => l.argv.join(' '))).toEqual([
      ...model.state.log.map((l) => l.argv.join(' ')),
      `-a ${OURS} -f ${anchorFile}`,
      `-a ${OURS} -sr`,
      `-a ${OURS} -f -`,
      '-E',
    ]);
    expect(new PfctlModel(state).run(['-a', OURS, '-sr']).stdout).toBe(
      'pass out all flags S/SA keep state label "from-stdin"\n',
    );
    const bad = spawnSync(shim, ['-a', OURS, '-f', '-'], {
      env: { ...process.env, ...env },
      input: 'pass out all label\n',
    });
    expect(bad.status).toBe(1);
    expect(bad.stderr.toString()).toBe(
      `${PFCTL_LOAD_WARNING}stdin:1: syntax error\npfctl: Syntax error in config file: pf rules not loaded\n`,
    );
  });
});
