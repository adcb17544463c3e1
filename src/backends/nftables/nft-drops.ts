import { EgressguardError } from '../../core/index.js';
import type { Runner } from '../../runner/index.js';
import type { DropRecord, DropsSupport } from '../backend.js';
import { LOG_GROUP } from './nft-compiler.js';
import { createDropDecoder, mapRuleClasses } from './nflog-record.js';

/**
 * `drops` on Linux: the nflog group our log rules write to. tcpdump writes NFLOG as pcap
 * (DLT_NFLOG); its text output does not show the log prefix, which carries the rule id, so the
 * pcap stream is decoded here.
 */
export const nftDrops: DropsSupport = {
  options: [
    {
      key: 'group',
      flag: '--group <n>',
      description: 'nflog group our log rules write to',
      default: String(LOG_GROUP),
    },
  ],
  async open({ runner, options, policy }) {
    const group = parseGroup(options['group'] ?? String(LOG_GROUP));
    const decoder = createDropDecoder({
      ...(policy === undefined ? {} : { ruleClasses: mapRuleClasses(policy.classes) }),
      interfaceNames: await readInterfaceNames(runner),
    });
    const argv = ['tcpdump', '-i', `nflog:${group}`, '-U', '-w', '-'];
    const capture = runner.startBinary(argv, { effect: 'read' });
    const state = { stopping: false, endedByItself: false };
    async function* records(): AsyncIterable<DropRecord> {
      for await (const chunk of capture.chunks) yield* decoder.push(chunk);
      state.endedByItself = !state.stopping;
    }
    return {
      records: records(),
      source: `nflog group ${group}`,
      async stop() {
        state.stopping = true;
        await capture.stop();
      },
      finished: async () => {
        const exitCode = await capture.exited;
        if (!state.endedByItself || exitCode === 0) return;
        const detail = capture.stderr().trim().split('\n').at(-1) ?? '';
        throw new EgressguardError(
          'command-failed',
          `Cannot read nflog group ${group}: "${argv.join(' ')}" ${exitCode === null ? 'could not start' : `exited with ${exitCode}`}${detail === '' ? '' : `: ${detail}`}`,
          {
            // Only one socket may bind an nflog group in a namespace.
            hint: /Operation not permitted|group index/.test(detail)
              ? `another program (ulogd, another \`egressguard drops\`) listens on nflog group ${group}: stop it, or read its log`
              : 'install tcpdump (apt-get install tcpdump) and run as root',
          },
        );
      },
    };
  },
};

function parseGroup(text: string): number {
  const n = Number(text);
  if (!/^\d+$/.test(text) || n > 65535) {
    throw new EgressguardError('usage', `Cannot use --group "${text}"`, {
      hint: 'use a whole number from 0 to 65535',
    });
  }
  return n;
}

/** ifindex → name, so records name the interfaces a packet came in and would go out by. */
async function readInterfaceNames(runner: Runner): Promise<Map<number, string>> {
  const result = await runner.run(['ip', '-j', 'link', 'show'], { effect: 'read' });
  const links = JSON.parse(result.stdout || '[]') as { ifindex?: number; ifname?: string }[];
  return new Map(
    links.flatMap((l) =>
      l.ifindex === undefined || l.ifname === undefined ? [] : [[l.ifindex, l.ifname]],
    ),
  );
}
