"""Small filters for the operator pages: durations and percentages, human-readable."""

from datetime import timedelta

from django import template

register = template.Library()


@register.filter
def seconds(value) -> str:
    if value is None:
        return "—"
    value = float(value)
    if value < 90:
        return f"{value:.0f}s"
    if value < 5400:
        return f"{value / 60:.0f} min"
    if value < 172800:
        return f"{value / 3600:.1f} h"
    return f"{value / 86400:.1f} days"


@register.filter
def duration(value: timedelta) -> str:
    return seconds(value.total_seconds()) if value is not None else "—"


@register.simple_tag
def percent(part, whole) -> str:
    if not whole:
        return "—"
    return f"{100 * (part or 0) / whole:.0f}%"
