"""The `metadata` field every resource carries: at most 16 string pairs, patched key by key."""

from core.errors import InvalidRequest

METADATA_MAX_PAIRS = 16


def metadata_patch_apply(current: dict, patch: dict, *, empty_deletes: bool = False) -> dict:
    """`patch` over `current`: a null value deletes its key, a string upserts it — the empty one
    too, except where the SDK says an empty string deletes (`empty_deletes`: environments)."""
    merged = dict(current)
    for key, value in patch.items():
        if value is None or (empty_deletes and value == ""):
            merged.pop(key, None)
        else:
            merged[key] = value
    if len(merged) > METADATA_MAX_PAIRS:
        raise InvalidRequest(f"metadata: at most {METADATA_MAX_PAIRS} keys.", code="invalid_metadata")
    return merged
