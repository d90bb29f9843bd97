"""Normalise a JSON Schema into the subset llama-cpp-py-sync's GBNF converter accepts.

The converter (``llama_cpp_py_sync.constraints``) is strict: it rejects ``$ref``, ``allOf``, value
constraints such as ``format``/``pattern``/``minimum`` and ``additionalProperties`` beside
``properties``, all of which pydantic and the ``openai`` client emit routinely. This module rewrites a
schema so that the grammar keeps its structure (objects, arrays, enums, unions, string lengths):

* ``$ref`` to ``#/$defs/...`` or ``#/definitions/...`` (any local JSON pointer) is inlined; a recursive
  reference cannot be unrolled into a finite grammar and is an error;
* ``allOf`` with one member is merged into its parent (pydantic's old way of adding a description to a
  reference); more members are an error;
* keywords that only narrow the accepted values are dropped: the grammar then accepts a little more
  than the schema, and the caller validates the parsed output anyway (as it must for any server);
* ``additionalProperties`` is dropped where ``properties`` exist (the grammar emits only the declared
  properties, which every value of ``additionalProperties`` allows), and a schema-valued
  ``additionalProperties`` without ``properties`` (``dict[str, X]``) becomes "any object".
"""

from __future__ import annotations

from typing import Any, Mapping

# Value constraints the converter rejects. Dropping one widens the grammar; it never makes the grammar
# reject output the schema accepts.
_NARROWING = frozenset(
    {
        "format",
        "pattern",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "uniqueItems",
        "minProperties",
        "maxProperties",
        "propertyNames",
        "patternProperties",
        "unevaluatedProperties",
        "contains",
        "minContains",
        "maxContains",
        "dependentRequired",
    }
)
_LENGTH = ("minLength", "maxLength")  # the converter supports these on strings only
_DEFINITIONS = ("$defs", "definitions")
_MAX_NODES = 20_000  # inlining repeated references can blow up; a schema this large is a mistake


class SchemaError(ValueError):
    """The schema cannot be turned into a grammar; the message says why (sent back as an HTTP 400)."""


def normalise(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` that the GBNF converter accepts (see the module docstring)."""
    if not isinstance(schema, Mapping):
        raise SchemaError("the JSON schema must be an object")
    return _Normaliser(schema).node(schema, path="#", refs=())


class _Normaliser:
    def __init__(self, root: Mapping[str, Any]):
        self.root = root
        self.nodes = 0

    def node(self, schema: Any, *, path: str, refs: tuple[str, ...]) -> dict[str, Any]:
        schema = _as_object(schema, path)
        self.nodes += 1
        if self.nodes > _MAX_NODES:
            raise SchemaError(f"the schema expands to more than {_MAX_NODES} nodes")
        out = {k: v for k, v in schema.items() if k not in _DEFINITIONS}
        if "$ref" in out:
            ref = out.pop("$ref")
            # Keywords beside the reference (description, default, ...) stay; the target's win on a
            # clash, since they carry the structure.
            out = {**out, **self._resolve(ref, path=path, refs=refs)}
            return self.node(out, path=path, refs=refs + (ref,))
        if "allOf" in out:
            return self.node(_merge_all_of(out, path=path), path=path, refs=refs)
        types = out.get("type")
        if isinstance(types, list) and len(types) == 1:
            out["type"] = types = types[0]
        if isinstance(types, list) and len(types) > 1:
            # The converter makes one copy per type too, but keeps string-only keywords in every copy.
            alternatives = [{**out, "type": t} for t in types]
            return {"anyOf": [self.node(a, path=f"{path}/type/{i}", refs=refs) for i, a in enumerate(alternatives)]}

        for key in _NARROWING:
            out.pop(key, None)
        if out.get("type") != "string":
            for key in _LENGTH:
                out.pop(key, None)
        if "properties" in out:
            out.pop("additionalProperties", None)
        elif isinstance(out.get("additionalProperties"), Mapping):
            out["additionalProperties"] = True

        if isinstance(out.get("properties"), Mapping):
            out["properties"] = {
                name: self.node(sub, path=f"{path}/properties/{name}", refs=refs)
                for name, sub in out["properties"].items()
            }
        if isinstance(out.get("items"), Mapping):  # a boolean ``items`` the converter reads as is
            out["items"] = self.node(out["items"], path=f"{path}/items", refs=refs)
        for key in ("anyOf", "oneOf", "prefixItems"):
            if isinstance(out.get(key), list):
                out[key] = [self.node(sub, path=f"{path}/{key}/{i}", refs=refs) for i, sub in enumerate(out[key])]
        return out

    def _resolve(self, ref: Any, *, path: str, refs: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise SchemaError(f"{path}: only local references (#/...) are supported, not {ref!r}")
        if ref in refs:
            raise SchemaError(f"{path}: recursive reference {ref} cannot be turned into a finite grammar")
        node: Any = self.root
        for raw in [p for p in ref[1:].split("/") if p]:
            part = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise SchemaError(f"{path}: reference {ref} points at nothing")
        return dict(_as_object(node, ref))


def _as_object(schema: Any, path: str) -> Mapping[str, Any]:
    if schema is True:
        return {}
    if schema is False:
        raise SchemaError(f"{path}: the schema `false` accepts nothing")
    if not isinstance(schema, Mapping):
        raise SchemaError(f"{path}: a schema must be an object or a boolean")
    return schema


def _merge_all_of(schema: dict[str, Any], *, path: str) -> dict[str, Any]:
    members = schema.pop("allOf")
    if not isinstance(members, list) or len(members) != 1:
        raise SchemaError(f"{path}: allOf is supported with exactly one member")
    member = _as_object(members[0], f"{path}/allOf/0")
    clash = sorted(k for k in member if k in schema and schema[k] != member[k] and k not in _HARMLESS)
    if clash:
        raise SchemaError(f"{path}: the allOf member conflicts with its parent on {', '.join(clash)}")
    return {**schema, **member}


_HARMLESS = frozenset({"title", "description", "default", "examples", "$comment"})
