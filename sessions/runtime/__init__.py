"""The turn runtime: runs only in a Celery worker (sessions.tasks.session_run).

lease (who owns a session) · control (stop checks, interruptible waits) · model (the upstream
client, retries, previews) · tools (built-in tools and their execution) · grader (outcome
evaluation) · turn (the turn state machine and the entry point).
"""
