import { readFileSync } from 'node:fs';
import { EgressguardError } from '../core/index.js';
import {
  connectController,
  fetchPinnedCa,
  parseBootstrapToken,
  type Clock,
} from '../fleet/index.js';
import type { StateDir } from '../state/index.js';
import { systemAgentClock, type AgentClock } from './agent-clock.js';
import { ControllerClient } from './controller-client.js';
import type { HostEngine } from './host-engine.js';

/** What the agent keeps in its state directory (0600: it holds the host credential). */
export interface Enrollment {
  readonly serverUrl: string;
  readonly hostId: string;
  readonly hostName: string;
  readonly credential: string;
  readonly credentialIssuedAt: number;
  /** The pinned controller CA (null for a plain-HTTP loopback controller). */
  readonly caPem: string | null;
}

export const ENROLLMENT_FILE = 'agent-enrollment.json';

/** What enrolling reads: the token, the controller, this host's name and facts. */
export interface EnrollInput {
  readonly serverUrl: string;
  /** The bootstrap token file, read once, at enrollment. */
  readonly tokenFile: string;
  readonly stateDir: StateDir;
  readonly engine: Pick<HostEngine, 'readFacts'>;
  readonly hostname: string;
  readonly agentVersion: string;
  readonly clock?: AgentClock;
}

/** Exchanges the bootstrap token for a host credential and keeps it in the state directory. */
export async function enroll(options: EnrollInput): Promise<Enrollment> {
  let text: string;
  try {
    text = readFileSync(options.tokenFile, 'utf8');
  } catch (error) {
    throw new EgressguardError(
      'usage',
      `Cannot read the bootstrap token "${options.tokenFile}": ${(error as Error).message}`,
    );
  }
  const token = parseBootstrapToken(text);
  if (token === undefined) {
    throw new EgressguardError(
      'usage',
      `Cannot use the bootstrap token in "${options.tokenFile}": it is not an egressguard token (egb1.…)`,
      {
        hint: 'mint one with `egressguard fleet token create`',
      },
    );
  }
  const serverUrl = options.serverUrl.replace(/\/+$/, '');
  const https = serverUrl.startsWith('https:');
  if (https && token.caPin === null) {
    throw new EgressguardError(
      'usage',
      `Cannot enroll with "${serverUrl}": the bootstrap token carries no CA pin (it was minted by a plain-HTTP controller)`,
    );
  }
  const caPem = https && token.caPin !== null ? await fetchPinnedCa(serverUrl, token.caPin) : null;
  const client = new ControllerClient(connectController(serverUrl, caPem));
  try {
    const facts = await options.engine.readFacts();
    const enrolled = await client.enroll({
      token: text.trim(),
      hostname: options.hostname,
      agentVersion: options.agentVersion,
      facts,
    });
    const enrollment: Enrollment = {
      serverUrl,
      hostId: enrolled.hostId,
      hostName: enrolled.hostName,
      credential: enrolled.credential,
      credentialIssuedAt: (options.clock ?? systemAgentClock).now(),
      caPem,
    };
    options.stateDir.write(ENROLLMENT_FILE, `${JSON.stringify(enrollment, null, 2)}\n`);
    return enrollment;
  } finally {
    client.close();
  }
}

/** Rotates the host credential, written before its first use. */
export async function rotate(
  client: ControllerClient,
  enrollment: Enrollment,
  stateDir: StateDir,
  clock: Clock,
): Promise<Enrollment> {
  const credential = await client.rotate(enrollment.credential);
  const next = {
    ...enrollment,
    credential,
    credentialIssuedAt: clock.now(),
  };
  // Written before first use: the controller retires the old credential only when the new one is used.
  stateDir.write(ENROLLMENT_FILE, `${JSON.stringify(next, null, 2)}\n`);
  return next;
}

/** The enrollment in the state directory, or undefined before the first. */
export function readEnrollment(stateDir: StateDir): Enrollment | undefined {
  const text = stateDir.read(ENROLLMENT_FILE);
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text) as Enrollment;
  } catch (error) {
    throw new EgressguardError(
      'state-corrupt',
      `Cannot read "${stateDir.file(ENROLLMENT_FILE)}": ${(error as Error).message}`,
      {
        hint: 'remove it and enroll again with a new bootstrap token',
      },
    );
  }
}
