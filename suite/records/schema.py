"""The record schema (suite/records/record.schema.json, docs/record.md) and the check against it."""

import hashlib
import json
from pathlib import Path

SCHEMA_VERSION = 4  # docs/record.md, "Versions": records of every earlier version still validate
SCHEMA_TEXT = (Path(__file__).with_name("record.schema.json")).read_text()
SCHEMA = json.loads(SCHEMA_TEXT)
SCHEMA_SHA256 = hashlib.sha256(SCHEMA_TEXT.encode()).hexdigest()  # what a remembered check was made against


JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}
_VALIDATOR = None  # jsonschema's, built on first use by validate()
_COMPILED = None  # fastjsonschema's code for the same schema, built on first use by validate()


def validate(record) -> None:
    """Raises jsonschema.ValidationError (the most relevant error, as jsonschema.validate picks it)
    when `record` does not satisfy the record schema.

    A record the compiled check (fastjsonschema, about 20 times faster) accepts is valid; one it
    rejects goes to jsonschema, whose verdict and message count: the compiled check only makes the
    common case, a valid record, quick (jsonschema was 41 of 48 s of `report` over 10,000 records).
    Neither checks `format`. jsonschema's validator is built, and the schema itself checked, once per
    process: jsonschema.validate() re-checks the schema on every call (it made `report` take minutes)."""
    if not _compiled_accepts(record):
        error = _jsonschema_error(record)
        if error is not None:
            raise error


def problem(record) -> str | None:
    """Why `record` is not a record this suite reads, in one line, or None when it is one."""
    if not isinstance(record, dict):
        return f"not a record: a JSON {JSON_TYPES.get(type(record), type(record).__name__)}"
    version = record.get("schema_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        return (f"a record of schema version {version}; this suite reads versions 1 to {SCHEMA_VERSION} "
                "(update the checkout to read newer records)")
    if _compiled_accepts(record):
        return None
    error = _jsonschema_error(record)
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"not a valid record: {where + ': ' if where else ''}{error.message.splitlines()[0][:200]}"


def _compiled_accepts(record) -> bool:
    global _COMPILED
    import fastjsonschema  # imported on first use, as jsonschema: keeps the runner's start-up short

    if _COMPILED is None:
        # use_default=False: never fill defaults into the record; use_formats=False: as jsonschema
        _COMPILED = fastjsonschema.compile(SCHEMA, use_default=False, use_formats=False)
    try:
        _COMPILED(record)
    except fastjsonschema.JsonSchemaException:
        return False
    return True


def _jsonschema_error(record):
    global _VALIDATOR
    import jsonschema

    if _VALIDATOR is None:
        cls = jsonschema.validators.validator_for(SCHEMA)  # the draft the schema's $schema names (2020-12)
        cls.check_schema(SCHEMA)
        _VALIDATOR = cls(SCHEMA)
    return jsonschema.exceptions.best_match(_VALIDATOR.iter_errors(record))
