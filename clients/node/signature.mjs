// Records a tenant must prove, from Node.js: the memstream-signature header exactly as
// schemas/signature.py makes it (docs/wire-contract.md, "Headers"). No npm package needed, so
// tests/clients/test_node_signature.py checks it against Python's without node_modules or Kafka.
//
//   header value  <key id>:<hex HMAC-SHA256(secret, DOMAIN + uint32 big-endian len(key) + key + value)>
//   tenant        the record key up to its first "/"; secrets from MEMSTREAM_TENANT_WRITE_SECRETS,
//                 JSON {tenant: {key id: secret}}: the first listed key id of a tenant signs
import { createHmac } from "node:crypto";

export const SIGNATURE_HEADER = "memstream-signature";
// The signed bytes start with this: a signature made for anything else never verifies.
const DOMAIN = Buffer.from("memstream-signature-v1\0", "utf8");

/** Hex HMAC-SHA256 of a record with `secret` (key and value: Buffers, or strings as UTF-8). */
export function digest(secret, key, value) {
  const keyBytes = Buffer.from(key);
  const length = Buffer.alloc(4);
  length.writeUInt32BE(keyBytes.length);
  // The key's length is signed too, so key and value cannot trade bytes.
  return createHmac("sha256", Buffer.from(secret)).update(DOMAIN).update(length).update(keyBytes).update(Buffer.from(value)).digest("hex");
}

/** The tenant a record key ("tenant/conversation") names; null: no such key. */
export function keyTenant(key) {
  const text = Buffer.from(key ?? "").toString("utf8");
  const slash = text.indexOf("/");
  return slash < 0 ? null : text.slice(0, slash);
}

/** The signature header's value for a record, made with the first secret of its key's tenant;
 * null when `secrets` holds none of that tenant (the record goes unsigned, and a verifying worker
 * dead-letters it). */
export function recordSignature(secrets, key, value) {
  const tenant = keyTenant(key);
  const keys = tenant === null ? undefined : secrets.get(tenant);
  if (!keys || keys.length === 0) return null;
  const [keyId, secret] = keys[0];
  return `${keyId}:${digest(secret, key, value)}`;
}

/** A kafkajs message of `key` and `value` (strings: sent as UTF-8), signed when `secrets` holds a
 * secret of the key's tenant: the bytes signed are the bytes sent. */
export function signedMessage(secrets, key, value) {
  const message = { key: Buffer.from(key, "utf8"), value: Buffer.from(value, "utf8") };
  const signature = recordSignature(secrets, message.key, message.value);
  if (signature !== null) message.headers = { [SIGNATURE_HEADER]: signature };
  return message;
}

/** MEMSTREAM_TENANT_WRITE_SECRETS's text as Map(tenant -> [[key id, secret]]), in the order the JSON
 * lists them (as Python reads it: a plain object would put key ids like "2" before "1"). Unset or
 * blank: no secrets. Throws an Error saying what is wrong with a malformed value. */
export function parseWriteSecrets(text) {
  if (text === undefined || text === null || !text.trim()) return new Map();
  const name = "MEMSTREAM_TENANT_WRITE_SECRETS";
  try {
    JSON.parse(text);
  } catch (err) {
    throw new Error(`${name} is not JSON: ${err.message}`);
  }
  const shape = `${name} must be a JSON object {tenant: {key id: secret}}`;
  const secrets = new Map();
  for (const [tenant, keys] of orderedObject(text, shape)) {
    if (!(keys instanceof Map) || keys.size === 0) throw new Error(`${shape}: tenant ${JSON.stringify(tenant)} has no secret`);
    for (const [keyId, secret] of keys) {
      if (!keyId || keyId.includes(":")) throw new Error(`${name}: key id ${JSON.stringify(keyId)} must be non-empty, no ':'`);
      if ([...secret].length < 16) throw new Error(`${name}: secret ${JSON.stringify(keyId)} of tenant ${JSON.stringify(tenant)} is shorter than 16`);
    }
    secrets.set(tenant, [...keys]);
  }
  return secrets;
}

// Valid JSON (checked before) whose top level is an object of objects of strings, read in source
// order: objects become Maps (a repeated name keeps its first place and its last value, as Python's
// dict); anything else in that shape is refused.
function orderedObject(text, shape) {
  let at = 0;
  const skip = () => {
    while (at < text.length && " \t\n\r".includes(text[at])) at += 1;
  };
  const string = () => {
    const match = /^"(?:[^"\\]|\\.)*"/s.exec(text.slice(at));
    if (!match) throw new Error(shape);
    at += match[0].length;
    return JSON.parse(match[0]);
  };
  const value = (depth) => {
    skip();
    if (text[at] === '"' && depth > 0) return string();
    if (text[at] !== "{" || depth > 1) throw new Error(shape);
    at += 1;
    const entries = new Map();
    skip();
    if (text[at] === "}") {
      at += 1;
      return entries;
    }
    for (;;) {
      skip();
      const name = string();
      skip();
      at += 1; // the ":"
      entries.set(name, value(depth + 1));
      skip();
      if (text[at++] === "}") return entries;
    }
  };
  return value(0);
}
