"""The record schema (suite/schema/record.schema.json, docs/record.md) and the check against it."""

import json
from pathlib import Path

SCHEMA_VERSION = 3  # docs/record.md, "Versions": records of every earlier version still validate
SCHEMA = json.loads((Path(__file__).parent / "schema" / "record.schema.json").read_text())


_VALIDATOR = None  # built on first use by validate()


def validate(record: dict) -> None:
    """Raises jsonschema.ValidationError (the most relevant error, as jsonschema.validate picks it)
    when `record` does not satisfy the record schema. The validator is built, and the schema itself
    checked, once per process: jsonschema.validate() re-checks the schema on every call, which made
    `report` over 10,000 records take over two minutes (issue 19)."""
    global _VALIDATOR
    import jsonschema  # imported on first use: keeps the runner's start-up short

    if _VALIDATOR is None:
        cls = jsonschema.validators.validator_for(SCHEMA)  # the draft the schema's $schema names (2020-12)
        cls.check_schema(SCHEMA)
        _VALIDATOR = cls(SCHEMA)
    error = jsonschema.exceptions.best_match(_VALIDATOR.iter_errors(record))
    if error is not None:
        raise error
