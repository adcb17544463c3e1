import { dirname, isAbsolute, join } from 'node:path';
import { isMap, isScalar, isSeq, parseDocument } from 'yaml';
import { AddressSet, parsePrefixList } from '../core/index.js';
import { readListText } from './resolve-networks.js';

/**
 * The policy text with each network's `files:` replaced by the prefixes those files list, added
 * to its `cidrs`: what `fleet push` sends, so that a controller never opens a path a policy
 * names. The same addresses (merged), so the same enforcement and the same hashes. Call it on a
 * policy that validated: its lists were read and checked then.
 */
export function inlineListFiles(text: string, file: string): string {
  const doc = parseDocument(text, { uniqueKeys: true });
  const networks = doc.get('networks', true);
  if (!isMap(networks)) return text;
  let changed = false;
  for (const { value: network } of networks.items) {
    if (!isMap(network)) continue;
    const files = network.get('files', true);
    if (!isSeq(files)) continue;
    let listed = AddressSet.EMPTY;
    for (const item of files.items) {
      const name = isScalar(item) ? String(item.value) : '';
      const path = isAbsolute(name) ? name : join(dirname(file), name);
      listed = listed.union(parsePrefixList(readListText(path), () => undefined));
    }
    const prefixes = [...listed.toCidrs(4), ...listed.toCidrs(6)];
    const cidrs = network.get('cidrs', true);
    if (isSeq(cidrs)) for (const prefix of prefixes) cidrs.add(doc.createNode(prefix));
    else network.set('cidrs', doc.createNode(prefixes));
    network.delete('files');
    changed = true;
  }
  return changed ? doc.toString() : text;
}
