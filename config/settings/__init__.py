"""Mango settings: one env-driven package. Every value that varies comes from the environment, and
each variable is documented, with its default, in docs/configuration.md. The parts are read in
order (base reads `.env` first); a part names what it takes from an earlier one."""

from config.settings.base import *  # noqa: F403
from config.settings.files import *  # noqa: F403
from config.settings.runtime import *  # noqa: F403
from config.settings.workers import *  # noqa: F403
