# mutant: unexpected_fields_ignored
# exercise: validate_records
# mistake: never reports keys outside the schema, so a misspelt field name goes unnoticed.
import math
import unicodedata


def validate_records(records, schema, non_empty=()):
    if not isinstance(records, (list, tuple)):
        raise ValueError("records must be a list of records")
    if not isinstance(schema, dict) or not schema:
        raise ValueError("schema must be a non-empty dict of field name -> type")
    for field, expected in schema.items():
        if not isinstance(field, str) or not field.strip() or not isinstance(expected, type):
            raise ValueError(f"schema entry {field!r}: {expected!r} must map a non-empty name to a type")
    if "id" not in schema:
        raise ValueError("schema must contain an 'id' field")
    if not isinstance(non_empty, (list, tuple)):
        raise ValueError("non_empty must be a list or tuple of field names")
    for field in non_empty:
        if field not in schema or schema[field] is not str:
            raise ValueError(f"non_empty field {field!r} must be a str field of the schema")

    def usable_id(record):
        value = record.get("id")
        return value if isinstance(value, str) and value.strip() else None

    counts = {kind: 0 for kind in ("not_a_mapping", "missing", "type", "empty", "unexpected", "duplicate_id")}
    valid, invalid, seen_ids = [], [], set()
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            problems = ["not_a_mapping"]
            record_id = None
        else:
            problems = []
            for field, expected in schema.items():
                if field not in record:
                    problems.append(f"missing:{field}")
                elif not isinstance(record[field], expected):
                    problems.append(f"type:{field}")
                elif field in non_empty and not record[field].strip():
                    problems.append(f"empty:{field}")
            record_id = usable_id(record)
            if record_id is not None:
                if record_id in seen_ids:
                    problems.append("duplicate_id")
                seen_ids.add(record_id)
        for problem in problems:
            counts[problem.split(":", 1)[0]] += 1
        if problems:
            invalid.append({"index": index, "id": record_id, "problems": problems})
        else:
            valid.append(index)
    return {"valid": valid, "invalid": invalid, "counts": counts}
