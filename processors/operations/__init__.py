"""Operating a store and a deployment: sizing (capacity), export, the inspector's reads,
the embedder fingerprint."""
