"""Real adapters behind the ports (OpenAI-compatible LLM, sentence-transformers, Qdrant, llmlingua)."""
