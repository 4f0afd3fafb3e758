"""A harbor environment that behaves like a remote sandbox, on the local Docker engine.

Given to harbor as ``--env tests.envs.remote_like:RemoteLikeEnvironment`` (harbor 0.25.0 treats any
``--env`` value with a ``:`` as an import path). It holds a harbor ``DockerEnvironment`` and exposes
only the generic ``BaseEnvironment`` API, the way Daytona, Modal or E2B look to an agent:

- not a ``DockerEnvironment``: no container id, no ``docker exec -i``, no stdin to any exec;
- no mounts: ``--mounts`` is dropped and ``capabilities.mounted`` is False, so harbor downloads
  ``/logs/agent`` as it does for cloud sandboxes and staged codex/LoopX must be uploaded;
- every call (exec, upload, download) is delayed ``DELAY_SEC`` (a network round trip);
- one exec in ``FAULT_EVERY`` of the arm's own (those marked ``agents.sandbox_host.EXEC_MARK``)
  raises ``ConnectionError``, from a seeded generator, half before and half after the command ran
  (a lost request and a lost reply). harbor's own execs (directory setup, the verifier) are only
  delayed: harbor 0.25.0 does not retry them, and a real provider's SDK retries its transport.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from harbor.environments.base import BaseEnvironment
from harbor.environments.capabilities import EnvironmentCapabilities
from harbor.environments.docker.docker import DockerEnvironment

from agents.sandbox_host import EXEC_MARK

DELAY_SEC = 0.3
FAULT_EVERY = 20
SEED = 20261201


class RemoteLikeEnvironment(BaseEnvironment):
    def __init__(self, *args, fault_every: int = FAULT_EVERY, seed: int = SEED, **kwargs) -> None:
        kwargs.pop("mounts", None)
        kwargs.pop("auto_mounting", None)
        self._inner = DockerEnvironment(*args, **kwargs)
        self._rng = random.Random(seed)
        self._fault_every = int(fault_every)
        self.faults_injected = 0
        self.calls = 0
        kwargs.pop("keep_containers", None)
        super().__init__(*args, **kwargs)

    @staticmethod
    def type() -> str:
        return "remote-like"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities(mounted=False)

    def _validate_definition(self) -> None:
        """The inner Docker environment validated the task's definition already."""

    async def _delay(self) -> None:
        self.calls += 1
        await asyncio.sleep(DELAY_SEC)

    def _fault(self) -> bool:
        return self._fault_every > 0 and self._rng.randrange(self._fault_every) == 0

    async def start(self, force_build: bool) -> None:
        await self._delay()
        await self._inner.start(force_build)

    async def stop(self, delete: bool):
        await self._delay()
        return await self._inner.stop(delete)

    async def upload_file(self, source_path: Path | str, target_path: str):
        await self._delay()
        await self._inner.upload_file(source_path, target_path)

    async def upload_dir(self, source_dir: Path | str, target_dir: str):
        await self._delay()
        await self._inner.upload_dir(source_dir, target_dir)

    async def download_file(self, source_path: str, target_path: Path | str):
        await self._delay()
        await self._inner.download_file(source_path, target_path)

    async def download_dir(self, source_dir: str, target_dir: Path | str):
        await self._delay()
        await self._inner.download_dir(source_dir, target_dir)

    async def exec(self, command: str, cwd=None, env=None, timeout_sec=None, user=None):
        await self._delay()
        ours = command.startswith(EXEC_MARK)
        if ours and self._fault():
            self.faults_injected += 1
            if self._rng.random() < 0.5:
                raise ConnectionError("remote-like: connection reset before the command was sent")
            await self._inner.exec(
                command,
                cwd=cwd,
                env=self._merge_env(env),
                timeout_sec=timeout_sec,
                user=self._resolve_user(user),
            )
            raise ConnectionError("remote-like: connection reset before the reply arrived")
        return await self._inner.exec(
            command, cwd=cwd, env=self._merge_env(env), timeout_sec=timeout_sec, user=self._resolve_user(user)
        )
