"""Sleep-time consolidation: compare new cards with older ones and version them without
destroying history."""
