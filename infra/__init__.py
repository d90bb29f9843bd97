"""Services memstream starts (broker, LLM servers, Prometheus, ...): shell scripts, and the Python they run."""
