"""Every option of every SDK method in scope (body fields, nested ones included, query
parameters and headers), read off the SDK's own parameter types, with what Mango does with it:
the options table of docs/sdk.md (tests/sdk_surface.py writes it).

An option's path names its place in the request: `tools[]` an item of a list, `<auto>` the member
of a union whose `type` is `auto`. Whether Mango declares an option is read off /openapi.json
(drf-spectacular writes it from the input serializers that validate each request); what Mango
does with it is the RULES table below, first matching pattern wins. A new SDK option that no rule
names fails tests/core/test_sdk_surface.py.
"""

import inspect
import json
import re
import typing
from dataclasses import dataclass
from fnmatch import fnmatchcase

from typing_extensions import is_typeddict

NOT_OPTIONS = {"extra_headers", "extra_query", "extra_body", "timeout", "betas"}
SERVED, REFUSED = "served", "refused"


@dataclass(frozen=True)
class Option:
    where: str  # body | query | header | path
    path: str
    methods: tuple[str, ...]


def _bare(annotation):
    while True:
        origin = typing.get_origin(annotation)
        if (
            origin is typing.Annotated
            or getattr(origin, "_name", None) in ("Required", "NotRequired", "ReadOnly")
            or str(origin).endswith(("Required", "ReadOnly"))
        ):
            annotation = typing.get_args(annotation)[0]
        else:
            return annotation


def _fields(annotation, path: str, seen: frozenset) -> typing.Iterator[str]:
    """The option paths below `path` for a value of type `annotation`."""
    annotation = _bare(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Union:
        members = [_bare(member) for member in typing.get_args(annotation) if member is not type(None)]
        dicts = [member for member in members if is_typeddict(member)]
        for member in members:
            if not is_typeddict(member):
                yield from _fields(member, path, seen)
                continue
            literal = typing.get_type_hints(member).get("type")
            tag = typing.get_args(_bare(literal))[0] if literal is not None and len(dicts) > 1 else None
            if tag is None:
                yield from _fields(member, path, seen)
            else:
                yield f"{path}<{tag}>"
                yield from _fields(member, f"{path}<{tag}>", seen)
        return
    if origin is not None and getattr(origin, "__name__", "") in ("list", "Iterable", "Sequence", "SequenceNotStr"):
        for member in typing.get_args(annotation):
            yield from _fields(member, f"{path}[]", seen)
        return
    if is_typeddict(annotation) and annotation not in seen:
        tagged = path.endswith(">")
        for name, hint in typing.get_type_hints(annotation).items():
            if tagged and name == "type":
                continue  # the union member's tag: `<auto>` is the option
            yield f"{path}.{name}"
            yield from _fields(hint, f"{path}.{name}", seen | {annotation})


def _where(name: str, request, verb: str) -> str:
    """Where the SDK put parameter `name` in the probe's `request`."""
    if f"/{name}_probe" in request.url.path or (f"/{name}" == "/version" and "/versions/" in request.url.path):
        return "path"
    headers = {key.lower() for key in request.headers} - {"anthropic-version", "anthropic-beta"}
    if f"anthropic-{name.replace('_', '-')}" in headers or name.replace("_", "-") in headers:
        return "header"
    query = {re.sub(r"\[(\w+)\]", r"_\1", key).removesuffix("[]") for key in request.url.params}
    if name in query:
        return "query"
    body = request.content or b""
    if request.headers.get("content-type", "").startswith("multipart/"):
        return "body" if f'name="{name}'.encode() in body else ("query" if verb in ("GET", "DELETE") else "body")
    try:
        keys = json.loads(body) if body else {}
    except ValueError:
        keys = {}
    if name in keys:
        return "body"
    return "query" if verb in ("GET", "DELETE") else "body"


def sdk_options(probe) -> list[Option]:
    """Every option of every method `probe` yields (name, bound method, request it sent), each
    with the methods that take it."""
    found: dict[tuple[str, str], list[str]] = {}
    for method_name, method, request in probe:
        if request is None:
            continue
        hints = typing.get_type_hints(method)
        for name in inspect.signature(method).parameters:
            if name in NOT_OPTIONS or name not in hints:
                continue
            where = _where(name, request, request.method)
            for path in (name, *_fields(hints[name], name, frozenset())):
                found.setdefault((where, path), []).append(method_name)
    return [Option(where, path, tuple(methods)) for (where, path), methods in sorted(found.items())]


def _resolve(schema: dict, components: dict) -> dict:
    while "$ref" in schema:
        schema = components[schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _members(schema: dict, components: dict) -> list[dict]:
    """The alternatives of `schema` (itself when it has none), resolved, nulls left out."""
    schema = _resolve(schema, components)
    alternatives = schema.get("oneOf") or schema.get("anyOf")
    if not alternatives:
        return [schema]
    found = []
    for alternative in alternatives:
        found.extend(_members(alternative, components))
    return [member for member in found if member.get("type") != "null"]


FREE = "free"  # inside a value Mango takes as free-form JSON and checks in code


def schema_declares(schema: dict, components: dict, steps: list[str]) -> str | bool:
    """Whether a body `schema` declares the option reached by `steps` (a path split into
    `.name`, `[]` and `<tag>`): True, False, or FREE."""
    current = [schema]
    for step in steps:
        following = []
        for member in (m for s in current for m in _members(s, components)):
            if not member or (member.get("type") in ("object", ["object", "null"]) and "properties" not in member):
                return FREE  # {} (any JSON) or an object of free keys
            if step == "[]":
                if "items" in member:
                    following.append(member["items"])
            elif step.startswith("<"):
                tag = step[1:-1]
                properties = member.get("properties") or {}
                enums = [
                    _resolve(properties[key], components).get("enum", [])
                    for key in ("type", "name")
                    if key in properties
                ]
                if any(tag in enum for enum in enums) or tag in member.get("enum", []):
                    following.append(member)
            elif step[1:] in (member.get("properties") or {}):
                following.append(member["properties"][step[1:]])
        if not following:
            return False
        current = following
    return True


def steps_of(path: str) -> list[str]:
    return re.findall(r"\.[a-z_0-9]+|\[\]|<[^>]+>", "." + path)


# (where, pattern, status, note): the first rule whose pattern matches an option's path decides
# it. An option no rule names is *served* when Mango's input schema declares it (each is
# validated there and acted on where its feature's page says); one neither declared nor named has
# no status, and the test fails until a rule gives it one.
RULES: list[tuple[str, str, str, str]] = [
    (
        "header",
        "workspace_id",
        SERVED,
        "`anthropic-workspace-id` must name the key's workspace (core/auth.py), else 401",
    ),
    ("header", "anthropic_worker_id", SERVED, "counted in `work.stats` workers_polling (sessions/queue)"),
    # Values refused with a 400 naming the field: what this server cannot do.
    (
        "body",
        "*.url_sources*",
        REFUSED,
        "web_fetch runs upstream inside the model call: Mango cannot filter where its URLs come from"
        " (use allowed_domains/blocked_domains)",
    ),
    (
        "body",
        "execution_identity<aws_role>*",
        REFUSED,
        "Mango assumes no AWS role for the agent's tools; `service_account` is served",
    ),
    (
        "body",
        "multiagent<multiagent_20261001>.workflows<enabled>*",
        SERVED,
        "checked by agents/multiagent.py: the agent's start_workflow_run runs workflow runs (docs/multiagent.md)",
    ),
    (
        "body",
        "scope",
        SERVED,
        "`organization` (the default; kept and returned); `account` is a 400 naming scope: an environment is"
        " visible to its whole workspace, as an API organization's (the SDK: rejected there)",
    ),
    ("query", "lifecycle", SERVED, "every model Mango knows is `active`: a filter without it lists none"),
    # Free-form values Mango checks in code rather than in the schema, and acts on.
    (
        "body",
        "*<custom>.input_schema*",
        SERVED,
        "a JSON Schema object (type must be `object`), sent to the model as the tool's schema",
    ),
    ("body", "*<web_search>.user_location*", SERVED, "sent to the upstream web_search tool as given"),
    (
        "body",
        "*content[]<document>.source*",
        SERVED,
        "admitted (file: read, verified and snapshotted; text/base64/url: kept) and sent to the model",
    ),
    ("body", "*content[]<image>.source*", SERVED, "admitted like documents and sent to the model as an image block"),
    ("body", "*content[]<document>.title", SERVED, "kept as sent; rendered into the document's text for the model"),
    ("body", "*content[]<document>.context", SERVED, "kept as sent; rendered into the document's text for the model"),
    (
        "body",
        "*content[]<search_result>*",
        SERVED,
        "a tool result's search_result block, kept as sent and passed to the model",
    ),
    ("body", "inputs[]*", SERVED, "the dream's memory store and sessions (dreams/serializers.py; docs/dreams.md)"),
    ("body", "model.id", SERVED, "the dream's model (dreams.create)"),
    ("body", "model.speed", SERVED, "dreams run at `standard` only: `fast` is a 400 naming model.speed"),
    (
        "body",
        "output_behavior*",
        SERVED,
        "where the dream writes: new versions in the input store, or a new store (docs/dreams.md)",
    ),
    (
        "body",
        "multiagent*",
        SERVED,
        "checked by agents/multiagent.py: the roster becomes session threads (docs/multiagent.md)",
    ),
]


def status(option: Option, declared: str | bool) -> tuple[str, str] | None:
    """(status, note) of `option`, or None when nothing says what Mango does with it."""
    for where, pattern, verdict, note in RULES:
        if where == option.where and fnmatchcase(option.path, pattern):
            return verdict, note
    if declared is True or option.where == "path":
        return SERVED, ""
    return None


def declared(option: Option, requests: dict, document: dict, operation_for) -> str | bool:
    """Whether every method taking `option` declares it in /openapi.json (True), holds it inside
    a free-form value (FREE), or does not (False)."""
    components = document["components"]["schemas"]
    found: list[str | bool] = []
    for method in option.methods:
        request = requests[method]
        match = operation_for(request.method, request.url.path)
        if match is None:
            found.append(False)
            continue
        operation = match[1]
        if option.where == "body":
            content = (operation.get("requestBody") or {}).get("content", {})
            schema = next((value["schema"] for value in content.values() if "schema" in value), None)
            found.append(schema_declares(schema, components, steps_of(option.path)) if schema else False)
        elif option.where in ("query", "header"):
            top = re.split(r"[.\[<]", option.path)[0]
            names = {
                re.sub(r"\[(\w*)\]", r"_\1", parameter["name"]).rstrip("_").lower().replace("-", "_")
                for parameter in operation.get("parameters", [])
                if parameter["in"] == option.where
            }
            found.append(top in names)
        else:
            found.append(True)
    if all(value is True for value in found):
        return True
    return FREE if all(value in (True, FREE) for value in found) else False


def table(probe, document: dict, operation_for) -> list[tuple[Option, tuple[str, str] | None]]:
    requests = {name: request for name, _, request in probe if request is not None}
    return [
        (option, status(option, declared(option, requests, document, operation_for))) for option in sdk_options(probe)
    ]
