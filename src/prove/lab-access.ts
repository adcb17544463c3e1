import type { LabAccess } from '../backends/index.js';
import type { Lab } from './lab/create-lab.js';
import { createNonce } from './lab/create-nonce.js';
import { sendPackets } from './lab/send-packets.js';

/** A lab as a backend's test harness sees it: runners, cleanups and the packet sender. */
export function labAccess(lab: Lab): LabAccess {
  return {
    runner: (node) => lab.runner(node),
    ns: (node) => lab.ns(node),
    defer: (cleanup) =>
      lab.defer(async () => {
        await cleanup();
      }),
    send: (node, batch) => sendPackets(lab.runner(node), batch),
    createNonce,
  };
}
