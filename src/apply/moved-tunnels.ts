import { hostname } from 'node:os';
import type { Backend } from '../backends/index.js';
import { describeTunnelMatch, matchesTunnel } from '../facts/index.js';
import { resolveTunnels } from '../ir/index.js';
import type { Runner } from '../runner/index.js';
import type { Generation } from './generation.js';

/**
 * Why the generation's tunnels found by `match` are not where it was bound to them, in words, or
 * null when every one is (or the generation recorded none, or the backend cannot read interfaces).
 * Resolved as an apply would (resolveTunnels); a tunnel absent when it was bound has not "moved".
 */
export async function findMovedTunnels(
  input: { backend: Backend; runner: Runner },
  generation: Generation,
): Promise<string | null> {
  const tunnels = generation.tunnels ?? [];
  const read = input.backend.readInterfaces;
  if (read === undefined || !tunnels.some((t) => t.match !== null)) return null;
  let interfaces: Awaited<ReturnType<typeof read>>;
  let resolved: Map<string, string>;
  try {
    interfaces = await read(input.runner);
    resolved = resolveTunnels(
      {
        tunnels: tunnels.map((t) => t.declared),
        tunnelMatches: Object.fromEntries(
          tunnels.flatMap((t) => (t.match === null ? [] : [[t.declared, t.match]])),
        ),
      },
      { interfaces, hostname: hostname() },
    );
  } catch (error) {
    return `cannot tell where its tunnels are now: ${(error as Error).message}`;
  }
  const moved = tunnels.flatMap(({ declared, interface: then, present, match }) => {
    const now = resolved.get(declared) ?? declared;
    // Bound while absent, the generation routes nothing into it (pf: kill-switch-only), so
    // wherever the tunnel is now, loading it drops the class, as the lockdown would.
    if (match === null || !present || now === then) return [];
    const found = interfaces.some((i) => i.name === now && matchesTunnel(match, i));
    return [
      `tunnel "${declared}" (${describeTunnelMatch(match)}) was "${then}" when it was applied, and ${found ? `is "${now}"` : 'matches no interface'} now`,
    ];
  });
  return moved.length === 0 ? null : moved.join('; ');
}
