import { mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { EgressguardError } from '../../core/index.js';
import type { Lab } from './create-lab.js';

/** Bytes kept of each packet: every header (IPv6, extension headers, TCP options) and the nonce. */
const SNAPLEN = 256;

/**
 * Records every packet of every lab node, on all its interfaces, into `<dir>/<node>.pcap` until
 * the lab is torn down (its last cleanup, so the restores are in it too): the evidence for a
 * measurement that went wrong, to read with tcpdump or Wireshark. Resolves once every capture
 * listens. Returns the files.
 */
export async function captureLab(lab: Lab, dir: string): Promise<readonly string[]> {
  try {
    mkdirSync(dir, { recursive: true });
  } catch (error) {
    throw new EgressguardError(
      'io',
      `Cannot write captures into "${dir}": ${(error as Error).message}`,
      { hint: 'name a directory you can write, or leave out --capture' },
    );
  }
  return Promise.all(
    lab.nodes.map(async (node) => {
      const file = resolve(join(dir, `${node}.pcap`));
      const running = lab.runner(node).start(
        [
          // stderr joins stdout: "listening on any" is the handshake that the capture is on.
          ...['sh', '-c', 'exec tcpdump "$@" 2>&1', 'tcpdump'],
          ...['-i', 'any', '-n', '-U', '-s', String(SNAPLEN), '-Z', 'root', '-w', file],
        ],
        { effect: 'read' },
      );
      lab.defer(() => running.stop());
      const said: string[] = [];
      for await (const line of running.lines) {
        if (line.includes('listening on')) return file;
        said.push(line);
      }
      throw new EgressguardError(
        'command-failed',
        `Cannot capture the packets of lab node "${node}": tcpdump ended: ${said.join(' ').slice(0, 300)}`,
      );
    }),
  );
}
