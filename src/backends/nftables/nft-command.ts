import { commandOperands, type CommandClass, type Runner } from '../../runner/index.js';

const NFT_VALUE_OPTIONS = new Set(['-f', '--file', '-I', '--includepath', '-D', '--define']);

/**
 * How an `nft` command line acts, for the root-namespace guard: `nft [options] list …` or
 * `monitor`, `nft -c …` (check only) and `nft --version` read; anything else changes, a `;`
 * chain of commands or a file (`-f`) included. Undefined for any other tool.
 */
export function classifyNftCommand(argv: readonly string[]): CommandClass | undefined {
  const [cmd, ...args] = argv;
  if (cmd?.split('/').pop() !== 'nft') return undefined;
  return isReadOnlyNft(args) ? 'read' : 'change';
}

function isReadOnlyNft(args: readonly string[]): boolean {
  if (args.some((a) => a.includes(';'))) return false;
  if (args.includes('-c') || args.includes('--check')) return true;
  if (args.length > 0 && args.every((a) => a === '-v' || a === '--version')) return true;
  if (args.some((a) => a === '-f' || a === '--file' || a === '-i' || a === '--interactive'))
    return false;
  const [verb] = commandOperands(args, NFT_VALUE_OPTIONS);
  return verb === 'list' || verb === 'monitor';
}

/** The version of nft on the host (`nft --version`), when it runs. */
export async function readNftVersions(runner: Runner): Promise<Readonly<Record<string, string>>> {
  const result = await runner
    .run(['nft', '--version'], { effect: 'read', allowFailure: true })
    .catch(() => undefined);
  const version = /v?(\d+\.\d+(\.\d+)?)/.exec(result?.stdout ?? '')?.[1];
  return version === undefined ? {} : { nft: version };
}
