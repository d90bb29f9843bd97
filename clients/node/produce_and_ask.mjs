#!/usr/bin/env node
// A memstream client in Node.js, written against the wire contract only (schemas/json/*.schema.json):
//
//   produce  LoCoMo-format conversation JSON -> Turn payloads on <prefix>.turns, keyed tenant/conversation
//   ask      a Query on <prefix>.queries; prints the Reply (one JSON line on stdout)
//   validate FILE KIND  checks a JSON payload (or JSON lines) as KIND (turn, query, reply, ...; auto: each one's kind)
//
// Every payload is validated with ajv against its schema before it is produced; an invalid one is
// refused (ajv's errors on stderr, exit 1) and nothing is sent.
//
// Options (flags win over the environment):
//   --bootstrap HOST:PORT[,..]  MEMSTREAM_KAFKA_BOOTSTRAP  (127.0.0.1:9092)
//   --prefix P                  MEMSTREAM_TOPIC_PREFIX     (memory): topics are <prefix>.<name>
//   --tenant T                  MEMSTREAM_TENANT           (required for produce and ask)
//   --conversation C            default: the LoCoMo sample_id (required for ask)
//   --locomo FILE [--sample ID] [--sessions N]             produce: the conversation (first sample by default)
//   --question Q [--reply-topic T] [--wait-ms MS] [--profile auto|lookup|compose|replay]
//   [--k N] [--answer]                                     ask: default reply topic <prefix>.replies,
//                                                          evidence only unless --answer
//   --timeout-ms MS             how long to wait for the reply (ask; it is the query's deadline) and
//                               for the broker (60000)
//   --schemas DIR               MEMSTREAM_SCHEMAS_DIR      (../../schemas/json from this file)
//   broker security: MEMSTREAM_KAFKA_SECURITY_PROTOCOL, _SASL_MECHANISM, _SASL_USERNAME, _SASL_PASSWORD,
//   _SSL_CAFILE, _SSL_CERTFILE, _SSL_KEYFILE, _SSL_CHECK_HOSTNAME (as for the Python clients)
//   MEMSTREAM_TENANT_WRITE_SECRETS  JSON {tenant: {key id: secret}}, as for the Python clients: every
//                               turn and query whose key's tenant has a secret there carries the
//                               memstream-signature header, made with the tenant's first listed secret
//                               (signature.mjs; docs/wire-contract.md, "Headers"). Workers configured
//                               with tenant write secrets dead-letter unsigned records. Unset: unsigned.
//
// Exit status: 0 done; 1 a payload failed its schema (refused, or an invalid reply); 2 bad usage or
// input; 3 Kafka error or no reply in time; 4 the reply says ok=false (it is printed all the same).
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import kafkajs from "kafkajs";

import { parseWriteSecrets, signedMessage } from "./signature.mjs";

const { Kafka, Partitioners, logLevel } = kafkajs;

const HERE = path.dirname(fileURLToPath(import.meta.url));
const EXIT = { invalid: 1, usage: 2, kafka: 3, notOk: 4 };

class Exit extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

// --- the contract --------------------------------------------------------------------------------

function loadContract(dir) {
  const index = JSON.parse(readFileSync(path.join(dir, "index.json"), "utf8"));
  const ajv = new Ajv2020({ allErrors: true, strict: true });
  addFormats(ajv);
  const validators = {};
  for (const [kind, entry] of Object.entries(index.payloads)) {
    const schema = JSON.parse(readFileSync(path.join(dir, entry.file), "utf8"));
    validators[kind] = ajv.compile(schema);
  }
  return { index, validators };
}

/** ajv's errors of `payload` as a `kind`, one line each (none: it is valid). */
function schemaErrors(contract, kind, payload) {
  const validate = contract.validators[kind];
  if (!validate) throw new Exit(EXIT.usage, `unknown payload kind ${JSON.stringify(kind)}; known: ${Object.keys(contract.validators).join(", ")}`);
  if (validate(payload)) return [];
  return validate.errors.map((e) => `${e.instancePath || "/"} ${e.message}${e.params ? " " + JSON.stringify(e.params) : ""}`);
}

/** Throws Exit(1) with ajv's errors unless `payload` is a valid `kind`. */
function check(contract, kind, payload, what) {
  const errors = schemaErrors(contract, kind, payload);
  if (errors.length) {
    throw new Exit(EXIT.invalid, `${what}: not a valid ${kind} (schema version ${contract.index.schema_version}), refused:\n  ${errors.join("\n  ")}`);
  }
}

function topicName(prefix, name) {
  return `${prefix}.${name}`; // memstream.config.Settings.topic
}

// Timestamps as memstream writes them: UTC, "Z", no fraction when it is zero.
function isoUtc(ms) {
  return new Date(ms).toISOString().replace(/\.000Z$/, "Z");
}

// --- LoCoMo -> Turn (memstream.datasets.locomo_turns) ----------------------------------------------

const MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december"];
const LOCOMO_DT = /^\s*(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*$/i;

/** '1:56 pm on 8 May, 2023' -> epoch ms (UTC), as processors.timeparse.parse_locomo_datetime. */
function parseLocomoDate(value) {
  const m = LOCOMO_DT.exec(String(value ?? ""));
  if (!m) throw new Exit(EXIT.usage, `unrecognised LoCoMo date ${JSON.stringify(value)}`);
  const [, hour, minute, ampm, day, monthWord, year] = m;
  const w = monthWord.toLowerCase().replace(/\.+$/, "");
  let month = MONTHS.indexOf(w);
  if (month < 0) month = MONTHS.findIndex((name) => name.slice(0, 3) === w.slice(0, 3));
  const h = (Number(hour) % 12) + (ampm.toLowerCase() === "pm" ? 12 : 0);
  const date = new Date(0);
  date.setUTCFullYear(Number(year), month, Number(day));
  date.setUTCHours(h, Number(minute), 0, 0);
  const exact =
    month >= 0 && Number(year) >= 1 && date.getUTCFullYear() === Number(year) && date.getUTCMonth() === month &&
    date.getUTCDate() === Number(day) && date.getUTCMinutes() === Number(minute);
  if (!exact) throw new Exit(EXIT.usage, `impossible LoCoMo date ${JSON.stringify(value)}`);
  return date.getTime();
}

/** The samples of a LoCoMo file: sessions in number order, each with its date and turns. */
function loadLocomo(file) {
  let data = JSON.parse(readFileSync(file, "utf8"));
  if (!Array.isArray(data)) data = [data];
  return data.map((raw) => {
    const conv = raw.conversation;
    const sessions = [];
    for (const [key, turns] of Object.entries(conv)) {
      const m = /^session_(\d+)$/.exec(key);
      if (!m || !Array.isArray(turns) || turns.length === 0) continue;
      sessions.push({ number: Number(m[1]), dateTime: conv[`${key}_date_time`] ?? "", turns });
    }
    sessions.sort((a, b) => a.number - b.number);
    return { sampleId: raw.sample_id ?? "conv", sessions };
  });
}

/** Turn payloads in order: session S<n>, turn id = dia_id, event time = session date + 30 s per turn,
 * the last turn of each session marked (the STM flushes then). */
function locomoTurns(sample, { tenant, conversation, maxSessions, schemaVersion }) {
  const turns = [];
  let seq = 0;
  for (const session of sample.sessions.slice(0, maxSessions ?? undefined)) {
    const start = parseLocomoDate(session.dateTime);
    session.turns.forEach((t, i) => {
      const captions = t.blip_caption ? [t.blip_caption] : [];
      turns.push({
        kind: "turn",
        schema_version: schemaVersion,  // the contract's (index.json), so a new version needs no edit here
        tenant_id: tenant,
        conversation_id: conversation ?? sample.sampleId,
        session_id: `S${session.number}`,
        turn_id: t.dia_id,
        speaker: t.speaker,
        role: "user",
        text: t.text || (captions.length ? `[image] ${captions[0]}` : "[empty]"),
        event_time: isoUtc(start + 30_000 * i),
        image_captions: captions,
        metadata: { seq, session_number: session.number },
        last_in_session: i === session.turns.length - 1,
      });
      seq += 1;
    });
  }
  return turns;
}

// --- Kafka ---------------------------------------------------------------------------------------

function kafkaClient(opts) {
  const toStderr = () => ({ level, log }) => {
    const { message, timestamp, logger, ...extra } = log;
    const name = { [logLevel.ERROR]: "ERROR", [logLevel.WARN]: "WARN", [logLevel.INFO]: "INFO" }[level] ?? "DEBUG";
    process.stderr.write(`kafkajs ${name}: ${message} ${JSON.stringify(extra)}\n`);
  };
  return new Kafka({
    clientId: "memstream-node",
    brokers: opts.bootstrap.split(",").map((b) => b.trim()).filter(Boolean),
    logLevel: logLevel.WARN,
    logCreator: toStderr,
    ...securityOptions(process.env),
  });
}

// The broker's security, from the same MEMSTREAM_KAFKA_* variables the Python clients read.
function securityOptions(env) {
  const protocol = (env.MEMSTREAM_KAFKA_SECURITY_PROTOCOL ?? "PLAINTEXT").toUpperCase();
  const out = {};
  if (protocol === "SSL" || protocol === "SASL_SSL") {
    out.ssl = { rejectUnauthorized: true };
    if (env.MEMSTREAM_KAFKA_SSL_CAFILE) out.ssl.ca = [readFileSync(env.MEMSTREAM_KAFKA_SSL_CAFILE, "utf8")];
    if (env.MEMSTREAM_KAFKA_SSL_CERTFILE) out.ssl.cert = readFileSync(env.MEMSTREAM_KAFKA_SSL_CERTFILE, "utf8");
    if (env.MEMSTREAM_KAFKA_SSL_KEYFILE) out.ssl.key = readFileSync(env.MEMSTREAM_KAFKA_SSL_KEYFILE, "utf8");
    if ((env.MEMSTREAM_KAFKA_SSL_CHECK_HOSTNAME ?? "true").toLowerCase() === "false") {
      out.ssl.checkServerIdentity = () => undefined;
    }
  }
  if (protocol.startsWith("SASL_")) {
    out.sasl = {
      mechanism: (env.MEMSTREAM_KAFKA_SASL_MECHANISM ?? "SCRAM-SHA-512").toLowerCase(),
      username: env.MEMSTREAM_KAFKA_SASL_USERNAME ?? "",
      password: env.MEMSTREAM_KAFKA_SASL_PASSWORD ?? "",
    };
  }
  return out;
}

async function produce(opts, contract) {
  if (!opts.locomo) throw new Exit(EXIT.usage, "produce needs --locomo FILE");
  if (!opts.tenant) throw new Exit(EXIT.usage, "produce needs --tenant (or MEMSTREAM_TENANT)");
  const samples = loadLocomo(opts.locomo);
  const sample = opts.sample ? samples.find((s) => s.sampleId === opts.sample) : samples[0];
  if (!sample) throw new Exit(EXIT.usage, `no sample ${JSON.stringify(opts.sample ?? "")} in ${opts.locomo}`);
  const turns = locomoTurns(sample, {
    tenant: opts.tenant,
    conversation: opts.conversation,
    maxSessions: opts.sessions ? Number(opts.sessions) : undefined,
    schemaVersion: contract.index.schema_version,
  });
  // All of them first: a conversation is produced whole or not at all.
  turns.forEach((turn, i) => check(contract, "turn", turn, `turn ${i} (${turn.turn_id})`));
  const topic = topicName(opts.prefix, "turns");
  const kafka = kafkaClient(opts);
  // Idempotent (acks=-1, one request in flight): retries neither duplicate nor reorder turns. The
  // default partitioner is Java's murmur2, as memstream's producers: a conversation keeps one partition.
  const producer = kafka.producer({
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false,
    createPartitioner: Partitioners.DefaultPartitioner,
  });
  await producer.connect();
  try {
    const partitions = new Set();
    for (let i = 0; i < turns.length; i += 500) {
      const batch = turns.slice(i, i + 500);
      const sent = await producer.send({
        topic,
        acks: -1,
        messages: batch.map((t) => signedMessage(opts.writeSecrets, `${t.tenant_id}/${t.conversation_id}`, JSON.stringify(t))),
      });
      sent.forEach((r) => partitions.add(r.partition));
    }
    const conversation = turns[0]?.conversation_id ?? opts.conversation ?? sample.sampleId;
    return { mode: "produce", topic, tenant_id: opts.tenant, conversation_id: conversation, turns: turns.length, partitions: [...partitions] };
  } finally {
    await producer.disconnect();
  }
}

async function ask(opts, contract) {
  for (const need of ["tenant", "conversation", "question"]) {
    if (!opts[need]) throw new Exit(EXIT.usage, `ask needs --${need}`);
  }
  const replyTopic = opts["reply-topic"] || topicName(opts.prefix, "replies");
  const timeoutMs = Number(opts["timeout-ms"] ?? 60_000);
  const sentAt = Date.now();
  const query = {
    kind: "query",
    schema_version: contract.index.schema_version,
    tenant_id: opts.tenant,
    conversation_id: opts.conversation,
    correlation_id: randomUUID().replaceAll("-", ""),
    reply_topic: replyTopic,
    question: opts.question,
    profile: opts.profile ?? "auto",
    answer: Boolean(opts.answer),
    sent_at: isoUtc(sentAt),
    deadline: isoUtc(sentAt + timeoutMs),
  };
  if (opts.k !== undefined) query.k = Number(opts.k);
  check(contract, "query", query, "query"); // before anything touches the broker

  if (opts["wait-ms"]) await new Promise((r) => setTimeout(r, Number(opts["wait-ms"])));
  const kafka = kafkaClient(opts);
  const admin = kafka.admin();
  const producer = kafka.producer({ allowAutoTopicCreation: false, createPartitioner: Partitioners.DefaultPartitioner });
  const groupId = `memstream-node-ask-${query.correlation_id}`;
  const consumer = kafka.consumer({ groupId, allowAutoTopicCreation: false, maxWaitTimeInMs: 50 });
  await Promise.all([admin.connect(), producer.connect(), consumer.connect()]);
  try {
    // The reply topic's end offsets before the query leaves: the reply lies at or after them, so
    // the consumer is sought there explicitly (a fresh group's "latest" is resolved only later).
    const ends = await admin.fetchTopicOffsets(replyTopic);
    let resolve;
    const replied = new Promise((r) => (resolve = r));
    const joined = new Promise((r) => consumer.on(consumer.events.GROUP_JOIN, r));
    await consumer.subscribe({ topics: [replyTopic], fromBeginning: false });
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ message }) => {
        let value;
        try {
          value = JSON.parse(message.value.toString("utf8"));
        } catch {
          return; // not ours to judge
        }
        if (value && value.kind === "reply" && value.correlation_id === query.correlation_id) resolve(value);
      },
    });
    await joined;
    for (const { partition, offset } of ends) consumer.seek({ topic: replyTopic, partition, offset });
    await producer.send({
      topic: topicName(opts.prefix, "queries"),
      acks: -1,
      messages: [signedMessage(opts.writeSecrets, `${query.tenant_id}/${query.conversation_id}`, JSON.stringify(query))],
    });
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Exit(EXIT.kafka, `no reply to query ${query.correlation_id} within ${timeoutMs} ms on ${replyTopic}: is a worker running the 'query' stage?`)), timeoutMs);
    });
    const reply = await Promise.race([replied, timeout]).finally(() => clearTimeout(timer));
    check(contract, "reply", reply, `reply ${query.correlation_id}`);
    return reply;
  } finally {
    await consumer.disconnect().catch(() => {});
    await producer.disconnect().catch(() => {});
    await admin.deleteGroups([groupId]).catch(() => {}); // the group of one question: no leftovers
    await admin.disconnect().catch(() => {});
  }
}

/** FILE holds one JSON payload, or JSON lines; KIND is a payload kind, or "auto" (each one's own `kind`). */
function validateFile(file, kind, contract) {
  if (!file || !kind) throw new Exit(EXIT.usage, "usage: validate FILE KIND|auto");
  const text = readFileSync(file, "utf8");
  let payloads;
  try {
    payloads = [JSON.parse(text)];
  } catch {
    try {
      payloads = text.split("\n").filter((line) => line.trim()).map((line) => JSON.parse(line));
    } catch (err) {
      throw new Exit(EXIT.usage, `${file}: neither JSON nor JSON lines: ${err.message}`);
    }
  }
  const invalid = [];
  payloads.forEach((payload, i) => {
    const as = kind === "auto" ? payload?.kind : kind;
    const known = kind !== "auto" || Object.hasOwn(contract.validators, as);
    const errors = known ? schemaErrors(contract, as, payload) : [`/kind ${JSON.stringify(as)} is no payload kind of the contract`];
    if (errors.length) invalid.push({ index: i, kind: as, errors });
  });
  const result = { mode: "validate", file, kind, checked: payloads.length, valid: payloads.length - invalid.length, invalid };
  if (invalid.length) {
    process.stdout.write(JSON.stringify(result) + "\n");
    const lines = invalid.map((x) => `#${x.index} (${x.kind}):\n    ${x.errors.join("\n    ")}`);
    throw new Exit(EXIT.invalid, `${file}: ${invalid.length} of ${payloads.length} not valid:\n  ${lines.join("\n  ")}`);
  }
  return result;
}

// --- main ----------------------------------------------------------------------------------------

async function main(argv) {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      bootstrap: { type: "string" },
      prefix: { type: "string" },
      tenant: { type: "string" },
      conversation: { type: "string" },
      locomo: { type: "string" },
      sample: { type: "string" },
      sessions: { type: "string" },
      question: { type: "string" },
      "reply-topic": { type: "string" },
      "timeout-ms": { type: "string" },
      "wait-ms": { type: "string" },
      profile: { type: "string" },
      k: { type: "string" },
      answer: { type: "boolean" },
      schemas: { type: "string" },
    },
  });
  const env = process.env;
  const opts = {
    ...values,
    bootstrap: values.bootstrap ?? env.MEMSTREAM_KAFKA_BOOTSTRAP ?? "127.0.0.1:9092",
    prefix: values.prefix ?? env.MEMSTREAM_TOPIC_PREFIX ?? "memory",
    tenant: values.tenant ?? env.MEMSTREAM_TENANT,
    schemas: values.schemas ?? env.MEMSTREAM_SCHEMAS_DIR ?? path.resolve(HERE, "../../schemas/json"),
  };
  const [mode, ...rest] = positionals;
  const contract = loadContract(opts.schemas);
  if (mode === "validate") return validateFile(rest[0], rest[1], contract);
  if (mode !== "produce" && mode !== "ask") {
    throw new Exit(EXIT.usage, "usage: produce_and_ask.mjs produce|ask|validate [options] (see the top of this file)");
  }
  opts.writeSecrets = writeSecrets(env.MEMSTREAM_TENANT_WRITE_SECRETS, opts.tenant);
  // The broker may be down: kafkajs retries, this bounds the whole run (ask: the reply's wait too).
  const limitMs = Number(opts["timeout-ms"] ?? 60_000) + Number(opts["wait-ms"] ?? 0) + 5_000;
  let timer;
  const overdue = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Exit(EXIT.kafka, `${mode}: gave up after ${limitMs} ms (broker ${opts.bootstrap} unreachable?)`)), limitMs);
  });
  const work = mode === "produce" ? produce(opts, contract) : ask(opts, contract);
  return Promise.race([work, overdue]).finally(() => clearTimeout(timer));
}

/** The tenant write secrets this client signs with (before anything touches the broker); a warning
 * when they hold none of `tenant`, whose records then go unsigned. */
function writeSecrets(text, tenant) {
  let secrets;
  try {
    secrets = parseWriteSecrets(text);
  } catch (err) {
    throw new Exit(EXIT.usage, err.message);
  }
  if (secrets.size > 0 && tenant && !secrets.has(tenant)) {
    process.stderr.write(`produce_and_ask: MEMSTREAM_TENANT_WRITE_SECRETS holds no secret of tenant ${JSON.stringify(tenant)}: its records go unsigned\n`);
  }
  return secrets;
}

/** A KafkaJS error in one line or two: what failed and why, with a hint for a missing topic. */
function kafkaMessage(err) {
  let text = `${err.name}: ${err.message}`;
  for (let cause = err.cause; cause; cause = cause.cause) text += `\n  caused by ${cause.name}: ${cause.message}`;
  if (/does not host this topic-partition|UNKNOWN_TOPIC/i.test(text)) {
    text += "\n  (no such topic: is the prefix right and are memstream's topics created, e.g. by a running worker?)";
  }
  return text;
}

// Exit once the output is written: no client connection or timer may keep the process alive.
const finish = (code) => process.stdout.write("", () => process.exit(code));
main(process.argv.slice(2)).then(
  (result) => {
    process.stdout.write(JSON.stringify(result) + "\n");
    finish(result && result.kind === "reply" && result.ok === false ? EXIT.notOk : 0);
  },
  (err) => {
    const known = err instanceof Exit || String(err.code ?? "").startsWith("ERR_PARSE_ARGS");
    const kafkaError = String(err.name ?? "").startsWith("KafkaJS");
    const text = known ? err.message : kafkaError ? kafkaMessage(err) : (err.stack ?? String(err));
    process.stderr.write(`produce_and_ask: ${text}\n`);
    finish(err instanceof Exit ? err.code : kafkaError ? EXIT.kafka : EXIT.usage);
  },
);
