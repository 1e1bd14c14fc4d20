"""References from one catalogue app into another, resolved without importing it.

An agent names skills; the agents app checks those names through a resolver that the skills app
installs when it is ready (`resolver_install("skill_versions", fn)`), so the catalogue apps stay
independent of each other (.importlinter). A resolver is a selector: keyword arguments in, rows
out, raising the API's errors (core.errors) for what it cannot find."""

from collections.abc import Callable

_resolvers: dict[str, Callable] = {}


def resolver_install(kind: str, resolver: Callable) -> None:
    _resolvers[kind] = resolver


def resolve(kind: str, **kwargs):
    try:
        resolver = _resolvers[kind]
    except KeyError:
        raise LookupError(f"no resolver for {kind!r} is installed (its app is not in INSTALLED_APPS?)") from None
    return resolver(**kwargs)
