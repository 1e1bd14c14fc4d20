"""The official SDK's EnvironmentWorker, unmodified, as a process of its own (so a test can
SIGKILL it, as a machine losing its worker):

    python -m tests.sdk_environment_worker BASE_URL ENVIRONMENT_ID WORKDIR

The environment key comes in MANGO_TEST_ENVIRONMENT_KEY (never on a command line). With
MANGO_TEST_WORK_ID, MANGO_TEST_SESSION_ID and MANGO_TEST_WORK_SECRET set (an item the test
polled), it serves that one item with `handle_item` instead, as `ant beta:worker poll --on-work`
does, and exits when the SDK lets the item go."""

import asyncio
import logging
import os
import sys

import anthropic


async def main(base_url: str, environment_id: str, workdir: str) -> None:
    key = os.environ["MANGO_TEST_ENVIRONMENT_KEY"]
    client = anthropic.AsyncAnthropic(base_url=base_url, auth_token=key)
    worker = client.beta.environments.work.worker(environment_id=environment_id, environment_key=key, workdir=workdir)
    print("worker started", anthropic.__version__, flush=True)
    if "MANGO_TEST_WORK_ID" not in os.environ:
        await worker.run()
        return
    await worker.handle_item(
        work_id=os.environ["MANGO_TEST_WORK_ID"],
        environment_id=environment_id,
        session_id=os.environ["MANGO_TEST_SESSION_ID"],
        work_secret=os.environ["MANGO_TEST_WORK_SECRET"],
    )
    print("item done", flush=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(main(*sys.argv[1:4]))
