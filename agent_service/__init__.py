"""Agent service: models under test, loaded by name from a model root, acting in batches."""
