"""Settings, part 3: the sessions runtime, the model, sandboxes, outbound connections and secrets,
repository resources."""

from config.settings.base import BASE_DIR, env

# --- Sessions runtime -----------------------------------------------------------------------
MANGO_SANDBOX = env.str("MANGO_SANDBOX", default="docker")  # docker | local_process
# The default image is Debian with python3, pip, git, node, npm, curl, ripgrep, jq and gcc
# (deploy/sandbox-debian.Dockerfile; make run builds it); mango-sandbox:latest is the busybox one.
MANGO_SANDBOX_IMAGE = env.str("MANGO_SANDBOX_IMAGE", default="mango-sandbox:bookworm")
MANGO_SANDBOX_LOCAL_ROOT = env.path("MANGO_SANDBOX_LOCAL_ROOT", default=BASE_DIR / "var" / "sandboxes")
DOCKER_HOST = env.str("DOCKER_HOST", default="") or None
# The OCI runtime of every sandbox, egress proxy and package install container, as registered with
# dockerd: runc (Docker's default) or runsc (gVisor; docs/sandboxes.md says how to register it).
# The disk helper and the fallback killer stay runc (they need the host's loop devices and the
# sandbox's pid namespace; neither runs tenant code).
MANGO_SANDBOX_RUNTIME = env.str("MANGO_SANDBOX_RUNTIME", default="runc")
ANTHROPIC_BASE_URL = env.str("ANTHROPIC_BASE_URL", default="https://api.anthropic.com")
ANTHROPIC_API_KEY = env.str("ANTHROPIC_API_KEY", default="") or None
# A list response ends early (with a next page) once its rows reach this many bytes, whatever
# `limit` is: one request's memory does not grow with what tenants chose to store.
MANGO_LIST_RESPONSE_MAX_BYTES = env.int("MANGO_LIST_RESPONSE_MAX_BYTES", default=8 * 1024 * 1024)
MANGO_SANDBOX_CPUS = env.float("MANGO_SANDBOX_CPUS", default=1.0)
MANGO_SANDBOX_MEMORY = env.str("MANGO_SANDBOX_MEMORY", default="1g")
MANGO_SANDBOX_PIDS = env.int("MANGO_SANDBOX_PIDS", default=256)
# Live sandboxes (containers, each up to MANGO_SANDBOX_MEMORY with its tmpfs) per workspace;
# a session's first tool call beyond it gets an error result. 0: no cap.
MANGO_WORKSPACE_MAX_SANDBOXES = env.int("MANGO_WORKSPACE_MAX_SANDBOXES", default=32)
# Isolation of docker sandboxes (sandboxes/policy.py). Commands run as this fixed
# unprivileged uid:gid with no capabilities. /workspace and /mnt/session/outputs are ext4
# filesystems of these sizes on the Docker host's disk (sparse: only what is written takes
# space; ENOSPC beyond; not the sandbox's memory; sandboxes/docker/disks.py). /tmp, /var/tmp, the memory
# stores and the skills are tmpfs of these sizes (ENOSPC beyond; what the sandbox writes to /tmp
# and /var/tmp counts toward MANGO_SANDBOX_MEMORY). The number of processes is bounded by
# MANGO_SANDBOX_PIDS alone (a uid's RLIMIT_NPROC counts it on the whole host: not set).
MANGO_SANDBOX_UID = env.int("MANGO_SANDBOX_UID", default=10001)
MANGO_SANDBOX_WORKDIR_SIZE = env.str("MANGO_SANDBOX_WORKDIR_SIZE", default="10g")
MANGO_SANDBOX_TMP_SIZE = env.str("MANGO_SANDBOX_TMP_SIZE", default="64m")
MANGO_SANDBOX_OUTPUTS_SIZE = env.str("MANGO_SANDBOX_OUTPUTS_SIZE", default="2g")
MANGO_SANDBOX_MEMORY_STORES_SIZE = env.str("MANGO_SANDBOX_MEMORY_STORES_SIZE", default="256m")
MANGO_SANDBOX_SKILLS_SIZE = env.str("MANGO_SANDBOX_SKILLS_SIZE", default="256m")
# The image of the short-lived helper containers (root with CAP_SYS_ADMIN and the loop devices
# only: they make a sandbox's disks; with CAP_KILL only: they stop a sandbox's processes when no
# exec can start). Needs python3, mkfs.ext4 and debugfs; it never runs tenant code.
MANGO_SANDBOX_HELPER_IMAGE = env.str("MANGO_SANDBOX_HELPER_IMAGE", default="mango-sandbox:bookworm")
# A session idle this long has its sandbox checkpointed into the object store and removed; the
# next tool call restores it on whichever worker runs it (sessions/runtime/sleep.py). 0: never.
MANGO_SANDBOX_SLEEP_SECONDS = env.float("MANGO_SANDBOX_SLEEP_SECONDS", default=600.0)
MANGO_SANDBOX_NOFILE = env.int("MANGO_SANDBOX_NOFILE", default=1024)
# The largest file a sandbox command may write (RLIMIT_FSIZE); 0: none beyond the size of the
# mount it is written to (every writable path of a sandbox is a bounded mount).
MANGO_SANDBOX_FSIZE_BYTES = env.int("MANGO_SANDBOX_FSIZE_BYTES", default=0)
# `unrestricted` sandboxes get a bridge network of their own, a /29 from this pool; the host
# firewall rule that keeps them away from the host is installed by the worker (`iptables`, needs
# root) or by the operator (`external`, see docs/operating.md).
MANGO_SANDBOX_NETWORK_POOL = env.str("MANGO_SANDBOX_NETWORK_POOL", default="10.213.0.0/16")
MANGO_SANDBOX_FIREWALL = env.str("MANGO_SANDBOX_FIREWALL", default="iptables")  # iptables | external
# --- Outbound connections and secrets (core/outbound.py, core/secrets.py) ---------------------
# The worker connects for tenants (MCP servers, OAuth token endpoints, git hosts) only to public
# addresses, after DNS and on every redirect; these host or host:port entries may be private.
MANGO_OUTBOUND_PRIVATE_HOSTS = env.list("MANGO_OUTBOUND_PRIVATE_HOSTS", default=[])
# The most bytes of one response body (an MCP reply, a token endpoint's answer) the worker reads
# from a tenant's server; past it the response fails. Keep it above MANGO_MCP_RESULT_MAX_BYTES
# (a tool result's JSON-RPC reply carries the result, escaped, plus its framing).
MANGO_OUTBOUND_RESPONSE_MAX_BYTES = env.int("MANGO_OUTBOUND_RESPONSE_MAX_BYTES", default=16 * 1024 * 1024)
# Fernet keys for secrets at rest, comma-separated: the first encrypts, all decrypt (rotation).
MANGO_VAULT_KEY = env.list("MANGO_VAULT_KEY", default=[])
# `limited` networking (sandboxes/policy.py): each such sandbox with an allow-list gets an
# egress proxy (sandboxes/egress_proxy.py) in a container of this image (it needs python3), reaching
# out from this network (created when missing), with at most this many tunnels at once.
MANGO_SANDBOX_PROXY_IMAGE = env.str("MANGO_SANDBOX_PROXY_IMAGE", default="mango-sandbox:bookworm")
MANGO_SANDBOX_EGRESS_NETWORK = env.str("MANGO_SANDBOX_EGRESS_NETWORK", default="mango-egress")
MANGO_SANDBOX_PROXY_MAX_CONNECTIONS = env.int("MANGO_SANDBOX_PROXY_MAX_CONNECTIONS", default=64)
# Host or host:port entries a sandbox's egress proxy may reach on a private address (tenant code
# reaches them: keep it to what every tenant may use). Separate from MANGO_OUTBOUND_PRIVATE_HOSTS,
# which is the worker's own (an internal git server, a local MCP server).
MANGO_SANDBOX_PRIVATE_HOSTS = env.list("MANGO_SANDBOX_PRIVATE_HOSTS", default=[])
# PEM file of extra CAs the egress proxy trusts upstream when it substitutes credentials (an
# internal CA); the public ones of the proxy image are always trusted.
MANGO_OUTBOUND_CA_FILE = env.str("MANGO_OUTBOUND_CA_FILE", default="")
MANGO_SANDBOX_PROXY_IDLE_SECONDS = env.float("MANGO_SANDBOX_PROXY_IDLE_SECONDS", default=300.0)
# Environment packages (sandboxes/packages.py): the managers the image serves (others are a
# 400 at environment create), the registries `allow_package_managers` opens (empty: the ones this
# machine's apt, pip and npm are configured with, sandboxes/registries.py), and the bounds.
MANGO_SANDBOX_PACKAGE_MANAGERS = env.list("MANGO_SANDBOX_PACKAGE_MANAGERS", default=["apt", "pip", "npm"])
MANGO_SANDBOX_PACKAGE_REGISTRIES = env.list("MANGO_SANDBOX_PACKAGE_REGISTRIES", default=[])
MANGO_SANDBOX_INSTALL_TIMEOUT_SECONDS = env.float("MANGO_SANDBOX_INSTALL_TIMEOUT_SECONDS", default=600.0)
MANGO_SANDBOX_INSTALL_MAX_BYTES = env.int("MANGO_SANDBOX_INSTALL_MAX_BYTES", default=2 * 1024**3)
MANGO_WORKSPACE_MAX_INSTALLS = env.int("MANGO_WORKSPACE_MAX_INSTALLS", default=2)
MANGO_WORKSPACE_MAX_PACKAGE_IMAGES = env.int("MANGO_WORKSPACE_MAX_PACKAGE_IMAGES", default=8)
# --- Repository resources (integrations/git.py, sessions/runtime/repositories.py) ------------------
# The worker clones (never the sandbox) into a scratch directory of its own, bounded in bytes
# (the directory, received pack included) and time, then streams the tree into the sandbox and
# removes the scratch. Per workspace: at most MANGO_WORKSPACE_REPOSITORY_CLONES clones at once on
# the fleet, and each one is bounded by MANGO_WORKSPACE_REPOSITORY_DISK_BYTES / that count, so a
# workspace never makes a worker hold more than MANGO_WORKSPACE_REPOSITORY_DISK_BYTES of clones.
MANGO_REPOSITORY_MAX_BYTES = env.int("MANGO_REPOSITORY_MAX_BYTES", default=256 * 1024 * 1024)
MANGO_REPOSITORY_CLONE_TIMEOUT_SECONDS = env.float("MANGO_REPOSITORY_CLONE_TIMEOUT_SECONDS", default=300.0)
MANGO_WORKSPACE_REPOSITORY_CLONES = env.int("MANGO_WORKSPACE_REPOSITORY_CLONES", default=2)
MANGO_WORKSPACE_REPOSITORY_DISK_BYTES = env.int("MANGO_WORKSPACE_REPOSITORY_DISK_BYTES", default=512 * 1024 * 1024)
MANGO_REPOSITORY_SCRATCH_DIR = env.str("MANGO_REPOSITORY_SCRATCH_DIR", default="")
# Vaults (vaults/services.py): per workspace, and credentials per vault.
MANGO_WORKSPACE_MAX_VAULTS = env.int("MANGO_WORKSPACE_MAX_VAULTS", default=100)
MANGO_VAULT_MAX_CREDENTIALS = env.int("MANGO_VAULT_MAX_CREDENTIALS", default=100)
# An OAuth access token is refreshed this long before its expiry (and on a 401).
MANGO_OAUTH_REFRESH_MARGIN_SECONDS = env.float("MANGO_OAUTH_REFRESH_MARGIN_SECONDS", default=60.0)
# The worker's MCP client (sessions/runtime/mcp.py): connect/list and call timeouts, the bytes of
# one tool result it keeps, and per workspace the MCP connections open and calls in flight.
MANGO_MCP_CONNECT_TIMEOUT_SECONDS = env.float("MANGO_MCP_CONNECT_TIMEOUT_SECONDS", default=15.0)
MANGO_MCP_CALL_TIMEOUT_SECONDS = env.float("MANGO_MCP_CALL_TIMEOUT_SECONDS", default=120.0)
MANGO_MCP_RESULT_MAX_BYTES = env.int("MANGO_MCP_RESULT_MAX_BYTES", default=1024 * 1024)
MANGO_WORKSPACE_MAX_MCP_CONNECTIONS = env.int("MANGO_WORKSPACE_MAX_MCP_CONNECTIONS", default=64)
MANGO_WORKSPACE_MAX_MCP_CALLS = env.int("MANGO_WORKSPACE_MAX_MCP_CALLS", default=32)
MANGO_TOOL_TIMEOUT_SECONDS = env.float("MANGO_TOOL_TIMEOUT_SECONDS", default=600.0)
MANGO_MODEL_MAX_TOKENS = env.int("MANGO_MODEL_MAX_TOKENS", default=8192)
# Thinking on every turn's model call (sessions/runtime/model.py thinking_config): adaptive where
# the model takes it, else a budget (enabled); `enabled` always budgets; `off` sends none.
MANGO_MODEL_THINKING = env.str("MANGO_MODEL_THINKING", default="adaptive")
if MANGO_MODEL_THINKING not in ("adaptive", "enabled", "off"):
    raise SystemExit(f"[mango] MANGO_MODEL_THINKING={MANGO_MODEL_THINKING!r}: one of adaptive, enabled, off.")
MANGO_MODEL_THINKING_BUDGET_TOKENS = env.int("MANGO_MODEL_THINKING_BUDGET_TOKENS", default=4096)
# The model that judges each tool use under the `auto` permission policy (sessions/runtime/judge.py);
# empty: the agent's own model.
MANGO_AUTO_PERMISSION_MODEL = env.str("MANGO_AUTO_PERMISSION_MODEL", default="")
# While an outcome's grader call runs, span.outcome_evaluation_ongoing every this many seconds.
MANGO_OUTCOME_HEARTBEAT_SECONDS = env.float("MANGO_OUTCOME_HEARTBEAT_SECONDS", default=10.0)
MANGO_MODEL_TIMEOUT_SECONDS = env.float("MANGO_MODEL_TIMEOUT_SECONDS", default=600.0)
# Upstream 429/5xx/529 are retried this many times (each a `session.error` with retry_status
# "retrying") before the turn ends with retry_status "exhausted".
MANGO_MODEL_MAX_RETRIES = env.int("MANGO_MODEL_MAX_RETRIES", default=2)
MANGO_MODEL_RETRY_BACKOFF_SECONDS = env.float("MANGO_MODEL_RETRY_BACKOFF_SECONDS", default=2.0)
# A runner renews its lease on a session every few seconds; one silent this long is presumed dead
# and sessions.recover_stuck hands the session to another worker.
MANGO_SESSION_LEASE_SECONDS = env.int("MANGO_SESSION_LEASE_SECONDS", default=60)
# A turn that ends waiting on the client (requires_action: a self_hosted worker's tool results,
# custom tools, confirmations) keeps its runner, lease and thread this long for the answer, so
# the answer continues the turn without a new task (0: the runner lets the session go at once).
# At most half of a threads-pool worker's threads wait so at a time (prefork and solo: none).
MANGO_RUNNER_LINGER_SECONDS = env.float("MANGO_RUNNER_LINGER_SECONDS", default=5.0)
# A multiagent session's threads, its primary counted: a coordinator's spawn past it is an error
# result for its model (docs/multiagent.md).
MANGO_SESSION_THREADS_MAX = env.int("MANGO_SESSION_THREADS_MAX", default=25)
# Workflow runs (docs/multiagent.md): open runs a session may have at once (one more is a
# workflow_run.error max_workflow_runs_error), threads one run may create (thread_limit_error),
# and a run's time limit (a plan may ask for less: timeout_error).
MANGO_SESSION_MAX_WORKFLOW_RUNS = env.int("MANGO_SESSION_MAX_WORKFLOW_RUNS", default=4)
MANGO_WORKFLOW_RUN_THREADS_MAX = env.int("MANGO_WORKFLOW_RUN_THREADS_MAX", default=16)
MANGO_WORKFLOW_RUN_TIMEOUT_SECONDS = env.float("MANGO_WORKFLOW_RUN_TIMEOUT_SECONDS", default=3600.0)
# A multiagent coordinator whose turn is done but whose threads still work waits for their reports
# in its worker thread this long at most (and only as a lingering thread: at most half the pool);
# past it the turn ends idle, and a thread's report starts its next turn.
MANGO_COORDINATOR_WAIT_SECONDS = env.float("MANGO_COORDINATOR_WAIT_SECONDS", default=600.0)
# Self-hosted work queue (sessions/queue/services.py): a work item's lease when a heartbeat asks
# for no TTL, and the most a heartbeat's desired_ttl_seconds may ask for.
MANGO_WORK_LEASE_SECONDS = env.int("MANGO_WORK_LEASE_SECONDS", default=60)
MANGO_WORK_LEASE_MAX_SECONDS = env.int("MANGO_WORK_LEASE_MAX_SECONDS", default=600)
# Each worker looks for turns whose runner died this often (0: only beat's sessions.recover_stuck).
MANGO_SESSION_REAPER_SECONDS = env.float("MANGO_SESSION_REAPER_SECONDS", default=10.0)
# Worker layout: a turn waits on the model and on commands without holding a process, so one
# worker process runs MANGO_WORKER_CONCURRENCY turns at once in threads, sharing the process's
# database pool (MANGO_DB_POOL_MAX_SIZE; no connection is held while a turn waits).
CELERY_WORKER_POOL = env.str("MANGO_WORKER_POOL", default="threads")
CELERY_WORKER_CONCURRENCY = env.int("MANGO_WORKER_CONCURRENCY", default=200)
