"""The process's one delivery loop (webhooks.tasks.deliver_due) and the flag that asks it to claim
again. A commit in a process whose loop is running sets the flag and sends no Celery task
(webhooks.services.kick): the loop claims again before it stops."""

import threading

loop = threading.Lock()
wanted = threading.Event()


def wake_running_loop() -> bool:
    """Set the flag; whether this process's loop was running, so that it sees it. The flag is set
    before the loop's lock is looked at: a loop that releases after that look checks the flag
    after its release (webhooks.tasks), one that released before it was seen not running."""
    wanted.set()
    return loop.locked()
