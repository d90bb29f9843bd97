"""The local LLM server's scripts and the replay server benchmarks put in front of it."""
