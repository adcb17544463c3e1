import { EgressguardError } from '../../core/index.js';
import type { Artifact, BackendContext, ProveSupport } from '../backend.js';
import { parseNftOptions } from './nft-options.js';
import { STEERING_ARTIFACT, type SteeringSpec } from './steering.js';

/**
 * What `prove` measures on Linux: two layers, policy routing and the nftables table, each proven
 * alone by taking the other out (DESIGN.md §4: with the blackhole present, packets of a dead
 * tunnel never reach the forward hook, so a broken kill switch would pass every tunnel fault).
 */
export const nftProve: ProveSupport = {
  layers: ['routing', 'nftables'],
  // In the order an apply reaches them (src/backends/nftables/nftables-backend.ts).
  killPoints: ['before-nft-commit', 'after-nft-commit', 'steering', 'after-routes'],
  async removeLayer(context, layer, artifacts) {
    switch (layer) {
      case 'nftables':
        await context.runner.run(
          ['nft', 'delete', 'table', 'inet', parseNftOptions(context.options).table],
          { effect: 'change' },
        );
        return;
      case 'routing':
        await removeRouting(context, artifacts);
        return;
      default:
        throw new EgressguardError('usage', `Cannot remove layer "${layer}" of nftables`, {
          hint: 'use routing or nftables',
        });
    }
  },
};

/** Deletes our routing rules and flushes our routing tables, both families. */
async function removeRouting(
  context: BackendContext,
  artifacts: readonly Artifact[],
): Promise<void> {
  const text = artifacts.find((a) => a.name === STEERING_ARTIFACT)?.content;
  if (text === undefined) return;
  const spec = JSON.parse(text) as SteeringSpec;
  for (const tunnel of spec.tunnels) {
    for (const family of ['-4', '-6']) {
      // One rule per source prefix share a priority: delete until none is left.
      for (let i = 0; i < 64; i++) {
        const result = await context.runner.run(
          ['ip', family, 'rule', 'del', 'priority', String(tunnel.priority)],
          { effect: 'change', allowFailure: true },
        );
        if (result.exitCode !== 0) break;
      }
      await context.runner.run(['ip', family, 'route', 'flush', 'table', String(tunnel.table)], {
        effect: 'change',
        allowFailure: true,
      });
    }
  }
}
