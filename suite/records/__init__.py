"""A run folder -> one result record, and records read back: measurement, writing, schema, reading,
the results index and queries, provenance. Never imports execution or analysis."""
