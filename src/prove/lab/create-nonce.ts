import { randomBytes } from 'node:crypto';

const NONCE = /^[a-z0-9]{8,32}$/;

/** A fresh per-run nonce: 16 characters of a-z0-9, fit for a payload and a DNS label. */
export function createNonce(): string {
  return `eg${randomBytes(7).toString('hex')}`;
}

/** Whether `text` can serve as a nonce: 8 to 32 characters of a-z and 0-9. */
export function isNonce(text: string): boolean {
  return NONCE.test(text);
}
