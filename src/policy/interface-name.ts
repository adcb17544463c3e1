// Linux refuses "/", ":" and whitespace in names (dev_valid_name) and allows 15 bytes (IFNAMSIZ);
// macOS names (en0, bridge100, utun3) fit the same rule.
const MAX_LENGTH = 15;

/**
 * What is wrong with an interface name, or undefined when it is fine. With `prefix`, a trailing
 * "*" matches every interface that starts with the rest (veth*).
 */
export function findInterfaceNameProblem(
  name: string,
  options: { prefix: boolean },
): string | undefined {
  const star = name.indexOf('*');
  if (star !== -1 && !(options.prefix && star === name.length - 1)) {
    return options.prefix
      ? '"*" may only end a prefix, like veth*'
      : '"*" may only end an ingress prefix; name one interface';
  }
  const base = star === -1 ? name : name.slice(0, -1);
  if (base === '') {
    return options.prefix ? 'write a name, or a prefix like veth*' : 'it is empty';
  }
  if (base === '.' || base === '..') return `"${base}" is reserved; use a real name`;
  const bad = /[^A-Za-z0-9_.-]/u.exec(base)?.[0];
  if (bad !== undefined) {
    return `${bad.trim() === '' ? 'whitespace' : `"${bad}"`} is not allowed; use letters, digits, ".", "_" and "-"`;
  }
  if (base.length > MAX_LENGTH) {
    return `it has ${base.length} characters; shorten it to at most ${MAX_LENGTH}`;
  }
  return undefined;
}

/** Whether an interface name matches a selector entry ("veth*" is a prefix). */
export function matchesInterface(pattern: string, name: string): boolean {
  return pattern.endsWith('*') ? name.startsWith(pattern.slice(0, -1)) : pattern === name;
}
