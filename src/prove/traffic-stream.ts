import { EgressguardError } from '../core/index.js';
import type { RunningCommand } from '../runner/index.js';
import type { Lab } from './lab/create-lab.js';
import type { ProbeKind } from './lab-probes.js';
import { resolvedLabPython } from './lab/lab-python.js';
import { labScript } from './lab-services.js';

/** One continuous flow of nonce'd raw packets. */
export interface StreamSpec {
  readonly tag: string;
  readonly kind: ProbeKind;
  readonly src: string;
  readonly dst: string;
  readonly dport?: number | undefined;
}

/** What a stream sent, per spec, and its slowest second. */
export interface StreamResult {
  readonly node: string;
  readonly results: readonly {
    readonly tag: string;
    readonly sent: number;
    /** Sends the node's own stack refused (RawSend's refused): packets that never left it. */
    readonly refused: number;
    readonly failed: number;
    readonly error: string | null;
  }[];
  readonly elapsedMs: number;
  /** The fewest packets of one spec sent in any whole second. */
  readonly minPerSecond: number | null;
}

/** A running stream; stop() ends it and reports what it sent. */
export interface RunningStream {
  /** Resolves once the first packets are out (starting can take seconds on a busy machine). */
  sending(): Promise<void>;
  stop(): Promise<StreamResult>;
}

/**
 * Sends every spec `rate` times a second from a lab node (scripts/lab/probe.py stream) until its
 * scenario stops it, however long the scenario takes on a slow machine: traffic that runs across
 * faults and reapplies. (The script stops by itself only if this process is gone.)
 */
export function startStream(
  lab: Lab,
  node: string,
  options: {
    readonly nonce: string;
    readonly rate: number;
    readonly specs: readonly StreamSpec[];
  },
): RunningStream {
  const request = JSON.stringify({
    nonce: options.nonce,
    rate: options.rate,
    specs: options.specs.map((s) => ({
      tag: s.tag,
      kind: s.kind,
      src: s.src,
      dst: s.dst,
      ...(s.dport === undefined ? {} : { dport: s.dport }),
    })),
  });
  const running = lab
    .runner(node)
    .start([resolvedLabPython(), labScript('probe.py'), 'stream', request], { effect: 'change' });
  const undefer = lab.defer(() => running.stop());
  const lines: string[] = [];
  let markSending: () => void = () => undefined;
  const sending = new Promise<boolean>((resolve) => {
    markSending = () => {
      resolve(true);
    };
  });
  const reading = (async () => {
    for await (const line of running.lines) {
      if (line === '"sending"') markSending();
      else lines.push(line);
    }
  })();
  // A stream that ends before it sends anything settles `sending` too; stop() then reports why.
  const ended = reading.then(
    () => false,
    () => false,
  );
  let stopping: Promise<StreamResult> | undefined;
  return {
    async sending() {
      if (!(await Promise.race([sending, ended]))) {
        throw new EgressguardError(
          'command-failed',
          `The traffic stream of lab node "${node}" ended before it sent a packet: ${said(running, lines)}`,
        );
      }
    },
    stop() {
      stopping ??= (async () => {
        await running.stop();
        await reading;
        undefer();
        const last = lines.filter((l) => l.startsWith('{')).pop();
        try {
          const parsed = JSON.parse(last ?? '') as Omit<StreamResult, 'node'>;
          return { node, ...parsed };
        } catch {
          throw new EgressguardError(
            'command-failed',
            `Cannot read what the traffic stream of lab node "${node}" sent: ${said(running, lines)}`,
          );
        }
      })();
      return stopping;
    },
  };
}

/** What a stream wrote, for an error: its output, else the end of its stderr (a traceback). */
function said(running: RunningCommand, lines: readonly string[]): string {
  const out = lines.join(' ').slice(0, 200);
  const err = running.stderr().trim().split('\n').slice(-3).join(' ').slice(0, 400);
  return `output "${out}"${err === '' ? '' : `, stderr "${err}"`}`;
}
