import { isEgressguardError } from '../../core/index.js';
import { resolveUplink } from '../../facts/index.js';
import { findMissingIngress } from '../../ir/index.js';
import type { DoctorReport, DoctorSupport } from '../backend.js';
import { createDoctorContext, diagnose } from './nft-doctor.js';
import type { DoctorArea } from './nft-doctor-snapshot.js';
import { readDoctorSnapshot } from './nft-doctor-gather.js';
import { parseNftOptions } from './nft-options.js';
import { buildSteering } from './steering.js';

const AREAS: readonly { readonly id: DoctorArea; readonly title: string }[] = [
  { id: 'nftables', title: 'nftables: other tables on our hooks' },
  { id: 'routing', title: 'routing: tables and rule priorities' },
  { id: 'networkd', title: 'systemd-networkd' },
  { id: 'topology', title: 'topology: paths netfilter does not see' },
];

/** `doctor` on Linux: other tables on our hooks, routing collisions, networkd, bypass paths. */
export const nftDoctor: DoctorSupport = {
  description:
    "Read-only: doctor runs listings only (nft -j -t list ruleset, ip, tc, sysctl). systemd-networkd manages the machine's own namespace only, so it is not checked with --netns.",
  async diagnose({ runner, options, facts, policy, ir, bindProblem, wholeHost }) {
    const parsed = parseNftOptions(options);
    const snapshot = await readDoctorSnapshot(runner, { networkd: wholeHost });
    let uplink = ir?.uplink ?? null;
    let uplinkProblem = bindProblem ?? null;
    if (uplink === null && policy === undefined) {
      // Without a policy, the uplink is the main table's default-route interface.
      try {
        uplink = resolveUplink(facts, 'default-route', []);
      } catch (error) {
        if (!isEgressguardError(error)) throw error;
        uplinkProblem = error.message;
      }
    }
    const report = diagnose(
      snapshot,
      createDoctorContext({
        table: parsed.table,
        uplink,
        uplinkProblem,
        policy,
        steering: ir === undefined ? undefined : buildSteering(ir, parsed.steering),
        missingIngress:
          ir === undefined
            ? []
            : findMissingIngress(
                ir,
                facts.interfaces.map((i) => i.name),
              ),
      }),
    );
    const tables: DoctorReport['tables'] =
      report.foreignChains.length === 0
        ? []
        : [
            {
              title: 'foreign base chains',
              header: ['hook', 'table', 'chain', 'priority', 'policy', 'runs', 'can drop'],
              rows: report.foreignChains.map((c) => [
                c.hook,
                `${c.family} ${c.table}`,
                c.chain,
                String(c.priority),
                c.policy,
                c.order,
                c.canDrop ? 'yes' : 'no',
              ]),
            },
          ];
    return { ...report, areas: AREAS, tables };
  },
};
