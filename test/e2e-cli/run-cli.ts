import { fileURLToPath } from 'node:url';
import { execa } from 'execa';

export const REPO = fileURLToPath(new URL('../..', import.meta.url));
const BIN = fileURLToPath(new URL('../../bin/egressguard.js', import.meta.url));

/** Runs the built CLI (npm test builds first) as a user would. */
export async function runCli(
  args: readonly string[],
  options: { cwd?: string; env?: Record<string, string> } = {},
): Promise<{ exitCode: number; stdout: string; stderr: string }> {
  const result = await execa('node', [BIN, ...args], {
    cwd: options.cwd ?? REPO,
    env: { NO_COLOR: '1', ...options.env },
    reject: false,
  });
  return { exitCode: result.exitCode ?? -1, stdout: result.stdout, stderr: result.stderr };
}
