"""The self-hosted work queue (the SDK's `environments.work`): a `self_hosted` session's turn is a
work item that the client's worker polls, claims under a lease, heartbeats and stops. Part of the
turn protocol, so part of sessions: apis -> auth -> services -> selectors -> credentials, with
serializers at the edge (.importlinter)."""
