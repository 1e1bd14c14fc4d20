"""A credential's `auth` as the API sends it, split into what may be shown (stored in `auth`) and
the secret parts (sealed in `secret`): rules with no query, nothing rendered or logged."""

import re
from datetime import UTC, datetime

from django.utils import timezone

from core.errors import InvalidRequest
from core.outbound import OutboundRefused, check_url
from vaults.models import VaultCredential


def check_outbound(field: str, url: str) -> None:
    try:
        check_url(url)
    except OutboundRefused as exc:
        raise InvalidRequest(f"{field}: {exc.for_client()}.") from None


def future_time(field: str, value: datetime | None) -> str | None:
    if value is None:
        return None
    if value <= timezone.now():
        raise InvalidRequest(f"{field}: must be in the future.")
    return value.astimezone(UTC).isoformat()


def refresh_public(refresh: dict) -> dict:
    return {
        "client_id": refresh["client_id"],
        "token_endpoint": refresh["token_endpoint"],
        "token_endpoint_auth": {"type": refresh["token_endpoint_auth"]["type"]},
        "resource": refresh.get("resource") or None,
        "scope": refresh.get("scope") or None,
    }


# Variables the sandbox's own plumbing sets (sandboxes/policy.py): a credential cannot take them.
RESERVED_SECRET_NAMES = frozenset(
    {"PATH", "HOME", "TMPDIR", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE",
     "CURL_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS"}
)  # fmt: skip
_HOST_ENTRY = re.compile(r"^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]{0,62}\.)*[A-Za-z0-9-]{1,63}$")


def networking_public(field: str, networking: dict) -> dict:
    """A credential's networking as stored: unrestricted, or limited to bare hostnames, IPv4
    addresses or `*.` wildcards (no URLs, ports, paths or IPv6, as the SDK says)."""
    if networking["type"] == "unrestricted":
        if networking.get("allowed_hosts") is not None:
            raise InvalidRequest(f"{field}.allowed_hosts: an unrestricted credential takes no host list.")
        return {"type": "unrestricted"}
    hosts = list(networking.get("allowed_hosts") or [])
    if not hosts:
        raise InvalidRequest(f"{field}.allowed_hosts: a limited credential names at least one host.")
    for host in hosts:
        if not _HOST_ENTRY.match(host):
            raise InvalidRequest(
                f"{field}.allowed_hosts: {host[:100]!r} is not a hostname, an IPv4 address or a *. wildcard."
            )
    return {"type": "limited", "allowed_hosts": [host.lower() for host in hosts]}


def injection_location(location: dict) -> dict:
    if not (location["header"] or location["body"]):
        raise InvalidRequest("auth.injection_location: at least one of header and body must be enabled.")
    return location


def environment_variable_split(auth: dict) -> tuple[str, str, dict, dict]:
    name = auth["secret_name"]
    if name.upper() in RESERVED_SECRET_NAMES or name.upper().startswith("MANGO_"):
        raise InvalidRequest(f"auth.secret_name: {name!r} is set by the sandbox itself; choose another name.")
    location = auth.get("injection_location") or {}
    public = {
        "type": VaultCredential.AuthType.ENVIRONMENT_VARIABLE,
        "secret_name": name,
        "networking": networking_public("auth.networking", auth["networking"]),
        "injection_location": injection_location(
            {"header": location.get("header", True), "body": location.get("body", False)}
        ),
    }
    return VaultCredential.AuthType.ENVIRONMENT_VARIABLE, "", public, {"secret_value": auth["secret_value"]}


def auth_split(auth: dict) -> tuple[str, str, dict, dict]:
    """(type, server URL, public auth, secret parts) of a create's `auth`."""
    kind = auth["type"]
    if kind == VaultCredential.AuthType.ENVIRONMENT_VARIABLE:
        return environment_variable_split(auth)
    url = auth["mcp_server_url"]
    check_outbound("auth.mcp_server_url", url)
    if kind == VaultCredential.AuthType.STATIC_BEARER:
        return kind, url, {"type": kind, "mcp_server_url": url}, {"token": auth["token"]}
    public = {"type": kind, "mcp_server_url": url, "expires_at": future_time("auth.expires_at", auth.get("expires_at"))}
    secret = {"access_token": auth["access_token"]}
    refresh = auth.get("refresh")
    public["refresh"] = None
    if refresh is not None:
        check_outbound("auth.refresh.token_endpoint", refresh["token_endpoint"])
        public["refresh"] = refresh_public(refresh)
        secret["refresh_token"] = refresh["refresh_token"]
        if refresh["token_endpoint_auth"]["type"] != "none":
            secret["client_secret"] = refresh["token_endpoint_auth"]["client_secret"]
    return kind, url, public, secret
