"""One llama.cpp model (through llama-cpp-py-sync) generating one chat completion at a time.

We drive the library's building blocks rather than its ``Llama.create_chat_completion``, which (in the
pinned 0.11739) tokenizes the templated prompt with ``parse_special=False``: the chat template's
``<|im_start|>``/``<|im_end|>`` then reach the model as plain text (54 prompt tokens instead of 26 for a
short SmolLM2 chat, and the model answers with a literal "<|im_end|>" it cannot stop on). It also reports
neither token counts nor a "length" finish. The helpers used here are underscored members of ``Llama``;
the version is pinned exactly and tests/localllm/test_server_model.py exercises every one of them.
"""

from __future__ import annotations

import codecs
import logging
import threading
import time
from typing import Any, Callable, Mapping, Sequence

from .protocol import Completion, FinishReason, Sampling

log = logging.getLogger("memstream.localllm")

REPEAT_LAST_N = 64  # the repeat-penalty window, as llama-cpp-python's server had it
_CACHE_KEY = "server"  # one cache for all requests: Llama keys its prefix reuse by session


class ContextLengthExceeded(ValueError):
    def __init__(self, prompt_tokens: int, n_ctx: int):
        super().__init__(f"{prompt_tokens} prompt tokens leave no room in a context of {n_ctx}")
        self.prompt_tokens = prompt_tokens
        self.n_ctx = n_ctx


class GrammarRejected(ValueError):
    """llama.cpp could not parse the grammar made from the request's response_format."""


class ClientGone(Exception):
    """The request's client closed its connection: nobody reads what the model would generate."""


def _staying() -> bool:
    return False


class Engine:
    """Thread-safe: ``complete`` holds one lock for the whole generation (one model, one KV cache)."""

    def __init__(
        self,
        model_path: str,
        *,
        n_ctx: int,
        n_threads: int,
        n_threads_batch: int | None = None,
        n_batch: int = 512,
        quiet: bool = True,
    ):
        from . import native

        native.use_compatible_libraries()
        from llama_cpp_py_sync import Llama

        if quiet:
            _silence_llama_log()
        self._llm: Any = Llama(
            model_path,
            n_ctx=n_ctx,
            n_batch=n_batch,
            n_threads=n_threads,
            n_threads_batch=n_threads_batch or n_threads,
        )
        lib = self._llm._lib
        # Llama() enables embeddings for its audio features; llama.cpp then makes every prompt token an
        # output ("embeddings required but some input tokens were not marked as outputs -> overriding"),
        # work a chat completion never reads.
        lib.llama_set_embeddings(self._llm._ctx, False)
        self._is_eog = lambda token: bool(lib.llama_vocab_is_eog(self._llm._vocab, token))
        self.n_ctx: int = int(self._llm.n_ctx)
        self._lock = threading.Lock()

    def prompt_tokens(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """The chat template (from the GGUF) applied and tokenized as the model will see it."""
        prompt, _ = self._llm._format_chat_prompt(messages)
        return list(self._llm.tokenize(prompt, add_special=True, parse_special=True))

    def count_tokens(self, text: str) -> int:
        """Tokens of plain text (no special tokens), as a completion of that text would count."""
        return len(self._llm.tokenize(text, add_special=False, parse_special=False))

    def complete(
        self, messages: Sequence[Mapping[str, str]], sampling: Sampling, gone: Callable[[], bool] = _staying
    ) -> Completion:
        """``gone``: whether the client has left. A request whose client left while it waited for the
        model is not run, and one whose client leaves while it decodes stops there (a killed worker's
        calls would otherwise hold the one model for the calls its successor repeats)."""
        with self._lock:
            if gone():
                raise ClientGone("the client left before the model was free")
            return self._complete(messages, sampling, gone)

    def _complete(
        self, messages: Sequence[Mapping[str, str]], sampling: Sampling, gone: Callable[[], bool]
    ) -> Completion:
        llm = self._llm
        tokens = self.prompt_tokens(messages)
        room = self.n_ctx - len(tokens)
        if room < 1:
            raise ContextLengthExceeded(len(tokens), self.n_ctx)
        # Like llama-cpp-python's server, a max_tokens past the window is cut to it (finish "length").
        limit = room if sampling.max_tokens is None else min(sampling.max_tokens, room)

        # The library's chain puts a grammar before top-k, so every token checks the whole vocabulary
        # against the grammar (49k candidates for SmolLM2, every token). The chain is
        # built without it; the grammar checks the sampled token and resamples only when it refuses
        # (llama.cpp's own common sampler does the same).
        llm._configure_generation_sampler(
            sampling.temperature,
            sampling.top_k,
            sampling.top_p,
            sampling.min_p,
            sampling.repeat_penalty,
            REPEAT_LAST_N,
            sampling.seed,
            None,
            "root",
        )
        grammar = _Grammar(llm, sampling.grammar) if sampling.grammar is not None else None
        try:
            return self._generate(tokens, limit, sampling.stop, grammar, gone)
        except BaseException:
            llm._clear_context_state()  # the KV cache may no longer match the tokens it is said to hold
            raise
        finally:
            if grammar is not None:
                grammar.free()

    def _generate(
        self,
        tokens: list[int],
        limit: int,
        stops: Sequence[str],
        grammar: _Grammar | None,
        gone: Callable[[], bool] = _staying,
    ) -> Completion:
        llm = self._llm
        started = time.perf_counter()
        # The KV cache keeps the previous request's tokens; only what follows their common prefix is
        # evaluated (llama-cpp-python's server did the same). memstream's calls share long system
        # prompts, so a repeated call skips most of its prompt.
        reused, _ = llm._prepare_chat_prefix(tokens, _CACHE_KEY)
        n_past = llm._eval_tokens(tokens[reused:], reused)
        prefilled = time.perf_counter()

        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        text = ""
        generated = 0
        finish: FinishReason = "length"
        cut: int | None = None
        while generated < limit:
            if gone():
                raise ClientGone(f"the client left after {generated} tokens")
            token = llm._sample_token() if grammar is None else grammar.sample()
            if self._is_eog(token):
                finish = "stop"
                break
            generated += 1
            piece = decoder.decode(llm._token_to_bytes(token))
            text += piece
            cut = _stop_at(text, stops, len(piece))
            if cut is not None:
                text, finish = text[:cut], "stop"
                break
            if generated < limit:  # the last token's state is never needed
                n_past = llm._eval_tokens([token], n_past)
        if cut is None:
            text += decoder.decode(b"", final=True)  # bytes of a character cut short, as U+FFFD
        decode_s = time.perf_counter() - prefilled
        log.info(
            "prompt %d tokens (%d reused) in %.2f s; completion %d tokens in %.2f s (%.1f tokens/s), %s",
            len(tokens),
            reused,
            prefilled - started,
            generated,
            decode_s,
            generated / decode_s if decode_s > 0 else 0.0,
            finish,
        )
        return Completion(text=text, prompt_tokens=len(tokens), completion_tokens=generated, finish_reason=finish)


class _Grammar:
    """A GBNF grammar sampler beside the library's chain (penalties, top-k, top-p, min-p, temperature,
    distribution): the chain samples, the grammar checks that one token, and only a refused token
    makes the chain sample again over the candidates the grammar allows."""

    def __init__(self, llm: Any, grammar: str, root: str = "root"):
        import numpy as np

        self._llm, self._lib, self._ffi, self._np = llm, llm._lib, llm._ffi, np
        keep = (self._ffi.new("char[]", grammar.encode("utf-8")), self._ffi.new("char[]", root.encode("utf-8")))
        self._sampler = self._lib.llama_sampler_init_grammar(llm._vocab, *keep)
        if self._sampler == self._ffi.NULL:
            raise GrammarRejected("Failed to parse the supplied GBNF grammar")
        self._n_vocab = int(llm.n_vocab)
        self._candidates = np.zeros(self._n_vocab, dtype=[("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
        self._ids = np.arange(self._n_vocab, dtype=np.int32)
        self._one = self._ffi.new("llama_token_data[1]")
        self._one_array = self._ffi.new("llama_token_data_array *", {"data": self._one, "size": 1})

    def sample(self) -> int:
        lib, chain = self._lib, self._llm._sampler
        array = self._all_candidates()
        lib.llama_sampler_apply(chain, array)
        token = int(array.data[array.selected].id)
        if not self._allows(token):
            array = self._all_candidates()
            lib.llama_sampler_apply(self._sampler, array)  # refused tokens get -inf
            lib.llama_sampler_apply(chain, array)
            token = int(array.data[array.selected].id)
        lib.llama_sampler_accept(self._sampler, token)
        lib.llama_sampler_accept(chain, token)  # the penalties' history, as llama_sampler_sample does
        return token

    def _all_candidates(self) -> Any:
        """Every token with the last position's logit (a fresh array: the samplers sort and cut it)."""
        np, ffi = self._np, self._ffi
        logits = self._lib.llama_get_logits_ith(self._llm._ctx, -1)
        self._candidates["id"] = self._ids
        self._candidates["logit"] = np.frombuffer(ffi.buffer(logits, 4 * self._n_vocab), dtype=np.float32)
        self._candidates["p"] = 0.0
        data = ffi.cast("llama_token_data *", ffi.from_buffer(self._candidates))
        return ffi.new("llama_token_data_array *", {"data": data, "size": self._n_vocab, "selected": -1})

    def _allows(self, token: int) -> bool:
        self._one[0].id, self._one[0].logit, self._one[0].p = token, 1.0, 0.0
        self._one_array.size, self._one_array.selected, self._one_array.sorted = 1, -1, False
        self._lib.llama_sampler_apply(self._sampler, self._one_array)
        return self._one[0].logit != float("-inf")

    def free(self) -> None:
        if self._sampler is not None:
            self._lib.llama_sampler_free(self._sampler)
            self._sampler = None


def _stop_at(text: str, stops: Sequence[str], new_chars: int) -> int | None:
    """Where the first stop sequence that the last ``new_chars`` characters completed starts."""
    found = [i for stop in stops if (i := text.find(stop, max(0, len(text) - new_chars - len(stop) + 1))) != -1]
    return min(found) if found else None


_log_callback: Any = None  # kept alive: llama.cpp holds the pointer


def _silence_llama_log() -> None:
    """llama.cpp logs every context (re)initialisation to stderr; errors still get through."""
    global _log_callback
    from llama_cpp_py_sync._cffi_bindings import get_ffi, get_lib

    ffi, lib = get_ffi(), get_lib()
    if _log_callback is None:

        @ffi.callback("void(enum ggml_log_level, const char *, void *)")
        def _log(level: int, text: Any, _user: Any) -> None:
            if level == 4:  # GGML_LOG_LEVEL_ERROR
                import sys

                sys.stderr.write(ffi.string(text).decode("utf-8", "replace"))

        _log_callback = _log
    lib.llama_log_set(_log_callback, ffi.NULL)
