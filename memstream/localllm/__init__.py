"""A small OpenAI-compatible LLM server on llama-cpp-py-sync (a prebuilt llama.cpp wheel): the local
server for development, tests and the demo (infra/llm/llm_server.sh starts it).

``python -m memstream.localllm --model PATH --model_alias NAME --host H --port P --n_ctx N --n_threads T``

Modules: ``protocol`` (OpenAI request/response bodies) and ``schema`` (JSON Schema normalised for the
grammar converter) are pure; ``engine`` runs the model, ``native`` makes its libraries load on glibc
< 2.38, ``server`` is the FastAPI app.
"""
