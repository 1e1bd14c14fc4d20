"""The SDK's surface, read off the SDK itself, against what Mango routes: the source of
docs/sdk.md, which tests/core/test_sdk_surface.py keeps true.

Every method of `client.beta` is called once with placeholder arguments against a transport that
records the request and answers 404, so each method's HTTP verb and path come from the SDK's own
code (no list is written by hand). A path is *served* when Django resolves it to a view that
answers that verb. Event types are the `type` literals of the SDK's session event union.

    python -m tests.sdk_surface          # print the page
    python -m tests.sdk_surface --write  # rewrite docs/sdk.md (keeping each row's note)
"""

import functools
import inspect
import logging
import re
import sys
import typing
from pathlib import Path

from tests import sdk_options

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "sdk.md"

# The namespaces of `client.beta` that are Mango's to serve: Managed Agents, Files and what goes
# with them. The rest of the beta surface is the organization admin API, the Messages API (Mango
# is its client), and Anthropic's own products; the page names those groups once.
IN_SCOPE = (
    "agents",
    "environments",
    "sessions",
    "vaults",
    "memory_stores",
    "skills",
    "files",
    "models",
    "dreams",
    "deployments",
    "deployment_runs",
    "webhooks",
)
OUT_OF_SCOPE = {
    "messages": "the Messages API: Mango is its client (the model upstream), not a server of it",
    "organization": "the organization admin API (users, workspaces, keys, RBAC, plugins, spend limits): Mango's"
    " workspaces and keys are managed in its admin and with manage.py",
    "compliance": "Anthropic's compliance review API",
    "tunnels": "Anthropic's tunnels to private networks (Mango runs inside them: MANGO_OUTBOUND_PRIVATE_HOSTS)",
    "user_profiles": "Anthropic's user profiles and their data controls",
    "bedrock": "Amazon Bedrock's client configuration",
}
# Stream-only events: previews of a message while the model writes it, sent to streams that ask
# for them (`event_deltas[]`) and never stored (sessions/runtime/upstream.py).
STREAMED = ("event_delta", "event_start")
LOCAL = {  # methods that send nothing: they work on what the caller holds
    "beta.webhooks.unwrap": "verifies a delivery locally; Mango signs what it sends so that it does (docs/webhooks.md)",
    "beta.webhooks.parse_unverified": "parses a delivery locally",
}


def _placeholder(name: str, annotation) -> object:
    text = str(annotation)
    if name.endswith("_id") or name == "id":
        return f"{name}_probe"
    if any(word in text for word in ("Iterable", "List", "Sequence")):
        return []
    if any(word in text for word in ("Dict", "Mapping", "Param")):
        return {}
    if "FileTypes" in text:
        return ("probe.txt", b"probe", "text/plain")
    if "int" in text:
        return 1
    if "bool" in text:
        return False
    return "probe"


@functools.cache
def probe() -> tuple[tuple[str, object, object], ...]:
    """(name, bound method, the request it sent or None) for every method of client.beta in
    scope. Each method is called with a placeholder for every parameter (the required ones only
    when the SDK refuses a placeholder), against a transport that records the request and
    answers 404."""
    import anthropic
    import httpx2
    from anthropic._resource import SyncAPIResource

    logging.getLogger("httpx2").setLevel(logging.WARNING)  # one line per probe otherwise
    sent: list = []

    def answer(request):
        sent.append(request)
        return httpx2.Response(404, json={"type": "error", "error": {"type": "not_found_error", "message": "probe"}})

    client = anthropic.Anthropic(
        base_url="http://sdk-probe.invalid", api_key="probe", max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(answer)),
    )  # fmt: skip
    found: list[tuple[str, object, object]] = []

    def call(method, *, everything: bool):
        args, kwargs = [], {}
        for parameter_name, parameter in inspect.signature(method).parameters.items():
            if parameter.kind in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
                continue
            if parameter.default is not inspect.Parameter.empty and (
                not everything or parameter_name in ("extra_headers", "extra_query", "extra_body", "timeout", "betas")
            ):
                continue
            value = _placeholder(parameter_name, parameter.annotation)
            if parameter.kind is parameter.POSITIONAL_ONLY:
                args.append(value)
            else:
                kwargs[parameter_name] = value
        before = len(sent)
        try:
            result = method(*args, **kwargs)
            if hasattr(result, "__enter__"):
                with result:
                    pass
        except Exception:  # noqa: BLE001 - the probe's 404, or the SDK refusing a placeholder
            pass
        return sent[before] if len(sent) > before else None

    def walk(resource, prefix: str) -> None:
        for name in sorted(dir(resource)):
            if name.startswith("_") or name in ("with_raw_response", "with_streaming_response"):
                continue
            attribute = getattr(resource, name)
            if isinstance(attribute, SyncAPIResource):
                walk(attribute, f"{prefix}.{name}")
            elif inspect.ismethod(attribute):
                request = call(attribute, everything=True) or call(attribute, everything=False)
                found.append((f"{prefix}.{name}", attribute, request))

    for namespace in IN_SCOPE:
        walk(getattr(client.beta, namespace), f"beta.{namespace}")
    return tuple(found)


def sdk_methods() -> dict[str, tuple[str, str] | None]:
    """{"beta.agents.create": ("POST", "/v1/agents"), …} for every method of client.beta in
    scope; None for a method that sends no request."""
    return {name: (request.method, request.url.path) if request is not None else None for name, _, request in probe()}


def route_serves(verb: str, path: str) -> bool:
    """Whether Mango routes `verb path` to a view that answers that verb."""
    from django.urls import Resolver404, resolve

    try:
        match = resolve(path)
    except Resolver404:
        return False
    view = getattr(match.func, "view_class", None) or getattr(match.func, "cls", None)
    if view is None:
        return True  # a function view answers what it routes
    return hasattr(view, verb.lower())


def sdk_event_types() -> list[str]:
    """The `type` of every member of the SDK's session event union (what a stream may carry)."""
    from anthropic.types.beta.sessions.beta_managed_agents_stream_session_events import (
        BetaManagedAgentsStreamSessionEvents,
    )

    union = BetaManagedAgentsStreamSessionEvents
    while typing.get_origin(union) is typing.Annotated:
        union = typing.get_args(union)[0]
    types = []
    for member in typing.get_args(union):
        literal = member.model_fields["type"].annotation
        types.extend(typing.get_args(literal))
    return sorted(types)


def mango_event_types() -> list[str]:
    from sessions.events import EventType

    return sorted(EventType.values)


def _notes() -> dict[str, str]:
    """Each row's note as the page has it now (kept when the page is rewritten)."""
    if not PAGE.exists():
        return {}
    notes = {}
    for line in PAGE.read_text().split("\n## Options")[0].splitlines():
        match = re.match(r"^\| `([^`]+)` \|[^|]*\|[^|]*\| (.*) \|$", line)
        if match:
            notes[match.group(1)] = match.group(2)
    return notes


def rows() -> list[tuple[str, str, str]]:
    """(method or event, request or kind, status) for every row of the page."""
    table = []
    for method, request in sdk_methods().items():
        if request is None:
            table.append((method, "(local)", "local"))
            continue
        verb, path = request
        shown = re.sub(r"/([a-z_]+_id)_probe", r"/{\1}", path)
        table.append((method, f"{verb} {shown}", "served" if route_serves(verb, path) else "absent"))
    sdk, mango = set(sdk_event_types()), set(mango_event_types())
    for event_type in sorted(sdk | mango):
        status = "streamed" if event_type in STREAMED else "written" if event_type in mango else "not written"
        table.append((event_type, "event" if event_type in sdk else "event (Mango's own)", status))
    return table


def page() -> str:
    import anthropic

    notes = _notes()
    table = rows()
    methods = [row for row in table if not row[1].startswith("event")]
    events = [row for row in table if row[1].startswith("event")]
    served = sum(1 for row in methods if row[2] == "served")
    sending = sum(1 for row in methods if row[2] != "local")
    lines = [
        f"# The SDK's surface: what Mango serves of `anthropic` {anthropic.__version__}",
        "",
        "Every method of `client.beta` in Mango's scope, with the request the SDK sends and whether",
        "Mango serves it, and every session event type. Generated from the SDK itself",
        "(`python -m tests.sdk_surface --write`; tests/core/test_sdk_surface.py fails when this page and",
        "the code disagree). *served*: routed to a view that answers the verb (the behaviour is the",
        "feature's page's to describe; what a served method refuses is a 400 naming the field);",
        "*absent*: a 404. Back to the [README](../README.md).",
        "",
        f"**{served} of the {sending} methods that send a request are served.** Out of scope (not Managed"
        " Agents or Files; each a 404):",
        "",
    ]
    lines += [f"- `client.beta.{name}`: {why}." for name, why in OUT_OF_SCOPE.items()]
    lines += ["", "## Methods", "", "| method | request | status | note |", "|---|---|---|---|"]
    for method, request, status in methods:
        note = notes.get(method) or LOCAL.get(method, "")
        lines.append(f"| `{method}` | {request} | {status} | {note} |")
    lines += ["", "## Session event types", "", "| event | kind | status | note |", "|---|---|---|---|"]
    for event_type, kind, status in events:
        lines.append(f"| `{event_type}` | {kind} | {status} | {notes.get(event_type, '')} |")
    lines += options_section()
    return "\n".join(lines) + "\n"


def option_rows() -> list[tuple[sdk_options.Option, tuple[str, str] | None]]:
    from tests.openapi import document, operation_for

    return sdk_options.table(probe(), document(), operation_for)


def _methods_cell(methods: tuple[str, ...]) -> str:
    if len(methods) > 4:
        return f"{len(methods)} methods"
    return ", ".join(method.removeprefix("beta.") for method in methods)


def options_section() -> list[str]:
    rows = option_rows()
    refused = sum(1 for _, verdict in rows if verdict and verdict[0] == sdk_options.REFUSED)
    lines = [
        "",
        "## Options",
        "",
        f"Every parameter of those methods ({len(rows)} options: body fields with the nested ones, query",
        "parameters, headers), read off the SDK's parameter types (tests/sdk_options.py). `tools[]` is an",
        "item of a list, `<auto>` the member of a union whose `type` is `auto`. *served*: Mango's input",
        "schema (/openapi.json) declares it, or the note says where it is checked, and it is acted on;",
        f"*refused*: a 400 naming the field, for the reason given ({refused} options). A new SDK option",
        "that Mango neither declares nor names here fails tests/core/test_sdk_surface.py.",
        "",
        "| option | in | methods | status | note |",
        "|---|---|---|---|---|",
    ]
    for option, verdict in rows:
        verdict_status, note = verdict or ("no status", "")
        lines.append(
            f"| `{option.path}` | {option.where} | {_methods_cell(option.methods)} | {verdict_status} | {note} |"
        )
    return lines


if __name__ == "__main__":
    import os

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    text = page()
    if "--write" in sys.argv:
        PAGE.write_text(text)
    else:
        sys.stdout.write(text)
