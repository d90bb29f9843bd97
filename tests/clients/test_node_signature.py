"""The Node client signs as Python does (clients/node/signature.mjs, which produce_and_ask.mjs signs
with, against memstream.schemas.signature): the same header bit for bit for the same key, value and
MEMSTREAM_TENANT_WRITE_SECRETS, the first listed key id of a tenant signing. Node only, no npm
package, no Kafka."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError
from pydantic_settings import SettingsError

from memstream.config import Settings
from memstream.schemas.signature import HEADER, digest, sign, signature_problem

SIGNATURE_MJS = Path(__file__).resolve().parents[2] / "clients" / "node" / "signature.mjs"
# Key ids "2" before "1": a JavaScript object would list them the other way round. The secrets'
# non-ASCII characters come as they are and as JSON escapes (key ids stay ASCII: a verifying worker
# reads the header as ASCII).
SECRETS = (
    '{"acme": {"2": "acme-secret-2026-12-\u00e9\u00e8", "1": "acme-secret-2026-06-x"},\n'
    ' "b\u00fccher": {"k2": "b\\u00fccher-secret-\\ud83d\\udcda-2026"}, "evil": {"e1": "evil-secret-2026-12-x"}}'
)
RECORDS = [
    ("acme/conv-1", '{"kind":"turn","tenant_id":"acme","text":"hello"}'),
    ("acme/conv-1", '{"kind":"turn","tenant_id":"acme","text":"Ça coûte 5 €, 日本語 und 🐕"}'),
    ("acme/conv-1{", '"kind":"turn"}'),  # bytes moved from value to key: another signature
    ("acme/Ça/va", ""),
    ("bücher/Σ conv", '{"kind":"query","question":"Wo ist Løkke? \\u00e9"}'),
    ("evil/c", "x" * 70_000),
    ("nosecret/c", '{"kind":"turn"}'),  # no secret of this tenant: unsigned
    ("no-slash", '{"kind":"turn"}'),  # no tenant at all: unsigned
]
# What the test runs in Node: the records signed as raw bytes and as kafkajs messages of strings.
NODE_PROGRAM = """
import { readFileSync } from "node:fs";
import { digest, parseWriteSecrets, recordSignature, signedMessage } from "%s";
const { secrets, records } = JSON.parse(readFileSync(0, "utf8"));
const held = parseWriteSecrets(secrets);
const bytes = (hex) => Buffer.from(hex, "hex");
process.stdout.write(JSON.stringify({
  order: [...held].map(([tenant, keys]) => [tenant, keys.map(([keyId]) => keyId)]),
  signatures: records.map(({ key, value }) => recordSignature(held, bytes(key), bytes(value))),
  messages: records.map(({ keyText, valueText }) => {
    const message = signedMessage(held, keyText, valueText);
    return { key: message.key.toString("hex"), value: message.value.toString("hex"), headers: message.headers ?? null };
  }),
  digest: digest(bytes("00ff"), bytes("c3"), bytes("")),
}));
"""


@pytest.fixture(scope="module")
def node() -> str:
    node = shutil.which("node")
    if not node:
        pytest.skip(
            "Node.js is not on PATH (the Node client's own test, tests/integration/test_node_client.py, needs it)"
        )
    return node


def in_node(node: str, program: str, given: dict) -> dict:
    done = subprocess.run(
        [node, "--input-type=module", "-e", program % SIGNATURE_MJS.as_uri()],
        input=json.dumps(given),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_node_signs_every_record_exactly_as_python_with_the_first_listed_secret(node, monkeypatch):
    monkeypatch.setenv("MEMSTREAM_TENANT_WRITE_SECRETS", SECRETS)
    secrets = Settings().write_secrets  # as the workers and the Python clients read the variable
    records = [{"key": k.encode().hex(), "value": v.encode().hex(), "keyText": k, "valueText": v} for k, v in RECORDS]
    got = in_node(node, NODE_PROGRAM, {"secrets": SECRETS, "records": records})

    assert got["order"] == [[tenant, [key_id for key_id, _ in keys]] for tenant, keys in secrets.items()]
    assert got["order"][0] == ["acme", ["2", "1"]]
    expected = []
    for key, value in RECORDS:
        signed = sign(secrets, key.encode(), value.encode())
        expected.append(signed[1].decode() if signed else None)
    assert got["signatures"] == expected
    assert expected[0].startswith("2:") and expected[-2:] == [None, None]
    assert len(set(expected[:6])) == 6
    # The message kafkajs sends is the UTF-8 of the strings, its one header the signature of those bytes.
    assert got["messages"] == [
        {"key": r["key"], "value": r["value"], "headers": {HEADER: signature} if signature else None}
        for r, signature in zip(records, expected)
    ]
    for (key, value), signature in zip(RECORDS[:6], expected):
        assert signature_problem(secrets, key.encode(), value.encode(), signature.encode()) is None
    assert got["digest"] == digest(b"\x00\xff", b"\xc3", b"")  # bytes that are no UTF-8 too


REFUSES = """
import { readFileSync } from "node:fs";
import { parseWriteSecrets } from "%s";
const said = (text) => {
  try {
    return { tenants: [...parseWriteSecrets(text).keys()] };
  } catch (err) {
    return { error: err.message };
  }
};
process.stdout.write(JSON.stringify(JSON.parse(readFileSync(0, "utf8")).texts.map(said)));
"""


def test_node_reads_an_unset_variable_as_no_secrets_and_refuses_what_python_refuses(node, monkeypatch):
    texts = [
        "",
        "  ",
        "{}",
        "{not json",
        '["acme"]',
        '{"acme": "a-secret-of-sixteen"}',
        '{"acme": {}}',
        '{"acme": {"a:b": "a-secret-of-sixteen"}}',
        '{"acme": {"": "a-secret-of-sixteen"}}',
        '{"acme": {"k1": "short"}}',
        '{"acme": {"k1": 1234567890123456789}}',
    ]
    got = in_node(node, REFUSES, {"texts": texts})
    assert got[:3] == [{"tenants": []}] * 3
    reasons = [g.get("error", "") for g in got[3:]]
    assert "is not JSON" in reasons[0]
    shape = "must be a JSON object {tenant: {key id: secret}}"
    assert all(shape in r for r in reasons[1:3]) and shape in reasons[7], reasons
    assert "has no secret" in reasons[3]
    assert "no ':'" in reasons[4] and "non-empty" in reasons[5] and "shorter than 16" in reasons[6]
    for text in texts[3:]:
        monkeypatch.setenv("MEMSTREAM_TENANT_WRITE_SECRETS", text)
        with pytest.raises((ValidationError, SettingsError)):
            Settings()
