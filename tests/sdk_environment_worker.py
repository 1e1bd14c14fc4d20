"""The official SDK's EnvironmentWorker, unmodified, as a process of its own (so a test can
SIGKILL it, as a machine losing its worker):

    python -m tests.sdk_environment_worker BASE_URL ENVIRONMENT_ID WORKDIR

The environment key comes in MANGO_TEST_ENVIRONMENT_KEY (never on a command line)."""

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
    await worker.run()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(main(*sys.argv[1:4]))
