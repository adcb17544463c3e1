/** JSON values as parsed by JSON.parse. */
export type JsonValue =
  null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };
type JsonObject = { [key: string]: JsonValue };

function isObject(value: JsonValue | undefined): value is JsonObject {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function clone<T extends JsonValue>(value: T): T {
  return structuredClone(value);
}

/** RFC 7386 §2 MergePatch: objects merge, null deletes a member, anything else replaces. */
export function applyMergePatch(target: JsonValue, patch: JsonValue): JsonValue {
  if (!isObject(patch)) return clone(patch);
  const out: JsonObject = isObject(target) ? clone(target) : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) Reflect.deleteProperty(out, key);
    else out[key] = applyMergePatch(out[key] ?? null, value);
  }
  return out;
}

/** A patch the server cannot apply: malformed (400) or a failed `test`/missing path (422). */
export class JsonPatchError extends Error {
  constructor(
    message: string,
    readonly status: 400 | 422,
  ) {
    super(message);
    this.name = 'JsonPatchError';
  }
}

/** RFC 6901 JSON Pointer to reference tokens. */
function parsePointer(pointer: string): string[] {
  if (pointer === '') return [];
  if (!pointer.startsWith('/')) throw new JsonPatchError(`Invalid JSON pointer "${pointer}"`, 400);
  return pointer
    .slice(1)
    .split('/')
    .map((token) => token.replace(/~1/g, '/').replace(/~0/g, '~'));
}

function arrayIndex(
  array: JsonValue[],
  token: string,
  forInsert: boolean,
  pointer: string,
): number {
  if (forInsert && token === '-') return array.length;
  if (!/^(0|[1-9]\d*)$/.test(token))
    throw new JsonPatchError(`Invalid array index in "${pointer}"`, 422);
  const index = Number(token);
  if (index > array.length || (!forInsert && index === array.length)) {
    throw new JsonPatchError(`Array index out of range in "${pointer}"`, 422);
  }
  return index;
}

function getAt(document: JsonValue, pointer: string): JsonValue {
  let current: JsonValue = document;
  for (const token of parsePointer(pointer)) {
    if (Array.isArray(current)) {
      current = current[arrayIndex(current, token, false, pointer)] as JsonValue;
    } else if (isObject(current) && Object.hasOwn(current, token)) {
      current = current[token] as JsonValue;
    } else {
      throw new JsonPatchError(`Path "${pointer}" does not exist`, 422);
    }
  }
  return current;
}

/** The container and last token of a pointer (the root has none). */
function parentOf(document: JsonValue, pointer: string): { parent: JsonValue; token: string } {
  const tokens = parsePointer(pointer);
  const token = tokens.pop();
  if (token === undefined) throw new JsonPatchError('The root cannot be added to or removed', 422);
  const parentPointer = tokens
    .map((t) => `/${t.replace(/~/g, '~0').replace(/\//g, '~1')}`)
    .join('');
  return { parent: getAt(document, parentPointer), token };
}

function add(document: JsonValue, pointer: string, value: JsonValue): JsonValue {
  if (pointer === '') return value;
  const { parent, token } = parentOf(document, pointer);
  if (Array.isArray(parent)) parent.splice(arrayIndex(parent, token, true, pointer), 0, value);
  else if (isObject(parent)) parent[token] = value;
  else throw new JsonPatchError(`Path "${pointer}" has no container`, 422);
  return document;
}

function remove(document: JsonValue, pointer: string): JsonValue {
  const { parent, token } = parentOf(document, pointer);
  if (Array.isArray(parent)) parent.splice(arrayIndex(parent, token, false, pointer), 1);
  else if (isObject(parent) && Object.hasOwn(parent, token)) Reflect.deleteProperty(parent, token);
  else throw new JsonPatchError(`Path "${pointer}" does not exist`, 422);
  return document;
}

/** Structural equality of JSON values (member order ignored). */
export function jsonEqual(a: JsonValue, b: JsonValue): boolean {
  if (a === b) return true;
  if (Array.isArray(a) && Array.isArray(b)) {
    return a.length === b.length && a.every((v, i) => jsonEqual(v, b[i] as JsonValue));
  }
  if (isObject(a) && isObject(b)) {
    const keys = Object.keys(a);
    return (
      keys.length === Object.keys(b).length &&
      keys.every((k) => Object.hasOwn(b, k) && jsonEqual(a[k] as JsonValue, b[k] as JsonValue))
    );
  }
  return false;
}

/** RFC 6902 JSON Patch: every operation in order, all or nothing (the input is not changed). */
export function applyJsonPatch(target: JsonValue, operations: JsonValue): JsonValue {
  if (!Array.isArray(operations))
    throw new JsonPatchError('A JSON patch must be an array of operations', 400);
  let document = clone(target);
  for (const operation of operations) {
    if (
      !isObject(operation) ||
      typeof operation['op'] !== 'string' ||
      typeof operation['path'] !== 'string'
    ) {
      throw new JsonPatchError('Every JSON patch operation needs "op" and "path"', 400);
    }
    const { op, path } = operation as { op: string; path: string };
    const value = operation['value'];
    const from = operation['from'];
    const needValue = (): JsonValue => {
      if (value === undefined)
        throw new JsonPatchError(`Operation "${op}" on "${path}" needs "value"`, 400);
      return clone(value);
    };
    const needFrom = (): string => {
      if (typeof from !== 'string')
        throw new JsonPatchError(`Operation "${op}" on "${path}" needs "from"`, 400);
      return from;
    };
    switch (op) {
      case 'add':
        document = add(document, path, needValue());
        break;
      case 'remove':
        document = remove(document, path);
        break;
      case 'replace':
        getAt(document, path);
        document = path === '' ? needValue() : add(remove(document, path), path, needValue());
        break;
      case 'move': {
        const source = needFrom();
        const moved = clone(getAt(document, source));
        document = add(remove(document, source), path, moved);
        break;
      }
      case 'copy':
        document = add(document, path, clone(getAt(document, needFrom())));
        break;
      case 'test':
        if (!jsonEqual(getAt(document, path), needValue())) {
          throw new JsonPatchError(`Test of "${path}" failed`, 422);
        }
        break;
      default:
        throw new JsonPatchError(`Unknown JSON patch operation "${op}"`, 400);
    }
  }
  return document;
}
