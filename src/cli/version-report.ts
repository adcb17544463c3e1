import { release } from 'node:os';
import { registry } from '../backends/index.js';
import { readBuildInfo, VERSION } from '../core/index.js';
import { hostOs } from '../facts/index.js';
import { createRunner } from '../runner/index.js';
import { paint, printJson, printLine, type Output } from './output.js';

/** What `egressguard --version` reports: the build, the runtime, and each backend's tools here. */
interface VersionReport {
  readonly version: string;
  readonly commit: string | null;
  readonly modified: boolean;
  readonly node: string;
  readonly os: string;
  readonly backends: readonly {
    readonly name: string;
    /** The backend that enforces on this machine's OS without `--target`. */
    readonly enforcesHere: boolean;
    /** Its tools' versions found here; null when it has none to read (some tools print none). */
    readonly tools: Readonly<Record<string, string>> | null;
  }[];
}

/** Whether argv (after the binary) asks only for the version: `--version`/`-V`, maybe `--json`. */
export function isVersionRequest(args: readonly string[]): boolean {
  return (
    args.some((a) => a === '--version' || a === '-V') &&
    args.every((a) => a === '--version' || a === '-V' || a === '--json')
  );
}

/** Prints the version, commit, Node.js, and every backend with its tools' versions. */
export async function printVersion(output: Output, json: boolean): Promise<void> {
  const build = readBuildInfo();
  const here = registry.forFacts({ os: hostOs(), hostname: 'this host' });
  const runner = createRunner({ classifiers: registry.classifiers() });
  const report: VersionReport = {
    version: VERSION,
    commit: build.commit ?? null,
    modified: build.modified,
    node: process.version,
    os: `${process.platform} ${release()} ${process.arch}`,
    backends: await Promise.all(
      registry.all().map(async (backend) => ({
        name: backend.name,
        enforcesHere: backend === here,
        tools:
          backend.readVersions === undefined
            ? null
            : await backend.readVersions(runner).catch(() => ({})),
      })),
    ),
  };
  if (json) {
    printJson(output, report);
    return;
  }
  const commit =
    report.commit === null
      ? 'unknown (built outside a git checkout)'
      : `${report.commit}${report.modified ? ' (built with uncommitted changes)' : ''}`;
  printLine(output, `egressguard ${report.version}`);
  printLine(output, `commit    ${commit}`);
  printLine(output, `node      ${report.node} (${report.os})`);
  report.backends.forEach((b, i) => {
    const tools =
      b.tools === null
        ? 'no tool versions to read'
        : Object.keys(b.tools).length === 0
          ? paint(output, 'yellow', 'its tools were not found on this host')
          : Object.entries(b.tools)
              .map(([tool, version]) => `${tool} ${version}`)
              .join(', ');
    const mark = b.enforcesHere ? " (this host's)" : '';
    printLine(output, `${i === 0 ? 'backends  ' : '          '}${b.name}${mark}: ${tools}`);
  });
}
