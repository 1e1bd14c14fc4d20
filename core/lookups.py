"""The one shape of a gated lookup by id (STYLE.md 6): the row the scoped queryset holds,
locked when the caller will write it, or the not-found error the caller names."""

from core.errors import NotFound


def one_or_not_found(queryset, *, for_update: bool = False, missing: NotFound):
    """The single row of `queryset` (select_for_update with `for_update`), or raise `missing`."""
    if for_update:
        queryset = queryset.select_for_update()
    row = queryset.first()
    if row is None:
        raise missing
    return row
