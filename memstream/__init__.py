"""memstream: a streaming long-term memory engine for LLM assistants."""

__version__ = "0.1.0"
