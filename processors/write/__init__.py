"""The write path: compress a turn, segment the stream into topics, buffer topics (STM), extract
memory from a flush, index it as store points."""
