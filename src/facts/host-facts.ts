import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { EgressguardError, parseAddress, parsePrefix } from '../core/index.js';

/** The facts.json format; docs/facts.md documents every field (a test holds them together). */
export const factsSchema = z.strictObject({
  schema: z.literal('egressguard/facts/v1'),
  hostname: z.string(),
  os: z.enum(['linux', 'darwin']),
  kernel: z.string().optional(),
  tools: z.record(z.string(), z.string()).default({}),
  labels: z.record(z.string(), z.string()).default({}),
  interfaces: z.array(
    z.strictObject({
      name: z.string(),
      index: z.number().int().optional(),
      up: z.boolean(),
      kind: z.string().optional(),
      addresses: z.array(z.string()),
      peer: z
        .string()
        .optional()
        .describe('the far end of a point-to-point link (macOS: "inet A --> PEER" in ifconfig)'),
      ipv6: z
        .boolean()
        .optional()
        .describe(
          'false when IPv6 is disabled on the interface (net.ipv6.conf.IF.disable_ipv6 = 1)',
        ),
    }),
  ),
  routes: z.array(
    z.strictObject({
      destination: z.string().describe('"default" or a prefix'),
      interface: z.string(),
      gateway: z.string().optional(),
      metric: z.number().int().optional(),
    }),
  ),
  cluster: z
    .strictObject({
      podCidrs: z.array(z.string()).min(1).describe('the pod CIDRs (k3s: 10.42.0.0/16)'),
      serviceCidrs: z
        .array(z.string())
        .default([])
        .describe('the service (ClusterIP) CIDRs (k3s: 10.43.0.0/16)'),
      nodeAddresses: z
        .array(z.string())
        .default([])
        .describe("every node's InternalIP (kubectl get nodes -o wide)"),
      tunnelExits: z
        .record(
          z.string(),
          z.strictObject({
            echoUrl: z
              .string()
              .describe(
                'an HTTP service beyond the tunnel that answers with the client address it sees, as text',
              ),
            addresses: z
              .array(z.string())
              .min(1)
              .describe('what that service sees when traffic leaves by the tunnel (its exit)'),
          }),
        )
        .default({})
        .describe(
          "per tunnel of the gateway node: how a pod checks that its traffic leaves by the tunnel's exit (the gate every pod of a tunnel class starts with)",
        ),
    })
    .optional()
    .describe(
      'The Kubernetes cluster this host is a node of: the addresses its pod network judges by identity, not by address',
    ),
});

/** What egressguard knows about a host: an explicit, serialisable input to lowering. */
export type HostFacts = z.output<typeof factsSchema>;

/** Validates facts read from JSON; throws a `facts` error naming the file and the field. */
export function parseHostFacts(json: unknown, source: string): HostFacts {
  const parsed = factsSchema.safeParse(json);
  if (!parsed.success) {
    const first = parsed.error.issues[0];
    const where = first?.path.join('.') ?? '';
    throw new EgressguardError(
      'facts',
      `Cannot use host facts "${source}": ${where === '' ? '' : `at "${where}": `}${first?.message ?? 'invalid'}`,
      { hint: 'regenerate them with `egressguard facts --json`' },
    );
  }
  for (const iface of parsed.data.interfaces) {
    if (iface.peer !== undefined && parseAddress(iface.peer) === undefined) {
      throw new EgressguardError(
        'facts',
        `Cannot use host facts "${source}": interface "${iface.name}" has malformed peer "${iface.peer}"`,
        { hint: 'write the peer as one address, like 10.8.0.1' },
      );
    }
    for (const address of iface.addresses) {
      if (parsePrefix(address) === undefined) {
        throw new EgressguardError(
          'facts',
          `Cannot use host facts "${source}": interface "${iface.name}" has malformed address "${address}"`,
        );
      }
    }
  }
  const cluster = parsed.data.cluster;
  if (cluster !== undefined) {
    for (const [field, list] of [
      ['podCidrs', cluster.podCidrs],
      ['serviceCidrs', cluster.serviceCidrs],
      ['nodeAddresses', cluster.nodeAddresses],
    ] as const) {
      const bad = list.find((text) => parsePrefix(text) === undefined);
      if (bad !== undefined) {
        throw new EgressguardError(
          'facts',
          `Cannot use host facts "${source}": cluster.${field} has malformed ${field === 'nodeAddresses' ? 'address' : 'prefix'} "${bad}"`,
          { hint: 'write prefixes as 10.42.0.0/16 and node addresses as 192.168.1.21' },
        );
      }
    }
    for (const [tunnel, exit] of Object.entries(cluster.tunnelExits)) {
      const bad = exit.addresses.find((text) => parseAddress(text) === undefined);
      if (bad !== undefined) {
        throw new EgressguardError(
          'facts',
          `Cannot use host facts "${source}": cluster.tunnelExits.${tunnel} has malformed address "${bad}"`,
          { hint: 'write the addresses the echo service sees, like 203.0.113.50' },
        );
      }
      // It reaches a shell script inside the gate container: no quote, space, backslash or "$".
      if (!/^https?:\/\/[^\s'"\\`$]+$/.test(exit.echoUrl)) {
        throw new EgressguardError(
          'facts',
          `Cannot use host facts "${source}": cluster.tunnelExits.${tunnel}.echoUrl "${exit.echoUrl}" is not an http(s) URL without quotes, spaces, backslashes or "$"`,
          { hint: 'give the echo service as http://203.0.113.80:8080/' },
        );
      }
    }
  }
  return parsed.data;
}

export function readHostFacts(file: string): HostFacts {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    throw new EgressguardError(
      'io',
      `Cannot read host facts "${file}": ${(error as Error).message}`,
      {
        cause: error,
      },
    );
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new EgressguardError(
      'facts',
      `Cannot parse host facts "${file}": ${(error as Error).message}`,
      {
        cause: error,
      },
    );
  }
  return parseHostFacts(json, file);
}

/**
 * The uplink: the interface of the main table's default route, ignoring declared tunnels (a full
 * tunnel installs its own default). Several distinct default-route interfaces are an error: which
 * one NAT and filtering should use is a decision for the policy (`interfaces.uplink: NAME`).
 */
export function resolveUplink(
  facts: HostFacts,
  uplink: string,
  tunnels: readonly string[],
): string {
  if (uplink !== 'default-route') return uplink;
  const candidates = [
    ...new Set(
      facts.routes
        .filter((r) => r.destination === 'default' && !tunnels.includes(r.interface))
        .map((r) => r.interface),
    ),
  ];
  if (candidates.length === 1 && candidates[0] !== undefined) return candidates[0];
  if (candidates.length === 0) {
    throw new EgressguardError(
      'facts',
      `Cannot find the uplink of host "${facts.hostname}": no default route outside the tunnels`,
      { hint: 'add a default route, or name the uplink in the policy (interfaces.uplink: eth0)' },
    );
  }
  throw new EgressguardError(
    'facts',
    `Cannot choose the uplink of host "${facts.hostname}": default routes leave by ${candidates.map((c) => `"${c}"`).join(' and ')}`,
    { hint: 'name the uplink in the policy (interfaces.uplink: NAME)' },
  );
}
