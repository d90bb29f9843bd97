"""Reading structured (JSON-schema) LLM output, shared by every stage that asks for it."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterable, Mapping, Sequence, TypeVar

from pydantic import BaseModel, ValidationError

from memstream.ports import LLM, LLMError, LlmResult
from memstream.schemas import StageCost
from memstream.schemas.base import json_object

Model = TypeVar("Model", bound=BaseModel)


def repair_user(error: str) -> str:
    return f"That output was invalid: {error}\nReturn corrected JSON that follows the schema exactly."


def strings_schema(max_items: int, max_length: int) -> dict:
    return {"type": "array", "items": {"type": "string", "maxLength": max_length}, "maxItems": max_items}


def one_of_schema(values: Sequence[str], max_items: int) -> dict:
    return {"type": "array", "items": {"type": "string", "enum": list(values)}, "minItems": 1, "maxItems": max_items}


def text_schema(max_length: int, min_length: int = 0) -> dict:
    return {"type": "string", "maxLength": max_length, **({"minLength": min_length} if min_length else {})}


def parse_output(result: LlmResult, model: type[Model], error: type[Exception]) -> Model:
    """The result's JSON object validated as ``model``; anything else raises ``error`` with a reason
    short enough to send back in a repair prompt."""
    data = result.data if result.data is not None else json_object(result.content, error)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise error(f"output does not match the schema: {str(exc)[:500]}") from exc


def clean_strings(items: Iterable[str], limit: int) -> list[str]:
    """Whitespace collapsed, empties and repeats dropped, each at most 200 characters, at most ``limit``."""
    out: list[str] = []
    for item in items:
        item = re.sub(r"\s+", " ", item).strip()[:200]
        if item and item not in out:
            out.append(item)
    return out[:limit]


Value = TypeVar("Value")
MIN_CALL_S = 1.0  # an LLM call with less time than this left before its deadline is not started


@dataclass
class Attempt(Generic[Value]):
    """What a structured call produced: the value (None when unusable), every call and token spent,
    the last reason it was unusable, and whether a repair was asked for."""

    value: Value | None
    cost: StageCost
    error: str = ""
    repaired: bool = False
    llm_error: LLMError | None = None  # the request itself failed (as opposed to unusable output)


def call_with_repair(
    llm: LLM,
    messages: Sequence[Mapping[str, str]],
    *,
    stage: str,
    schema: Mapping[str, Any],
    schema_name: str,
    max_tokens: int,
    read: Callable[[LlmResult], Value],
    invalid: type[Exception],
    echo_chars: int = 2000,
    timeout_s: float | None = None,
) -> Attempt[Value]:
    """One JSON-schema call; output ``read`` rejects (by raising ``invalid``) gets one repair call
    that shows the model its output and the reason. A failed request counts as a call (it was made;
    its tokens are unknown). ``timeout_s`` bounds both calls together: no repair without time left."""
    history = list(messages)
    attempt: Attempt[Value] = Attempt(None, StageCost(stage=stage, model=llm.model))
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    for turn in range(2):
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining < MIN_CALL_S:
            attempt.error = attempt.error or "no time left for the call"
            return attempt
        try:
            result = llm.complete(
                history, json_schema=schema, schema_name=schema_name, max_tokens=max_tokens, timeout_s=remaining
            )
        except LLMError as exc:
            attempt.cost = attempt.cost + StageCost(stage=stage, calls=1)
            attempt.error = f"llm error: {exc}"
            attempt.llm_error = exc
            return attempt
        attempt.cost = attempt.cost + StageCost(
            stage=stage,
            calls=1,
            prompt_tokens=result.prompt_tokens,
            completion_tokens=result.completion_tokens,
            model=result.model,
        )
        try:
            attempt.value = read(result)
            return attempt
        except invalid as exc:
            attempt.error = str(exc)
            if turn == 0:
                attempt.repaired = True
                history += [
                    {"role": "assistant", "content": result.content[:echo_chars]},
                    {"role": "user", "content": repair_user(attempt.error)},
                ]
    return attempt


def chat(system: str, user: str) -> list[dict[str, str]]:
    """The messages of a one-turn call: the instructions, then the input."""
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


@dataclass(frozen=True)
class StructuredCall(Generic[Model]):
    """One kind of JSON-schema call, declared once: the stage its cost is billed to, the schema's
    name, the model its output must validate as, the error unusable output raises (its message goes
    back in the repair prompt) and how much of the output that prompt quotes."""

    stage: str
    schema_name: str
    output: type[Model]
    invalid: type[Exception]
    echo_chars: int = 2000

    def parse(self, result: LlmResult) -> Model:
        return parse_output(result, self.output, self.invalid)

    def ask(
        self,
        llm: LLM,
        messages: Sequence[Mapping[str, str]],
        schema: Mapping[str, Any],
        *,
        max_tokens: int,
        read: Callable[[LlmResult], Value],
        timeout_s: float | None = None,
    ) -> Attempt[Value]:
        """:func:`call_with_repair` for this kind of call; ``read`` starts from :meth:`parse`."""
        return call_with_repair(
            llm,
            messages,
            stage=self.stage,
            schema=schema,
            schema_name=self.schema_name,
            max_tokens=max_tokens,
            read=read,
            invalid=self.invalid,
            echo_chars=self.echo_chars,
            timeout_s=timeout_s,
        )
