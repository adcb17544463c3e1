import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

/**
 * Bootstrap tokens, host credentials and operator tokens are 32 random bytes; the store keeps only
 * their sha256. A fast hash is enough for secrets with 256 bits of entropy (nothing to guess).
 */
export function createSecret(): string {
  return randomBytes(32).toString('base64url');
}

export function createId(prefix: string): string {
  return `${prefix}${randomBytes(8).toString('hex')}`;
}

export function hashSecret(secret: string): string {
  return createHash('sha256').update(secret).digest('hex');
}

/** Compares a presented secret with a stored hash in constant time. */
export function matchesSecret(secret: string, storedHash: string): boolean {
  const presented = Buffer.from(hashSecret(secret), 'hex');
  const stored = Buffer.from(storedHash, 'hex');
  return presented.length === stored.length && timingSafeEqual(presented, stored);
}

const TOKEN_PREFIX = 'egb1';
const CREDENTIAL_PREFIX = 'egc1';

/** A bootstrap token as handed to an agent: id, secret and the controller CA's sha256 pin. */
export interface BootstrapToken {
  readonly id: string;
  readonly secret: string;
  /** Lower-case hex sha256 of the CA certificate (DER); null for a plain-HTTP loopback controller. */
  readonly caPin: string | null;
}

export function formatBootstrapToken(token: BootstrapToken): string {
  return [TOKEN_PREFIX, token.id, token.secret, token.caPin ?? 'none'].join('.');
}

export function parseBootstrapToken(text: string): BootstrapToken | undefined {
  const parts = text.trim().split('.');
  if (parts.length !== 4 || parts[0] !== TOKEN_PREFIX) return undefined;
  const [, id, secret, pin] = parts;
  if (id === undefined || secret === undefined || pin === undefined) return undefined;
  if (id === '' || secret === '') return undefined;
  if (pin !== 'none' && !/^[0-9a-f]{64}$/.test(pin)) return undefined;
  return { id, secret, caPin: pin === 'none' ? null : pin };
}

export interface HostCredential {
  readonly id: string;
  readonly secret: string;
}

export function formatCredential(credential: HostCredential): string {
  return [CREDENTIAL_PREFIX, credential.id, credential.secret].join('.');
}

export function parseCredential(text: string): HostCredential | undefined {
  const parts = text.trim().split('.');
  if (parts.length !== 3 || parts[0] !== CREDENTIAL_PREFIX) return undefined;
  const [, id, secret] = parts;
  if (id === undefined || secret === undefined || id === '' || secret === '') return undefined;
  return { id, secret };
}
