import {
  salvageSchemas,
  type ClassDefinition,
  type NetworkDefinition,
  type PolicyDocument,
  type ProbeDefinition,
  type RequirementDefinition,
  type RuleDefinition,
  type TunnelMatchDefinition,
} from './schema.js';

/** A list element with its index in the document (elements that failed the schema are absent). */
export interface Indexed<T> {
  readonly index: number;
  readonly value: T;
}

/** A rule whose ports that failed the schema are null (their index is kept for positions). */
export type RulePart = Omit<RuleDefinition, 'ports'> & {
  readonly ports?: readonly (number | string | null)[] | undefined;
};

export interface ClassPart {
  readonly name: string;
  readonly definition: Omit<ClassDefinition, 'rules'>;
  readonly rules: readonly Indexed<RulePart>[];
}

export interface RequirementPart {
  readonly index: number;
  readonly definition: Omit<RequirementDefinition, 'probes'>;
  readonly probes: readonly Indexed<ProbeDefinition>[];
}

/**
 * The parts of a policy document whose meaning can be checked: all of a valid document, or the
 * sound parts of an invalid one, so that every problem is reported at once.
 */
export interface DocumentParts {
  readonly name: string;
  readonly networks: Readonly<Record<string, NetworkDefinition>>;
  /** Networks that failed the schema: references to them are not reported a second time. */
  readonly brokenNetworks: ReadonlySet<string>;
  readonly uplink: string;
  readonly tunnels: readonly string[];
  /** The tunnels declared with `match`, by name, as written. */
  readonly tunnelMatches: Readonly<Record<string, TunnelMatchDefinition>>;
  readonly classes: readonly ClassPart[];
  readonly requirements: readonly RequirementPart[];
}

/** All parts of a document that passed the schema. */
export function partsOfDocument(doc: PolicyDocument): DocumentParts {
  return {
    name: doc.metadata.name,
    networks: doc.networks,
    brokenNetworks: new Set(),
    uplink: doc.interfaces.uplink,
    tunnels: Object.keys(doc.interfaces.tunnels),
    tunnelMatches: matchesOf(doc.interfaces.tunnels),
    classes: Object.entries(doc.classes).map(([name, { rules, ...definition }]) => ({
      name,
      definition,
      rules: rules.map((value, index) => ({ index, value })),
    })),
    requirements: doc.requirements.map(({ probes, ...definition }, index) => ({
      index,
      definition,
      probes: probes.map((value, i) => ({ index: i, value })),
    })),
  };
}

/**
 * The sound parts of a document that failed the schema (whose issues are already reported):
 * each network, class, rule, requirement and probe that passes on its own.
 */
export function salvageDocumentParts(raw: unknown): DocumentParts | undefined {
  if (!isRecord(raw)) return undefined;
  const networks: Record<string, NetworkDefinition> = {};
  const brokenNetworks = new Set<string>();
  for (const [name, value] of entriesOf(raw['networks'])) {
    const parsed = salvageSchemas.network.safeParse(value);
    if (parsed.success) networks[name] = parsed.data;
    else brokenNetworks.add(name);
  }

  let uplink = 'default-route';
  let tunnels: string[] = [];
  let tunnelMatches: Record<string, TunnelMatchDefinition> = {};
  const interfaces = salvageSchemas.interfaces.safeParse(raw['interfaces'] ?? {});
  if (interfaces.success) {
    uplink = interfaces.data.uplink;
    tunnels = Object.keys(interfaces.data.tunnels);
    tunnelMatches = matchesOf(interfaces.data.tunnels);
  } else if (isRecord(raw['interfaces'])) {
    // A broken tunnel is still declared: classes that use it must not be told it is unknown.
    tunnels = entriesOf(raw['interfaces']['tunnels']).map(([name]) => name);
  }

  const classes: ClassPart[] = [];
  for (const [name, value] of entriesOf(raw['classes'])) {
    const parsed = salvageSchemas.class.safeParse(value);
    if (!parsed.success) continue;
    const { rules, ...definition } = parsed.data;
    const salvaged = salvageList(rules, salvageSchemas.rule).map(({ index, value }) => ({
      index,
      value: {
        ...value,
        ports: value.ports?.map((port) => {
          const checked = salvageSchemas.port.safeParse(port);
          return checked.success ? checked.data : null;
        }),
      },
    }));
    classes.push({ name, definition, rules: salvaged });
  }

  const requirements: RequirementPart[] = [];
  if (Array.isArray(raw['requirements'])) {
    raw['requirements'].forEach((value: unknown, index) => {
      const parsed = salvageSchemas.requirement.safeParse(value);
      if (!parsed.success) return;
      const { probes, ...definition } = parsed.data;
      requirements.push({ index, definition, probes: salvageList(probes, salvageSchemas.probe) });
    });
  }

  const metadata = salvageSchemas.metadata.safeParse(raw['metadata']);
  return {
    name: metadata.success ? metadata.data.name : '',
    networks,
    brokenNetworks,
    uplink,
    tunnels,
    tunnelMatches,
    classes,
    requirements,
  };
}

function matchesOf(
  tunnels: Readonly<Record<string, { match?: TunnelMatchDefinition | undefined }>>,
): Record<string, TunnelMatchDefinition> {
  const out: Record<string, TunnelMatchDefinition> = {};
  for (const [name, definition] of Object.entries(tunnels)) {
    if (definition.match !== undefined) out[name] = definition.match;
  }
  return out;
}

function salvageList<T>(
  values: readonly unknown[],
  schema: { safeParse: (v: unknown) => { success: true; data: T } | { success: false } },
): Indexed<T>[] {
  const out: Indexed<T>[] = [];
  values.forEach((value, index) => {
    const parsed = schema.safeParse(value);
    if (parsed.success) out.push({ index, value: parsed.data });
  });
  return out;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function entriesOf(value: unknown): [string, unknown][] {
  return isRecord(value) ? Object.entries(value) : [];
}
