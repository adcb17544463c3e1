import { z } from 'zod';
import { AddressSet, parsePrefix } from '../core/index.js';
import type { PolicyIR } from '../ir/index.js';

/**
 * The host-independent IR on the wire: JSON, with every address set as its minimal CIDR lists
 * (`AddressSet.parse(set.toCidrs())` gives the same intervals back, so the IR digest and the host
 * config hash survive the round trip). The agent validates everything it decodes: the controller
 * is not trusted to send only what its own binder would.
 */

/** An address set on the wire. */
const encodedSet = z.strictObject({
  $set: z.strictObject({
    v4: z.array(z.string().max(18)).max(1_000_000),
    v6: z.array(z.string().max(43)).max(1_000_000),
  }),
});

// Linux refuses "/", ":" and whitespace in names and allows 15 bytes; a policy prefix ends in "*".
const interfaceName = z
  .string()
  .regex(/^[A-Za-z0-9_.-]{1,15}$/, 'an interface name (letters, digits, ".", "_", "-")')
  .refine((name) => name !== '.' && name !== '..', 'an interface name');
const interfacePattern = z
  .string()
  .regex(/^[A-Za-z0-9_.-]{1,15}\*?$/, 'an interface name or prefix (veth*)');
// Ids and names reach comments and counters; the compilers quote them, but no control characters.
const text = z
  .string()
  .min(1)
  .max(256)
  .regex(/^[^\p{Cc}]*$/u, 'text without control characters');
const id = text;
const protocol = z.union([z.enum(['tcp', 'udp', 'icmp']), z.number().int().min(0).max(255)]);
const portRange = z.strictObject({
  from: z.number().int().min(0).max(65535),
  to: z.number().int().min(0).max(65535),
});
const destination = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('any') }),
  z.strictObject({ kind: z.literal('self') }),
  z.strictObject({
    kind: z.literal('addresses'),
    set: encodedSet,
    names: z.array(text).max(10_000),
  }),
]);
const housekeeping = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('neighbour-discovery'), id }),
  z.strictObject({ kind: z.literal('dhcp'), id }),
]);
const via = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('uplink') }),
  z.strictObject({ kind: z.literal('tunnel'), interface: interfaceName }),
]);
const rules = z
  .array(
    z.strictObject({
      kind: z.literal('rule'),
      id,
      action: z.enum(['allow', 'deny', 'audit']),
      match: z.strictObject({
        destination,
        protocols: z.array(protocol).max(256).nullable(),
        ports: z.array(portRange).max(1024).nullable(),
      }),
    }),
  )
  .max(10_000);
const defaultRule = z.strictObject({
  kind: z.literal('default'),
  id,
  action: z.enum(['allow', 'deny']),
});
/** A Kubernetes class: the pod network enforces it; a gateway node's binding carries it along. */
const podClassIr = z.strictObject({
  kind: z.literal('pod-class'),
  name: text,
  selector: z.strictObject({
    kind: z.literal('pods'),
    namespace: text.nullable(),
    labels: z.record(text, z.string().max(256)),
  }),
  via,
  killSwitch: z
    .strictObject({
      kind: z.literal('pod-kill-switch'),
      id,
      except: encodedSet,
      nodeLabel: z.strictObject({ key: text, value: z.string().max(256) }),
    })
    .nullable(),
  rules,
  defaultRule,
});
const classIr = z.strictObject({
  kind: z.literal('class'),
  name: text,
  hostLabels: z.record(text, z.string().max(256)),
  selector: z.discriminatedUnion('kind', [
    z.strictObject({
      kind: z.literal('ingress'),
      interfaces: z.array(interfacePattern).min(1).max(256),
      sources: encodedSet,
    }),
    z.strictObject({ kind: z.literal('host'), sources: encodedSet }),
  ]),
  via,
  housekeeping: z.array(housekeeping).max(8),
  antiSpoofing: z.strictObject({ kind: z.literal('anti-spoofing'), id }).nullable(),
  ipv6Block: z.strictObject({ kind: z.literal('ipv6-block'), id }).nullable(),
  killSwitch: z.strictObject({ kind: z.literal('kill-switch'), id, except: encodedSet }).nullable(),
  mssClamp: z
    .strictObject({
      kind: z.literal('mss-clamp'),
      size: z.union([z.literal('pmtu'), z.number().int().min(1).max(65535)]),
    })
    .nullable(),
  nat: z.strictObject({ kind: z.literal('masquerade') }).nullable(),
  rules,
  defaultRule,
});

/** The host-independent IR as the wire carries it (address sets still encoded). */
export const encodedPolicyIrSchema = z.strictObject({
  kind: z.literal('policy'),
  name: text,
  uplink: z.discriminatedUnion('kind', [
    z.strictObject({ kind: z.literal('default-route') }),
    z.strictObject({ kind: z.literal('named'), interface: interfaceName }),
  ]),
  tunnels: z.array(interfaceName).max(256),
  tunnelMatches: z
    .record(
      interfaceName,
      z.strictObject({
        address: z.union([z.ipv4(), z.ipv6()]).nullable(),
        peer: z.union([z.ipv4(), z.ipv6()]).nullable(),
      }),
    )
    .refine((matches) => Object.keys(matches).length <= 256, 'at most 256 tunnel matches'),
  reassembly: z.strictObject({ kind: z.literal('reassembly'), id }),
  classes: z.array(classIr).max(1_000),
  podClasses: z.array(podClassIr).max(1_000),
});

/** Encodes the IR for the wire: plain JSON values, address sets as CIDR lists. */
export function encodePolicyIr(ir: PolicyIR): unknown {
  return encodeValue(ir);
}

function encodeValue(value: unknown): unknown {
  if (value instanceof AddressSet) return { $set: { v4: value.toCidrs(4), v6: value.toCidrs(6) } };
  if (Array.isArray(value)) return value.map(encodeValue);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, encodeValue(v)]));
  }
  return value;
}

export type DecodeResult =
  { readonly ok: true; readonly ir: PolicyIR } | { readonly ok: false; readonly message: string };

/** Validates and decodes the IR of a bundle; a problem names the field and what is wrong. */
export function decodePolicyIr(json: unknown): DecodeResult {
  const parsed = encodedPolicyIrSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return {
      ok: false,
      message: `the bundle's IR is malformed at "${issue?.path.join('.') ?? ''}": ${issue?.message ?? 'invalid'}`,
    };
  }
  try {
    return { ok: true, ir: deepFreezeIr(decodeValue(parsed.data) as PolicyIR) };
  } catch (error) {
    return { ok: false, message: `the bundle's IR is malformed: ${(error as Error).message}` };
  }
}

function decodeValue(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(decodeValue);
  if (value !== null && typeof value === 'object') {
    const record = value as Record<string, unknown>;
    const set = record['$set'] as { v4: string[]; v6: string[] } | undefined;
    if (set !== undefined) return decodeSet(set);
    return Object.fromEntries(Object.entries(record).map(([k, v]) => [k, decodeValue(v)]));
  }
  return value;
}

function decodeSet(set: { v4: string[]; v6: string[] }): AddressSet {
  for (const [family, list] of [
    [4, set.v4],
    [6, set.v6],
  ] as const) {
    for (const cidr of list) {
      const prefix = parsePrefix(cidr);
      if (prefix?.family !== family) throw new Error(`"${cidr}" is not an IPv${family} prefix`);
    }
  }
  return AddressSet.parse([...set.v4, ...set.v6]);
}

function deepFreezeIr<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreezeIr(child);
  }
  return value;
}
