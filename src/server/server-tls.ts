import { X509Certificate, webcrypto } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { isIP } from 'node:net';
import { join } from 'node:path';
// @peculiar/x509 resolves its parsers through tsyringe, which needs the Reflect metadata API first.
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { EgressguardError } from '../core/index.js';

/** What the HTTPS listener serves, and the pin bootstrap tokens carry. */
export interface ServerTls {
  readonly key: string;
  /** The server certificate followed by its chain up to the CA, so agents can pin the CA. */
  readonly cert: string;
  readonly caPem: string;
  /** Lower-case hex sha256 of the CA certificate's DER. */
  readonly caPin: string;
}

const ALGORITHM = { name: 'ECDSA', namedCurve: 'P-256' } as const;
const SIGNING = { name: 'ECDSA', hash: 'SHA-256' } as const;
const DAY = 86_400_000;

/** The sha256 pin of a PEM certificate, as bootstrap tokens carry it. */
export function certificatePin(pem: string): string {
  return new X509Certificate(pem).fingerprint256.replaceAll(':', '').toLowerCase();
}

/**
 * Uses the given certificate and key, or a CA kept in `stateDir` (created on first start) and a
 * server certificate it issues at every start for `names` (DNS names and addresses).
 */
export async function loadServerTls(options: {
  stateDir: string;
  names: readonly string[];
  certFile?: string | undefined;
  keyFile?: string | undefined;
  caFile?: string | undefined;
}): Promise<ServerTls> {
  if (options.certFile !== undefined || options.keyFile !== undefined) {
    if (options.certFile === undefined || options.keyFile === undefined) {
      throw new EgressguardError('usage', 'Cannot serve TLS: --tls-cert and --tls-key go together');
    }
    return loadGivenTls(options.certFile, options.keyFile, options.caFile);
  }
  // Typed as the DOM's Crypto, which this project's lib does not include; Node's webcrypto is one.
  x509.cryptoProvider.set(webcrypto as never);
  mkdirSync(options.stateDir, { recursive: true, mode: 0o700 });
  const caCertFile = join(options.stateDir, 'ca.pem');
  const caKeyFile = join(options.stateDir, 'ca.key');
  if (!existsSync(caCertFile) || !existsSync(caKeyFile)) {
    const keys = await webcrypto.subtle.generateKey(ALGORITHM, true, ['sign', 'verify']);
    const now = Date.now();
    const ca = await x509.X509CertificateGenerator.createSelfSigned({
      name: `CN=egressguard controller CA ${hostname()}`,
      notBefore: new Date(now - DAY),
      notAfter: new Date(now + 3650 * DAY),
      keys,
      signingAlgorithm: SIGNING,
      extensions: [
        new x509.BasicConstraintsExtension(true, 0, true),
        new x509.KeyUsagesExtension(
          x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign,
          true,
        ),
        await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
      ],
    });
    writeFileSync(caKeyFile, await exportKey(keys.privateKey), { mode: 0o600 });
    writeFileSync(caCertFile, ca.toString('pem'), { mode: 0o644 });
  }
  const caPem = readFileSync(caCertFile, 'utf8');
  const ca = new x509.X509Certificate(caPem);
  const caKey = await webcrypto.subtle.importKey(
    'pkcs8',
    x509.PemConverter.decodeFirst(readFileSync(caKeyFile, 'utf8')),
    ALGORITHM,
    false,
    ['sign'],
  );
  const keys = await webcrypto.subtle.generateKey(ALGORITHM, true, ['sign', 'verify']);
  const now = Date.now();
  const leaf = await x509.X509CertificateGenerator.create({
    subject: `CN=egressguard controller ${hostname()}`,
    issuer: ca.subject,
    notBefore: new Date(now - DAY),
    notAfter: new Date(now + 365 * DAY),
    publicKey: keys.publicKey,
    signingKey: caKey,
    signingAlgorithm: SIGNING,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension(
        [...new Set(options.names)].map((name) => ({
          type: isIP(name) === 0 ? 'dns' : 'ip',
          value: name,
        })),
      ),
      await x509.AuthorityKeyIdentifierExtension.create(ca),
    ],
  });
  return {
    key: await exportKey(keys.privateKey),
    cert: `${leaf.toString('pem')}\n${caPem}`,
    caPem,
    caPin: certificatePin(caPem),
  };
}

function loadGivenTls(certFile: string, keyFile: string, caFile: string | undefined): ServerTls {
  const read = (file: string, what: string): string => {
    try {
      return readFileSync(file, 'utf8');
    } catch (error) {
      throw new EgressguardError(
        'io',
        `Cannot read the TLS ${what} "${file}": ${(error as Error).message}`,
      );
    }
  };
  const cert = read(certFile, 'certificate');
  const key = read(keyFile, 'key');
  const blocks = cert.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  // Agents pin the CA: the given one, else the last certificate of the chain (self-signed root or leaf).
  const caPem = caFile === undefined ? blocks.at(-1) : read(caFile, 'CA certificate');
  if (caPem === undefined) {
    throw new EgressguardError('usage', `Cannot serve TLS: "${certFile}" holds no PEM certificate`);
  }
  const chain =
    caFile === undefined || blocks.some((b) => certificatePin(b) === certificatePin(caPem))
      ? cert
      : `${cert}\n${caPem}`;
  return { key, cert: chain, caPem, caPin: certificatePin(caPem) };
}

async function exportKey(key: webcrypto.CryptoKey): Promise<string> {
  return x509.PemConverter.encode(await webcrypto.subtle.exportKey('pkcs8', key), 'PRIVATE KEY');
}
