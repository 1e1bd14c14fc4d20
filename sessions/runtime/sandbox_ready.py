"""The session's sandbox made ready before a built-in tool runs in it: admitted under the
workspace's cap, created (from the environment's packages image) with its networking and the
vault credentials its egress proxy substitutes, then given its skills, memory stores, file
resources and repositories. A sandbox made for a session that slept first gets its checkpoint
back (sessions.runtime.sleep)."""

from django.utils.crypto import salted_hmac

import sandboxes as sandbox
from core.secrets import SecretsUnavailable
from sandboxes import policy as sandbox_policy
from sessions import events as ev
from sessions.events import EventType
from sessions.models import Session, SessionResource
from sessions.runtime.control import TurnControl, db_release
from sessions.runtime.repositories import repositories_place
from sessions.runtime.sleep import sandbox_restore
from sessions.selectors.runner import session_unplaced_resource_types
from sessions.selectors.sandboxes import session_sandbox_generation
from sessions.services.events import events_append
from sessions.services.memory_mounts import session_memory_place
from sessions.services.resources import resources_place
from sessions.services.runner import session_error_record, session_sandbox_failed, session_sandbox_running
from sessions.services.sandboxes import sandbox_admit, session_sandbox_provisioned
from sessions.services.skill_mounts import session_skills_place
from vaults.selectors import session_environment_credentials
from vaults.services import credential_secrets


def sandbox_ready(control: TurnControl, session: Session, *, gone: bool = False) -> None:
    """Provision once: a running sandbox that nothing changed since it was provisioned needs no
    Docker call here (the tool's exec is the only one); only file resources and repositories
    added since are placed. Otherwise (new, asleep, `gone` — its exec found no container — or a
    change counted: session_sandbox_changed) it is made ready in full."""
    changes, provisioned = session_sandbox_generation(session_id=session.id)  # one statement
    if session.sandbox_state == Session.SandboxState.RUNNING:
        # Deleting the session raises its interrupt flag (and removes the sandbox; what a late
        # ensure makes again goes with the runner's end, turn._run_leased).
        control.check_stop()
        if not gone and session.sandbox_ref and provisioned >= changes:
            _placements(control, session, session.sandbox_ref, fresh=False)
            return
    else:
        control.check_deleted()  # never create a sandbox for a deleted session
    sandbox_admit(session=session)  # the workspace's cap of live sandboxes
    db_release()  # no connection held while dockerd creates and starts the container
    networking = sandbox_networking(session)
    unreadable = networking.pop(UNREADABLE_CREDENTIALS, []) if networking else []
    image = None
    if session.sandbox_state != Session.SandboxState.RUNNING:
        image = _packages_image(session, networking)
    try:
        ref = sandbox.ensure(
            session_id=session.id, workspace_id=session.workspace_id, networking=networking, image=image
        )
    except sandbox.SandboxError as exc:
        session_sandbox_failed(session_id=session.id, error=f"sandbox: {exc}")
        raise
    fresh = ref != session.sandbox_ref
    if fresh:  # a new container: its checkpoint, skills and memory first, before it is recorded
        try:
            sandbox_restore(session=session, ref=ref)  # a sandbox that slept wakes (runtime.sleep)
        except Exception as exc:
            raise sandbox.SandboxError(f"the sandbox's checkpoint could not be restored: {exc}") from exc
        _credential_hosts_check(session, networking, unreadable)
        try:
            session_skills_place(session=session)
        except Exception as exc:
            raise sandbox.SandboxError(f"skills could not be placed: {exc}") from exc
        try:
            session_memory_place(session=session, ref=ref)
        except Exception as exc:
            raise sandbox.SandboxError(f"memory stores could not be placed: {exc}") from exc
    session_sandbox_running(session=session, ref=ref)
    session_sandbox_provisioned(session=session, generation=changes)
    _placements(control, session, ref, fresh=fresh)


def _placements(control: TurnControl, session: Session, ref: str, *, fresh: bool) -> None:
    """File resources and repositories not yet in sandbox `ref` (added since it was made)."""
    unplaced = session_unplaced_resource_types(session_id=session.id, ref=ref)  # one statement per tool call
    if SessionResource.Type.FILE in unplaced:
        try:
            resources_place(session=session, checked=True)  # file resources not yet in this sandbox
        except Exception as exc:
            raise sandbox.SandboxError(f"file resources could not be placed: {exc}") from exc
    if SessionResource.Type.GITHUB_REPOSITORY in unplaced:
        # Cloned by the worker; a failure is a session.error and the tool call still runs.
        repositories_place(control=control, session=session, fresh=fresh)


# Where sandbox_networking lists the credentials it could not decrypt (taken out before the
# networking goes to the sandbox; a new sandbox reports each as a session.error).
UNREADABLE_CREDENTIALS = "mango_unreadable_credentials"


def sandbox_networking(session: Session) -> dict | None:
    """The environment's networking, with the hosts a `limited` sandbox's proxy lets through
    (allowed_hosts, package registries, the agent's MCP servers) resolved, and the session's
    vault environment_variable credentials the proxy substitutes (decrypted here, right before
    they go to the proxy; the sandbox gets only their placeholders)."""
    networking = session.environment_config.get("networking")
    if not networking:
        return networking
    servers = [server.get("url", "") for server in (session.agent_snapshot or {}).get("mcp_servers") or []]
    resolved = {**networking, "egress_hosts": sandbox_policy.egress_hosts(networking, servers)}
    found = session_environment_credentials(workspace_id=session.workspace_id, vault_ids=session.vault_ids or [])
    if found:
        resolved["credentials"], unreadable = [], []
        for credential in found:
            try:
                resolved["credentials"].append(_proxy_credential(session, credential))
            except SecretsUnavailable:  # MANGO_VAULT_KEY changed: the sandbox runs without this one
                unreadable.append((credential.id, credential.vault_id))
        if unreadable:
            resolved[UNREADABLE_CREDENTIALS] = unreadable
    return resolved


def _credential_hosts_check(session: Session, networking: dict | None, unreadable: list) -> None:
    """When a sandbox is made: a session.error per vault credential this server cannot decrypt
    (the sandbox has no placeholder for it), and a credential_host_unreachable_error per one whose
    hosts the environment's networking does not let the sandbox reach (the proxy would refuse
    each request there without a word to the client)."""
    items = [
        ev.item(EventType.SESSION_ERROR, ev.credential_unreadable_error(credential_id=credential_id, vault_id=vault_id))
        for credential_id, vault_id in unreadable
    ]
    for credential in (networking or {}).get("credentials") or []:
        hosts = sandbox_policy.unreachable_credential_hosts(
            credential["hosts"], networking, networking.get("egress_hosts") or []
        )
        if hosts:
            payload = ev.credential_host_unreachable_error(
                credential_id=credential["credential_id"], vault_id=credential["vault_id"], hosts=hosts
            )
            items.append(ev.item(EventType.SESSION_ERROR, payload))
    if items:
        events_append(session_id=session.id, items=items)
        db_release()


def _proxy_credential(session: Session, credential) -> dict:
    auth = credential.auth
    networking = auth["networking"]
    digest = salted_hmac("mango.vault-placeholder", f"{session.id}:{credential.id}", algorithm="sha256").hexdigest()
    return {
        "credential_id": credential.id,
        "vault_id": credential.vault_id,
        "name": auth["secret_name"],
        "placeholder": f"mango-vault-{digest[:32]}",  # not a secret: it only marks where the value goes
        "value": credential_secrets(credential)["secret_value"],
        "hosts": None if networking["type"] == "unrestricted" else list(networking["allowed_hosts"]),
        "header": auth["injection_location"]["header"],
        "body": auth["injection_location"]["body"],
    }


def _packages_image(session: Session, networking: dict | None) -> str | None:
    """The image with the environment's packages (built on the first sandbox, cached after);
    when they cannot be installed, a session.error naming the manager and the package, and the
    sandbox starts from the plain image: the session stays usable."""
    try:
        return sandbox.prepare_image(
            session_id=session.id,
            workspace_id=session.workspace_id,
            networking=networking,
            packages_config=session.environment_config.get("packages"),
        )
    except sandbox.PackageInstallFailed as exc:
        session_error_record(
            session_id=session.id,
            payload=ev.session_error(message=exc.describe()),
            last_error=f"packages: {exc.describe()}",
            rescheduling=False,
        )
        db_release()
        return None
