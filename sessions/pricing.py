"""List prices of the models the SDK names, for budgets and `usage.list_cost` (issue 24). Pure.

Source: Anthropic's public pricing page (platform.claude.com/docs/en/about-claude/pricing,
"Model pricing", as stored on 2026-12-01), USD per million tokens, the standard tier: base input,
5-minute cache writes (1.25x input), 1-hour cache writes (2x input), cache hits, output;
claude-sonnet-5 ($2 / $10) from the same site's model overview. Models
the SDK lists whose price that page does not state here (claude-fable-5-2, claude-opus-5-5,
claude-sonnet-5-5, claude-haiku-5-5 with its two prompt-size tiers, claude-mythos-preview) have
no list price: a budgeted session on one is refused (`model_not_budgetable`) unless the operator
sets its price in MANGO_MODEL_LIST_PRICES (JSON: {"model id": [input, 5m write, 1h write, cache
read, output]}), which also overrides any row below.

Costs are integers of nano-USD (1 $/MTok = 1,000 nano-USD per token), so no float ever rounds a
cap; the wire carries whole cents (`amount` in minor units), rounded up.
"""

import json
from dataclasses import dataclass

from django.conf import settings


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: float
    cache_write_5m: float
    cache_write_1h: float
    cache_read: float
    output: float


def _row(input_price: float, cache_read: float, output: float) -> Price:
    return Price(input_price, input_price * 1.25, input_price * 2, cache_read, output)


_OPUS_45 = _row(5, 0.50, 25)
_SONNET_4 = _row(3, 0.30, 15)
LIST_PRICES: dict[str, Price] = {
    "claude-fable-5-1": _row(10, 0.25, 50),
    "claude-mythos-5-1": _row(10, 0.25, 50),
    "claude-fable-5": _row(10, 1.00, 50),
    "claude-mythos-5": _row(10, 1.00, 50),
    "claude-opus-5": _OPUS_45,
    "claude-opus-4-8": _OPUS_45,
    "claude-opus-4-7": _OPUS_45,
    "claude-opus-4-6": _OPUS_45,
    "claude-opus-4-5": _OPUS_45,
    "claude-opus-4-5-20251101": _OPUS_45,
    "claude-sonnet-5": _row(2, 0.20, 10),
    "claude-sonnet-4-6": _SONNET_4,
    "claude-sonnet-4-5": _SONNET_4,
    "claude-sonnet-4-5-20250929": _SONNET_4,
    "claude-haiku-4-5": _row(1, 0.10, 5),
    "claude-haiku-4-5-20251001": _row(1, 0.10, 5),
}
NANO_PER_CENT = 10_000_000  # a cent is 1e-2 USD; a nano-USD is 1e-9


def price_for(model: str) -> Price | None:
    overrides = json.loads(settings.MANGO_MODEL_LIST_PRICES or "{}")
    if model in overrides:
        return Price(*(float(value) for value in overrides[model]))
    return LIST_PRICES.get(model)


def known_models() -> list[str]:
    """The ids of the models this server knows (/v1/models): the operator's priced models
    (MANGO_MODEL_LIST_PRICES) first, then the price table's, each once."""
    overrides = json.loads(settings.MANGO_MODEL_LIST_PRICES or "{}")
    return list(dict.fromkeys([*overrides, *LIST_PRICES]))


def model_display_name(model: str) -> str:
    """`claude-sonnet-4-5` → `Claude Sonnet 4.5`; a dated id keeps its date (`… (20250929)`)."""
    words, numbers, date = [], [], None
    for part in model.split("-"):
        if part.isdigit() and len(part) == 8:
            date = part
        elif part.isdigit():
            numbers.append(part)
        else:
            words.append(part.capitalize())
    name = " ".join([*words, ".".join(numbers)] if numbers else words)
    return f"{name} ({date})" if date else name


def call_cost_nanousd(price: Price, usage: dict) -> int:
    """The list cost of one model call from its usage (the Messages API's `usage` object)."""
    creation = usage.get("cache_creation") or {}
    write_1h = int(creation.get("ephemeral_1h_input_tokens") or 0)
    write_5m = int(creation.get("ephemeral_5m_input_tokens") or 0)
    if not creation:
        write_5m = int(usage.get("cache_creation_input_tokens") or 0)
    tokens_times_price = (
        int(usage.get("input_tokens") or 0) * price.input
        + write_5m * price.cache_write_5m
        + write_1h * price.cache_write_1h
        + int(usage.get("cache_read_input_tokens") or 0) * price.cache_read
        + int(usage.get("output_tokens") or 0) * price.output
    )
    return round(tokens_times_price * 1000)


def cents(nanousd: int) -> str:
    """Nano-USD as the wire's amount: whole cents, rounded up (the cap fires at or before the
    actual charge), as an integer string."""
    return str(-(-nanousd // NANO_PER_CENT))


def amount_nanousd(amount: str) -> int:
    return int(amount) * NANO_PER_CENT
