/** One interface as macOS `ifconfig` lists it. */
export interface IfconfigInterface {
  readonly name: string;
  /** The flag names between `<` and `>` (UP, RUNNING, POINTOPOINT, …). */
  readonly flags: readonly string[];
  readonly mtu: number;
  /** `address/length`, IPv4 then IPv6 in listed order; IPv6 without its `%scope`. */
  readonly addresses: readonly string[];
  /** The `status:` line (media interfaces only), else null. */
  readonly status: 'active' | 'inactive' | null;
  /** Bridge members (`member: vmenet0 …`). */
  readonly members: readonly string[];
  /** The far end of a point-to-point link (`inet A --> PEER`), the first one listed. */
  readonly peer: string | null;
}

/**
 * Parses macOS `ifconfig` output (ifconfig(8)): a header per interface
 * `NAME: flags=HEX<NAMES> mtu N`, then tab-indented lines, of which it reads `inet A [--> P]
 * netmask 0xHEX`, `inet6 A[%IF] prefixlen N`, `status:` and `member:`; the rest (options, ether,
 * media, a bridge's configuration) is skipped. Throws on a line it cannot place.
 */
export function parseIfconfig(text: string): IfconfigInterface[] {
  const out: {
    name: string;
    flags: string[];
    mtu: number;
    v4: string[];
    v6: string[];
    status: 'active' | 'inactive' | null;
    members: string[];
    peer: string | null;
  }[] = [];
  for (const [index, line] of text.split('\n').entries()) {
    if (line.trim() === '') continue;
    const header = /^([A-Za-z0-9._-]+): flags=[0-9a-f]+<([^>]*)> mtu (\d+)/.exec(line);
    if (header !== null) {
      out.push({
        name: header[1] ?? '',
        flags: (header[2] ?? '').split(',').filter((f) => f !== ''),
        mtu: Number(header[3]),
        v4: [],
        v6: [],
        status: null,
        members: [],
        peer: null,
      });
      continue;
    }
    const current = out[out.length - 1];
    if (current === undefined || !/^\s/.test(line)) {
      throw new Error(`line ${index + 1} is not an interface header nor indented: ${line}`);
    }
    const v4 = /^\s+inet (\d+\.\d+\.\d+\.\d+)(?: --> (\S+))? netmask 0x([0-9a-f]{8})/.exec(line);
    if (v4 !== null) {
      current.v4.push(`${v4[1]}/${maskLength(Number.parseInt(v4[3] ?? '0', 16))}`);
      current.peer ??= v4[2] ?? null;
      continue;
    }
    // A point-to-point link lists its far end here too (`inet6 A --> PEER prefixlen N`).
    const v6 =
      /^\s+inet6 ([0-9a-f:]+)(?:%\S+)?(?: --> ([0-9a-f:]+)(?:%\S+)?)? prefixlen (\d+)/.exec(line);
    if (v6 !== null) {
      current.v6.push(`${v6[1]}/${v6[3]}`);
      current.peer ??= v6[2] ?? null;
      continue;
    }
    const status = /^\s+status: (active|inactive)\s*$/.exec(line);
    if (status !== null) {
      current.status = status[1] as 'active' | 'inactive';
      continue;
    }
    const member = /^\s+member: (\S+)/.exec(line);
    if (member !== null) current.members.push(member[1] ?? '');
  }
  return out.map((i) => ({
    name: i.name,
    flags: i.flags,
    mtu: i.mtu,
    addresses: [...i.v4, ...i.v6],
    status: i.status,
    members: i.members,
    peer: i.peer,
  }));
}

/** The prefix length of a netmask (contiguous ones from the top). */
function maskLength(mask: number): number {
  let length = 0;
  for (let bit = 31; bit >= 0 && (mask >>> bit) & 1; bit--) length++;
  return length;
}
