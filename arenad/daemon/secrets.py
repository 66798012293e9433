"""Secrets (MQTT passwords, Source log secrets) come from an environment variable or a file the
config names, never from the config file itself."""

from __future__ import annotations

import os

from arenad.errors import ConfigError, ConfigProblem


def read_secret(env: str, path: str, env_key: str, path_key: str) -> str | None:
    """The value of environment variable ``env`` (first) or the first line of file ``path``.

    ``None`` when neither is named. A named source that is missing or empty is a ``ConfigError``
    naming ``env_key`` or ``path_key``: starting without the secret would only fail later.
    """
    if env:
        value = os.environ.get(env)
        if not value:
            raise ConfigError([ConfigProblem(env_key, env, "environment variable not set or empty")])
        return value
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                first = fh.readline().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as e:
            message = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            raise ConfigError([ConfigProblem(path_key, path, f"cannot read: {message}")]) from e
        if not first:
            raise ConfigError([ConfigProblem(path_key, path, "first line is empty")])
        return first
    return None
