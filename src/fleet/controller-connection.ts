import { createHash, X509Certificate } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import { isIP } from 'node:net';
import tls, { type DetailedPeerCertificate } from 'node:tls';
import { EgressguardError } from '../core/index.js';
import { errorResponseSchema } from './protocol.js';

/** An HTTP answer: status and parsed JSON body (undefined for an empty body). */
export interface ControllerAnswer {
  readonly status: number;
  readonly body: unknown;
  /** The `Retry-After` header in seconds (a 429 or a 503): wait at least this long. */
  readonly retryAfterSeconds?: number;
}

/** One keep-alive connection pool to a controller, verified against its CA. */
export interface ControllerConnection {
  readonly url: string;
  request(
    method: 'GET' | 'POST',
    path: string,
    options?: { body?: unknown; token?: string; signal?: AbortSignal; timeoutMs?: number },
  ): Promise<ControllerAnswer>;
  close(): void;
}

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|\[::1\]|::1|localhost)$/;

/**
 * Connects to `url`. HTTPS trusts only `caPem` (the pinned controller CA), never the system's
 * roots; plain HTTP is accepted only for a loopback controller.
 */
export function connectController(url: string, caPem: string | null): ControllerConnection {
  const parsed = parseControllerUrl(url);
  const secure = parsed.protocol === 'https:';
  if (secure && caPem === null) {
    throw new EgressguardError(
      'usage',
      `Cannot talk to controller "${url}": no CA to verify it with`,
    );
  }
  const agent = secure
    ? new https.Agent({ keepAlive: true, ca: caPem ?? undefined, maxSockets: 4 })
    : new http.Agent({ keepAlive: true, maxSockets: 4 });
  const base = url.replace(/\/+$/, '');
  return {
    url: base,
    request: (method, path, options = {}) =>
      new Promise((resolve, reject) => {
        const payload = options.body === undefined ? undefined : JSON.stringify(options.body);
        const headers: Record<string, string> = { accept: 'application/json' };
        if (payload !== undefined) {
          headers['content-type'] = 'application/json';
          headers['content-length'] = String(Buffer.byteLength(payload));
        }
        if (options.token !== undefined) headers['authorization'] = `Bearer ${options.token}`;
        const request = (secure ? https : http).request(
          `${base}${path}`,
          {
            method,
            agent,
            headers,
            timeout: options.timeoutMs ?? 30_000,
            ...(options.signal === undefined ? {} : { signal: options.signal }),
          },
          (response) => {
            const chunks: Buffer[] = [];
            response.on('data', (chunk: Buffer) => chunks.push(chunk));
            response.on('error', reject);
            response.on('end', () => {
              const text = Buffer.concat(chunks).toString('utf8');
              let body: unknown;
              try {
                body = text === '' ? undefined : JSON.parse(text);
              } catch {
                body = text;
              }
              const retryAfter = parseRetryAfter(response.headers['retry-after']);
              resolve({
                status: response.statusCode ?? 0,
                body,
                ...(retryAfter === undefined ? {} : { retryAfterSeconds: retryAfter }),
              });
            });
          },
        );
        request.on('timeout', () =>
          request.destroy(new Error(`no answer within ${options.timeoutMs ?? 30_000} ms`)),
        );
        request.on('error', (error) => {
          reject(
            new EgressguardError(
              'io',
              `Cannot reach controller "${base}": ${describeNetworkError(error)}`,
              {
                cause: error,
              },
            ),
          );
        });
        request.end(payload);
      }),
    close: () => {
      agent.destroy();
    },
  };
}

/** The message of a controller's 4xx/5xx answer, for an error that says what was refused. */
export function describeRefusal(answer: ControllerAnswer): string {
  const parsed = errorResponseSchema.safeParse(answer.body);
  return parsed.success ? parsed.data.error.message : `HTTP ${answer.status}`;
}

/**
 * Fetches the controller's CA certificate, trusting it only if its sha256 equals `pin` (the
 * bootstrap token's): the same discovery as kubeadm's `--discovery-token-ca-cert-hash`. The
 * handshake is unverified only to read the chain; everything after uses the pinned CA.
 */
export function fetchPinnedCa(url: string, pin: string): Promise<string> {
  const parsed = parseControllerUrl(url);
  const host = parsed.hostname.replace(/^\[|\]$/g, '');
  const port = Number(parsed.port === '' ? 443 : parsed.port);
  return new Promise((resolve, reject) => {
    const socket = tls.connect({
      host,
      port,
      ...(isIP(host) === 0 ? { servername: host } : {}),
      rejectUnauthorized: false,
    });
    socket.setTimeout(15_000, () => socket.destroy(new Error('no TLS handshake within 15 s')));
    socket.once('error', (error: Error) => {
      reject(
        new EgressguardError(
          'io',
          `Cannot reach controller "${url}": ${describeNetworkError(error)}`,
          { cause: error },
        ),
      );
    });
    socket.once('secureConnect', () => {
      const chain: DetailedPeerCertificate[] = [];
      let cert: DetailedPeerCertificate | undefined = socket.getPeerCertificate(true);
      while (cert !== undefined && Object.keys(cert).length > 0 && !chain.includes(cert)) {
        chain.push(cert);
        cert = cert.issuerCertificate === cert ? undefined : cert.issuerCertificate;
      }
      socket.end();
      const match = chain.find((c) => createHash('sha256').update(c.raw).digest('hex') === pin);
      if (match === undefined) {
        reject(
          new EgressguardError(
            'usage',
            `Cannot trust controller "${url}": no certificate in its chain matches the pinned CA sha256 ${pin}`,
            {
              hint: 'the bootstrap token was minted by another controller, or something intercepts the connection',
            },
          ),
        );
        return;
      }
      resolve(new X509Certificate(match.raw).toString());
    });
  });
}

function parseControllerUrl(url: string): URL {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new EgressguardError('usage', `Cannot use controller URL "${url}": not a URL`, {
      hint: 'use https://HOST:PORT',
    });
  }
  if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:') {
    throw new EgressguardError('usage', `Cannot use controller URL "${url}": expected https://`);
  }
  if (parsed.protocol === 'http:' && !LOOPBACK.test(parsed.hostname)) {
    throw new EgressguardError(
      'usage',
      `Cannot use controller URL "${url}": plain HTTP is allowed only on loopback`,
      {
        hint: 'use https:// (the controller serves TLS unless started with --insecure-http)',
      },
    );
  }
  return parsed;
}

/** `Retry-After`: delay-seconds or an HTTP date (RFC 9110 §10.2.3); at most an hour is believed. */
function parseRetryAfter(header: string | undefined): number | undefined {
  if (header === undefined) return undefined;
  const seconds = /^\d+$/.test(header.trim())
    ? Number(header)
    : (Date.parse(header) - Date.now()) / 1000;
  return Number.isFinite(seconds) ? Math.min(3600, Math.max(0, Math.ceil(seconds))) : undefined;
}

function describeNetworkError(error: Error): string {
  const code = (error as NodeJS.ErrnoException).code;
  return code === undefined ? error.message : `${code}: ${error.message}`;
}
