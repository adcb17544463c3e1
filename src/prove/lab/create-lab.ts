import { EgressguardError } from '../../core/index.js';
import { createRunner, type Runner } from '../../runner/index.js';
import {
  DEFAULT_LAB_RUN_DIR,
  createRunId,
  killProcessesIn,
  listNamespaces,
  namespaceName,
  ownStartTime,
  removeLabMarker,
  writeLabMarker,
} from './lab-registry.js';
import { FIRST_IFINDEX, interfaceLines, planLab, routeLine, vethArgv } from './plan-lab.js';
import { trackForSignals, untrackForSignals } from './teardown-on-signal.js';
import { validateTopology, type LabLink, type LinkRef, type Topology } from './topology.js';

/** Options of createLab and withLab. */
export interface CreateLabOptions {
  /** A runner in the machine's own namespace; default: a new one with the root guard on. */
  readonly runner?: Runner;
  /** Where the owner marker goes; default /run/egressguard/labs. */
  readonly runDir?: string;
}

/** What the kernel says about one interface. */
export interface LinkState {
  readonly ifindex: number;
  /** Administratively up (IFF_UP). */
  readonly isUp: boolean;
  /** The lower layer is up (IFF_LOWER_UP): false on a veth whose peer is down. */
  readonly hasCarrier: boolean;
  readonly operState: string;
}

/** Which routes of the topology recreateLink puts back. */
export type RestoreRoutes = 'none' | 'peer' | 'both';

/** A running lab: one network namespace per node, deleted by destroy(). */
export interface Lab {
  readonly id: string;
  readonly topology: Topology;
  readonly nodes: readonly string[];
  /** The namespace name of a node. */
  ns(node: string): string;
  /** A runner acting inside a node's namespace. */
  runner(node: string): Runner;
  /** The other end of the link that `ref` is one end of. */
  peerOf(ref: LinkRef): LinkRef;
  /** The addresses the topology gives an interface. */
  addressesOf(ref: LinkRef): readonly string[];
  linkState(ref: LinkRef): Promise<LinkState>;
  /** Sets a link up; with its peer up too, returns once the kernel reports it operational. */
  setLinkUp(ref: LinkRef): Promise<void>;
  /** Sets a link down: the kernel drops the routes through it. */
  setLinkDown(ref: LinkRef): Promise<void>;
  /** Deletes a link; deleting either end of a veth pair deletes both. */
  deleteLink(ref: LinkRef): Promise<void>;
  /**
   * Deletes the link if it exists and creates it again as declared (a new ifindex), addresses
   * and up. The kernel drops every route through a deleted device; `routes` says which of the
   * topology's routes come back: by default the peer's, since a real tunnel's far side would
   * never have lost them (only a veth pair dies as a whole).
   */
  recreateLink(ref: LinkRef, options?: { readonly routes?: RestoreRoutes }): Promise<void>;
  /** Renames an interface; the kernel renames only a down link, so it goes down and back up. */
  renameLink(ref: LinkRef, name: string): Promise<void>;
  /**
   * Takes the carrier away from an interface. A veth has no carrier switch (`ip link set X
   * carrier off` is refused): it loses its carrier when its peer goes down (drivers/net/veth.c,
   * veth_close), and stays administratively up, so routes stay, flagged `linkdown`.
   */
  setCarrierOff(ref: LinkRef): Promise<void>;
  /** Gives the carrier back (sets the peer up again). */
  setCarrierOn(ref: LinkRef): Promise<void>;
  /** Runs `cleanup` first when the lab is destroyed (last registered, first run); returns an undo. */
  defer(cleanup: () => Promise<void>): () => void;
  /** Deletes every namespace of the lab; safe to call more than once. */
  destroy(): Promise<void>;
}

/** Builds a lab from a topology; on failure nothing of it is left behind. */
export async function createLab(topology: Topology, options: CreateLabOptions = {}): Promise<Lab> {
  validateTopology(topology);
  const root = options.runner ?? createRunner({ guard: true });
  if (root.netns !== undefined) {
    throw new EgressguardError(
      'usage',
      `Cannot build lab: the runner acts inside namespace "${root.netns}"`,
      { hint: 'pass a runner of the machine’s own namespace; the lab only names namespaces there' },
    );
  }
  const id = createRunId();
  const namespaces = new Map(Object.keys(topology.nodes).map((n) => [n, namespaceName(id, n)]));
  const runDir = options.runDir ?? DEFAULT_LAB_RUN_DIR;
  writeLabMarker(runDir, {
    runId: id,
    pid: process.pid,
    pidStart: ownStartTime(),
    namespaces: [...namespaces.values()],
    createdAt: new Date().toISOString(),
  });
  const lab = new NetnsLab(id, topology, namespaces, root, runDir);
  trackForSignals(lab);
  try {
    await lab.build();
    return lab;
  } catch (error) {
    await lab.destroy().catch(() => undefined); // the build error says more; reaping mops up
    throw error;
  }
}

/** Runs `fn` in a new lab and destroys the lab afterwards, whatever happens. */
export async function withLab<T>(
  topology: Topology,
  fn: (lab: Lab) => Promise<T>,
  options: CreateLabOptions = {},
): Promise<T> {
  const lab = await createLab(topology, options);
  let failed = false;
  try {
    return await fn(lab);
  } catch (error) {
    failed = true;
    throw error;
  } finally {
    // A teardown failure must not hide the error that ended fn.
    await lab.destroy().catch((error: unknown) => {
      if (!failed) throw error;
    });
  }
}

interface LinkNames {
  a: string;
  b: string;
}

class NetnsLab implements Lab {
  readonly nodes: readonly string[];
  private readonly created: string[] = [];
  private readonly cleanups: (() => Promise<void>)[] = [];
  private readonly names: LinkNames[];
  private destroying: Promise<void> | undefined;
  private nextIfindex: number;

  constructor(
    readonly id: string,
    readonly topology: Topology,
    private readonly namespaces: ReadonlyMap<string, string>,
    private readonly root: Runner,
    private readonly runDir: string,
  ) {
    this.nodes = [...namespaces.keys()];
    this.names = topology.links.map((link) => ({ a: link.a.iface, b: link.b.iface }));
    this.nextIfindex = FIRST_IFINDEX + 2 * topology.links.length;
  }

  async build(): Promise<void> {
    const plan = planLab(this.topology, this.namespaces);
    // One at a time: the first `ip netns add` on a machine mounts /run/netns, and two racing
    // first adds stack two mounts there.
    for (const ns of this.namespaces.values()) {
      this.checkNotDestroyed();
      await this.root.run(['ip', 'netns', 'add', ns], { effect: 'change' });
      this.created.push(ns);
    }
    await this.eachNode((node) => this.sysctl(node, plan.earlySysctls));
    this.checkNotDestroyed();
    await Promise.all(plan.veths.map((argv) => this.root.run(argv, { effect: 'change' })));
    await this.eachNode(async (node) => {
      await this.sysctl(node, plan.sysctls.get(node) ?? []);
      await this.batch(node, plan.interfaces.get(node) ?? [], 'set up the interfaces');
    });
    await this.eachNode((node) => this.batch(node, plan.routes.get(node) ?? [], 'add the routes'));
    await this.waitForOperUp(this.topology.links.flatMap((link) => [link.a, link.b]));
  }

  ns(node: string): string {
    const ns = this.namespaces.get(node);
    if (ns === undefined) {
      throw new EgressguardError(
        'usage',
        `Cannot find node "${node}" in lab "${this.id}": its nodes are ${this.nodes.map((n) => `"${n}"`).join(', ')}`,
      );
    }
    return ns;
  }

  runner(node: string): Runner {
    return this.root.inNamespace(this.ns(node));
  }

  peerOf(ref: LinkRef): LinkRef {
    const { index, side } = this.find(ref);
    const link = this.link(index);
    const other = side === 'a' ? 'b' : 'a';
    return { node: link[other].node, iface: this.nameOf(index, other) };
  }

  addressesOf(ref: LinkRef): readonly string[] {
    const { index, side } = this.find(ref);
    return this.link(index)[side].addresses ?? [];
  }

  async linkState(ref: LinkRef): Promise<LinkState> {
    const { stdout } = await this.root.run(
      ['ip', '-n', this.ns(ref.node), '-j', 'link', 'show', 'dev', ref.iface],
      { effect: 'read' },
    );
    const [entry] = JSON.parse(stdout) as { ifindex: number; flags: string[]; operstate: string }[];
    if (entry === undefined) {
      throw new EgressguardError(
        'command-failed',
        `Cannot read link "${ref.iface}" in "${ref.node}"`,
      );
    }
    return {
      ifindex: entry.ifindex,
      isUp: entry.flags.includes('UP'),
      hasCarrier: entry.flags.includes('LOWER_UP'),
      operState: entry.operstate,
    };
  }

  async setLinkUp(ref: LinkRef): Promise<void> {
    const peer = this.peerOf(ref);
    await this.batch(ref.node, [`link set dev ${ref.iface} up`], `bring "${ref.iface}" up`);
    // With its peer up too the link works once the kernel says so; otherwise it never will.
    const isPeerUp = await this.linkState(peer).then(
      (state) => state.isUp,
      () => false,
    );
    if (isPeerUp) await this.waitForOperUp([ref, peer]);
  }

  async setLinkDown(ref: LinkRef): Promise<void> {
    this.find(ref);
    await this.batch(ref.node, [`link set dev ${ref.iface} down`], `take "${ref.iface}" down`);
  }

  async deleteLink(ref: LinkRef): Promise<void> {
    this.find(ref);
    await this.batch(ref.node, [`link delete dev ${ref.iface}`], `delete "${ref.iface}"`);
  }

  async recreateLink(
    ref: LinkRef,
    options: { readonly routes?: RestoreRoutes } = {},
  ): Promise<void> {
    const { index, side } = this.find(ref);
    const link = this.link(index);
    // Gone already (deleted, or its peer's namespace went): nothing to delete first.
    await this.root.run(['ip', '-n', this.ns(ref.node), 'link', 'delete', 'dev', ref.iface], {
      effect: 'change',
      allowFailure: true,
    });
    // A fresh pair of ifindexes: a recreated tunnel must not look like the old one.
    const ifindex = this.nextIfindex;
    this.nextIfindex += 2;
    await this.root.run(vethArgv(link, { nsOf: (node) => this.ns(node), ifindex }), {
      effect: 'change',
    });
    this.names[index] = { a: link.a.iface, b: link.b.iface };
    for (const end of [link.a, link.b]) {
      await this.batch(end.node, interfaceLines(end, link), `set up "${end.iface}" again`);
    }
    await this.waitForOperUp([link.a, link.b]);
    const routes = options.routes ?? 'peer';
    const restore =
      routes === 'none'
        ? []
        : routes === 'both'
          ? [link.a, link.b]
          : [link[side === 'a' ? 'b' : 'a']];
    for (const end of restore) {
      const lines = (this.topology.nodes[end.node]?.routes ?? []).map((r) =>
        routeLine(r, 'replace'),
      );
      await this.batch(end.node, lines, `restore the routes`);
    }
  }

  async renameLink(ref: LinkRef, name: string): Promise<void> {
    const { index, side } = this.find(ref);
    if (!/^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$/.test(name)) {
      throw new EgressguardError(
        'usage',
        `Cannot rename "${ref.iface}" to "${name}": not an interface name`,
        {
          hint: 'use at most 15 letters, digits, "_", "." or "-" (not first)',
        },
      );
    }
    const wasUp = (await this.linkState(ref)).isUp;
    await this.batch(
      ref.node,
      [
        `link set dev ${ref.iface} down`,
        `link set dev ${ref.iface} name ${name}`,
        ...(wasUp ? [`link set dev ${name} up`] : []),
      ],
      `rename "${ref.iface}" to "${name}"`,
    );
    const names = this.names[index];
    if (names !== undefined) names[side] = name;
  }

  async setCarrierOff(ref: LinkRef): Promise<void> {
    await this.setLinkDown(this.peerOf(ref));
  }

  async setCarrierOn(ref: LinkRef): Promise<void> {
    await this.setLinkUp(this.peerOf(ref));
  }

  defer(cleanup: () => Promise<void>): () => void {
    this.cleanups.push(cleanup);
    return () => {
      const at = this.cleanups.indexOf(cleanup);
      if (at !== -1) this.cleanups.splice(at, 1);
    };
  }

  destroy(): Promise<void> {
    this.destroying ??= this.teardown();
    return this.destroying;
  }

  private async teardown(): Promise<void> {
    const problems: string[] = [];
    for (const cleanup of this.cleanups.splice(0).reverse()) {
      await cleanup().catch((error: unknown) => problems.push(messageOf(error)));
    }
    await Promise.all(
      this.created.map(async (ns) => {
        await killProcessesIn(this.root, ns);
        await this.root.run(['ip', 'netns', 'delete', ns], {
          effect: 'change',
          allowFailure: true,
        });
      }),
    );
    const left = (await listNamespaces(this.root)).filter((ns) => this.created.includes(ns));
    if (left.length === 0) {
      removeLabMarker(this.runDir, this.id);
      untrackForSignals(this);
    } else {
      problems.push(`namespaces ${left.map((ns) => `"${ns}"`).join(', ')} are still there`);
    }
    if (problems.length > 0) {
      throw new EgressguardError(
        'command-failed',
        `Cannot tear down lab "${this.id}" completely: ${problems.join('; ')}`,
        { hint: 'run reapStaleLabs() once this process has ended, or `ip netns delete NAME`' },
      );
    }
  }

  /**
   * Waits until the kernel reports the interfaces operationally up. Carrier changes reach the
   * stack through linkwatch, asynchronously; until then IPv6 treats the link as not ready.
   */
  private async waitForOperUp(refs: readonly LinkRef[], timeoutMs = 3000): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const states = await Promise.all(
        refs.map(async (ref) => ({ ref, state: (await this.linkState(ref)).operState })),
      );
      const down = states.filter((s) => s.state !== 'UP');
      if (down.length === 0) return;
      if (performance.now() >= deadline) {
        throw new EgressguardError(
          'command-failed',
          `Cannot bring up lab "${this.id}": after ${timeoutMs} ms ${down.map((s) => `"${s.ref.iface}" in "${s.ref.node}" is ${s.state}`).join(', ')}`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  private checkNotDestroyed(): void {
    if (this.destroying !== undefined) {
      throw new EgressguardError(
        'command-failed',
        `Cannot build lab "${this.id}": it was destroyed meanwhile`,
      );
    }
  }

  private async eachNode(fn: (node: string) => Promise<void>): Promise<void> {
    this.checkNotDestroyed();
    await Promise.all(this.nodes.map(fn));
  }

  private async sysctl(node: string, settings: readonly string[]): Promise<void> {
    if (settings.length === 0) return;
    await this.runner(node).run(['sysctl', '-q', '-w', ...settings], { effect: 'change' });
  }

  /** Runs `ip -batch` lines in a node; a failure names the line that failed. */
  private async batch(node: string, lines: readonly string[], what: string): Promise<void> {
    if (lines.length === 0) return;
    const ns = this.ns(node);
    try {
      await this.root.run(['ip', '-n', ns, '-batch', '-'], {
        effect: 'change',
        input: `${lines.join('\n')}\n`,
      });
    } catch (error) {
      const line = /Command failed -:(\d+)/.exec(messageOf(error))?.[1];
      const failed = line === undefined ? undefined : lines[Number(line) - 1];
      throw new EgressguardError(
        'command-failed',
        `Cannot ${what} in lab node "${node}" (namespace "${ns}")${failed === undefined ? '' : ` at "ip ${failed}"`}: ${messageOf(error)}`,
        { cause: error },
      );
    }
  }

  private find(ref: LinkRef): { index: number; side: 'a' | 'b' } {
    for (const [index, link] of this.topology.links.entries()) {
      for (const side of ['a', 'b'] as const) {
        if (link[side].node === ref.node && this.nameOf(index, side) === ref.iface) {
          return { index, side };
        }
      }
    }
    const known = this.topology.links.flatMap((link, index) =>
      (['a', 'b'] as const)
        .filter((side) => link[side].node === ref.node)
        .map((side) => `"${this.nameOf(index, side)}"`),
    );
    throw new EgressguardError(
      'usage',
      `Cannot find link "${ref.iface}" in node "${ref.node}" of lab "${this.id}": the node has ${known.length === 0 ? 'no links' : known.join(', ')}`,
    );
  }

  private link(index: number): LabLink {
    const link = this.topology.links[index];
    if (link === undefined) throw new Error(`No link ${index}`); // find() returned it
    return link;
  }

  private nameOf(index: number, side: 'a' | 'b'): string {
    return this.names[index]?.[side] ?? this.link(index)[side].iface;
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
