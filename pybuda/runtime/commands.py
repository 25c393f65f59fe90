"""The command protocol between the host and a device (TT-Buda's ``run/commands.py``).

Every device is driven by :class:`Command` objects. In sequential mode the caller hands each command
straight to ``Device.run_next_command``; in concurrent mode a worker (thread or process) per device
takes them from a command queue, and commands with ``needs_response`` reply on a response queue.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Dict


class CommandType(enum.Enum):
    """What a device is asked to do."""

    QUIT = "quit"
    COMPILE = "compile"
    RUN_FORWARD = "run_forward"
    RUN_BACKWARD = "run_backward"
    RUN_OPTIMIZER = "run_optimizer"
    RUN_SCHEDULERS = "run_schedulers"
    GET_PARAMETER_CHECKPOINT = "get_parameter_checkpoint"
    GET_PARAMETER_GRADIENTS = "get_parameter_gradients"
    UPDATE_DEVICE_PARAMETERS = "update_device_parameters"
    SYNC = "sync"
    GET_QUEUES = "get_queues"


# Commands whose caller waits for an answer on the response queue.
_WITH_RESPONSE = frozenset({CommandType.COMPILE, CommandType.GET_PARAMETER_CHECKPOINT,
                            CommandType.GET_PARAMETER_GRADIENTS, CommandType.UPDATE_DEVICE_PARAMETERS,
                            CommandType.SYNC, CommandType.GET_QUEUES})


@dataclass
class Command:
    """One command: its type and a dict of parameters (e.g. ``loop_count`` for RUN_FORWARD)."""

    command_type: CommandType
    params: Dict[str, Any] = field(default_factory=dict)

    @property
    def needs_response(self) -> bool:
        return self.command_type in _WITH_RESPONSE

    @staticmethod
    def quit() -> "Command":
        return Command(CommandType.QUIT)

    @staticmethod
    def run_forward(loop_count: int) -> "Command":
        """Run ``loop_count`` inputs through the device (0 = until shutdown)."""
        return Command(CommandType.RUN_FORWARD, {"loop_count": loop_count})

    @staticmethod
    def sync() -> "Command":
        return Command(CommandType.SYNC)

    def __repr__(self) -> str:
        keys = ", ".join(f"{k}=..." if k in ("samples", "parameters", "config") else f"{k}={v!r}"
                         for k, v in self.params.items())
        return f"Command({self.command_type.name}{', ' if keys else ''}{keys})"
