"""The operator dashboard (the admin index): panels that each app registers from its
AppConfig.ready(), so `core` renders them without importing the apps. A panel's context is
computed per request; a panel whose data source is down shows its error instead of failing
the page."""

import logging
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Panel:
    key: str
    title: str
    template: str
    context: Callable[[], dict]
    order: int = 100


_panels: dict[str, Panel] = {}


def register(*, key: str, title: str, template: str, context: Callable[[], dict], order: int = 100) -> None:
    _panels[key] = Panel(key=key, title=title, template=template, context=context, order=order)


def render_panels() -> list[dict]:
    rendered = []
    for panel in sorted(_panels.values(), key=lambda p: (p.order, p.key)):
        try:
            data, error = panel.context(), None
        except Exception as exc:
            logger.warning("dashboard panel failed", extra={"panel": panel.key}, exc_info=True)
            data, error = {}, f"{type(exc).__name__}: {exc}"[:300]
        rendered.append(
            {"key": panel.key, "title": panel.title, "template": panel.template, "data": data, "error": error}
        )
    return rendered
