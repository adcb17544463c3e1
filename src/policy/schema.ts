import { z } from 'zod';

/**
 * The policy's structure, v1. This is the single source of the validator and of the JSON Schema
 * that `egressguard schema` prints; meaning (references, CIDRs, overlaps) is checked afterwards
 * in parse-policy.ts, where problems can point at the exact YAML node.
 */

/** Names of policies, networks and classes. */
export const NAME_PATTERN = /^[a-z][a-z0-9-]{0,30}$/;

const name = z
  .string()
  .regex(NAME_PATTERN, 'use lowercase letters, digits and "-", starting with a letter')
  .describe('A name: lowercase letters, digits and "-", at most 31 characters');

const networkEntry = z
  .string()
  .describe('A CIDR (10.0.0.0/8, 2001:db8::/32), an address, or the name of another network');

const networkObject = z
  .strictObject({
    cidrs: z.array(z.string()).optional().describe('Prefixes or addresses, both families'),
    include: z.array(name).optional().describe('Other networks whose addresses are added'),
    exclude: z
      .array(networkEntry)
      .optional()
      .describe('Prefixes or networks removed from this one (set arithmetic)'),
    files: z
      .array(z.string())
      .optional()
      .describe('Text files with one prefix a line ("#" comments), relative to the policy'),
    description: z.string().optional(),
  })
  .describe('A network defined by prefixes, other networks, files and exclusions');

const network = z.union([z.array(networkEntry), networkObject]);

const uplink = z
  .string()
  .describe('"default-route" (the main table default-route interface) or an interface name');

const tunnelMatch = z
  .strictObject({
    address: z
      .string()
      .optional()
      .describe("The tunnel's own address on this side (macOS: ifconfig utunN's inet)"),
    peer: z
      .string()
      .optional()
      .describe('The address of the far end (macOS: after "-->" in ifconfig utunN)'),
  })
  .describe(
    'Find the tunnel by its address or peer, not its name: a macOS utun is renumbered on every reconnect',
  );

const tunnel = z
  .strictObject({
    description: z.string().optional(),
    match: tunnelMatch.optional(),
  })
  .describe(
    'A tunnel interface (matched by name, so it may be absent, deleted or recreated; or by address with "match")',
  );

const interfaces = z.strictObject({
  uplink: uplink.optional().default('default-route'),
  tunnels: z.record(z.string(), tunnel).optional().default({}),
});

const protocolName = z.enum(['tcp', 'udp', 'icmp', 'gre', 'esp', 'ah', 'sctp']);
const protocol = z.union([protocolName, z.number().int()]).describe('A protocol name or number');

const port = z
  .union([z.number().int(), z.string()])
  .describe('A port (443) or an inclusive range ("30000-32767")');

const destination = z
  .union([z.string(), z.array(z.string()).min(1)])
  .describe('"any", "self" (the host itself), a network name, a CIDR, or a list of them');

const rule = z.strictObject({
  id: z.string().min(1).describe('A stable rule id, shown in counters, logs and explain'),
  action: z.enum(['allow', 'deny', 'audit']).describe('audit logs and allows'),
  to: destination,
  proto: z
    .union([protocol, z.array(protocol).min(1)])
    .optional()
    .describe('Absent: every IP protocol. icmp means ICMP for IPv4 and ICMPv6 for IPv6'),
  ports: z.array(port).min(1).optional().describe('Destination ports; tcp and udp only'),
  description: z.string().optional(),
});

const killSwitch = z.strictObject({
  mode: z
    .enum(['enforce', 'audit'])
    .optional()
    .default('enforce')
    .describe('Must be enforce: a kill switch that only logs lets traffic out the uplink'),
  except: z
    .array(networkEntry)
    .optional()
    .default([])
    .describe('Networks the class may reach outside the tunnel (e.g. the LAN)'),
});

/** A Kubernetes label key (an optional DNS prefix and "/") and value, checked in parse-policy.ts. */
const podSelector = z
  .strictObject({
    namespace: z
      .string()
      .optional()
      .describe('The namespace of the pods; absent: pods of every namespace'),
    labels: z
      .record(z.string(), z.string())
      .optional()
      .default({})
      .describe('Pod labels the class selects, all of them (egress-class: vpn)'),
  })
  .describe('Kubernetes pods of the class, by namespace and labels (enforced by the pod network)');

const classSchema = z.strictObject({
  description: z.string().optional(),
  pods: podSelector
    .optional()
    .describe('A Kubernetes class: the pods it selects (instead of ingress and sources)'),
  origin: z
    .enum(['forwarded', 'host'])
    .optional()
    .default('forwarded')
    .describe('forwarded: workloads routed by the host; host: traffic the host itself sends'),
  ingress: z
    .array(z.string())
    .optional()
    .describe('Interfaces the workloads arrive on; a trailing "*" matches a prefix (veth*)'),
  sources: z
    .array(networkEntry)
    .min(1)
    .optional()
    .describe(
      'Source prefixes of the class, both families; other sources are dropped (required unless pods)',
    ),
  ipv6: z
    .enum(['block', 'allow'])
    .optional()
    .describe('For a class with no IPv6 source prefix: block (default) or allow its IPv6'),
  hosts: z
    .strictObject({ labels: z.record(z.string(), z.string()) })
    .optional()
    .describe('Limit the class to hosts whose facts carry these labels'),
  via: z
    .string()
    .optional()
    .default('uplink')
    .describe('"uplink" or the name of a declared tunnel'),
  killSwitch: killSwitch
    .optional()
    .describe('Leave only through the tunnel or to excepted networks; never out the uplink'),
  rules: z.array(rule).optional().default([]).describe('Ordered; the first match wins'),
  default: z.enum(['allow', 'deny']).describe('The verdict when no rule matches'),
  nat: z.enum(['masquerade', 'none']).optional().default('none'),
  mssClamp: z
    .union([z.literal('pmtu'), z.number().int().min(536).max(65495)])
    .optional()
    .describe('Clamp TCP MSS: "pmtu" or a value (tunnels shrink the MTU)'),
});

const probe = z.strictObject({
  id: z.string().min(1).optional(),
  from: z.string().optional().describe('Source address of the probe (or pod)'),
  pod: z.string().optional().describe('A Kubernetes class whose pod sends the probe (or from)'),
  in: z.string().optional().describe('Ingress interface; defaults to the class of the source'),
  to: z.string().describe('Destination address'),
  proto: z.union([protocolName, z.number().int()]).optional().default('tcp'),
  port: z.number().int().optional(),
  tunnel: z.enum(['up', 'down']).optional().default('up'),
  expect: z.enum(['allow', 'deny']),
  egress: z.string().optional().describe('The source address the far side should observe'),
  via: z.string().optional().describe('The interface the packet should leave by'),
});

const requirement = z.strictObject({
  id: z.string().regex(/^[A-Z][A-Z0-9]*(-[A-Z0-9]+)+$/, 'use an id like R-NET-06'),
  statement: z.string().min(1).describe('What the requirement guarantees, in a sentence'),
  safetyCritical: z.boolean().optional().default(false),
  probes: z.array(probe).optional().default([]),
});

export const policySchema = z
  .strictObject({
    apiVersion: z.literal('egressguard/v1'),
    kind: z.literal('Policy').optional().default('Policy'),
    metadata: z
      .strictObject({
        name,
        description: z.string().optional(),
      })
      .describe("The policy's name and an optional description"),
    networks: z.record(z.string(), network).optional().default({}),
    interfaces: interfaces.optional().default({ uplink: 'default-route', tunnels: {} }),
    classes: z
      .record(z.string(), classSchema)
      .describe('The classes of workloads, by name, each with its ingress, sources, via and rules'),
    requirements: z.array(requirement).optional().default([]),
  })
  .describe('egressguard policy v1');

/**
 * Lenient versions of the sections, for checking the meaning of the parts of an invalid policy
 * that are sound (every problem at once): unknown keys are dropped (the strict schema has
 * reported them), and rules, their ports and probes are left to be validated one by one, so a bad
 * rule hides neither its siblings nor its class, and a bad port not the other ports.
 */
export const salvageSchemas = {
  network,
  interfaces: interfaces.strip(),
  class: classSchema.extend({ rules: z.array(z.unknown()).optional().default([]) }).strip(),
  rule: rule.extend({ ports: z.array(z.unknown()).min(1).optional() }).strip(),
  port,
  requirement: requirement.extend({ probes: z.array(z.unknown()).optional().default([]) }).strip(),
  probe: probe.strip(),
  metadata: z.object({ name }),
};

export type PolicyDocument = z.output<typeof policySchema>;
export type NetworkDefinition = z.output<typeof network>;
export type ClassDefinition = z.output<typeof classSchema>;
export type RuleDefinition = z.output<typeof rule>;
export type TunnelMatchDefinition = z.output<typeof tunnelMatch>;
export type PodSelectorDefinition = z.output<typeof podSelector>;
export type ProbeDefinition = z.output<typeof probe>;
export type RequirementDefinition = z.output<typeof requirement>;
export type ProtocolSpec = z.output<typeof protocol>;

/** The JSON Schema for editors, generated from the validator above. */
export function policyJsonSchema(): Record<string, unknown> {
  return {
    ...z.toJSONSchema(policySchema, { io: 'input', unrepresentable: 'any' }),
    $id: 'https://egressguard.dev/schema/policy-v1.json',
    title: 'egressguard policy v1',
  };
}

/** The keys a strict object at `path` accepts, for "did you mean" suggestions. */
export function knownKeysAt(path: readonly (string | number)[]): readonly string[] {
  let node: z.ZodType = policySchema;
  for (const segment of path) {
    const next = childOf(node, segment);
    if (next === undefined) return [];
    node = next;
  }
  return keysOf(node);
}

/** The description of the field at `path`, for messages about a missing field. */
export function describeAt(path: readonly (string | number)[]): string | undefined {
  let node: z.ZodType = policySchema;
  for (const segment of path) {
    const next = childOf(node, segment);
    if (next === undefined) return undefined;
    node = next;
  }
  return node.description ?? unwrap(node).description;
}

function unwrap(node: z.ZodType): z.ZodType {
  let current = node;
  for (;;) {
    if (current instanceof z.ZodOptional || current instanceof z.ZodDefault) {
      current = current.unwrap() as z.ZodType;
    } else {
      return current;
    }
  }
}

function childOf(node: z.ZodType, segment: string | number): z.ZodType | undefined {
  const n = unwrap(node);
  if (n instanceof z.ZodObject) return (n.shape as Record<string, z.ZodType>)[String(segment)];
  if (n instanceof z.ZodArray) return n.element as z.ZodType;
  if (n instanceof z.ZodRecord) return n.valueType as z.ZodType;
  if (n instanceof z.ZodUnion) {
    for (const option of n.options as z.ZodType[]) {
      const child = childOf(option, segment);
      if (child !== undefined) return child;
    }
  }
  return undefined;
}

function keysOf(node: z.ZodType): readonly string[] {
  const n = unwrap(node);
  if (n instanceof z.ZodObject) return Object.keys(n.shape);
  if (n instanceof z.ZodUnion) return (n.options as z.ZodType[]).flatMap(keysOf);
  return [];
}
