"""The query path: plan a question, retrieve evidence (signals, fusion, graph, research rounds),
answer from it."""
