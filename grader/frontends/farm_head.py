"""The farm's private Ray head: Ray's own ``ray start``, with the raylet told its agent's HTTP port.

Ray 2.60 hands the raylet every agent port it was given except the dashboard agent's HTTP port
(``--dashboard-agent-listen-port`` reaches the agent only). The raylet then waits a fixed 15 s
for the agent to write that port to a file and aborts past it, and on a loaded 2-core host the
agent's imports alone take ~30 s. The raylet has the flag (``--dashboard_agent_listen_port``):
``tell_raylets_their_agent_port`` adds it to each raylet's command line, from the port given to
the agent there. Run by ``farm_ray.start_head``: ``python -m grader.frontends.farm_head start
--head ... --dashboard-agent-listen-port=N``; tests that start Ray nodes in-process call it too.
"""

from __future__ import annotations

import re
import shlex
import sys


def tell_raylets_their_agent_port() -> None:
    """From now on in this process, a raylet started with a fixed agent HTTP port is told it."""
    from ray._private import ray_constants, services  # the farm's pinned Ray (==2.60.0)

    if getattr(services.start_ray_process, "effkit_agent_port", False):
        return
    start = services.start_ray_process

    def start_ray_process(command, process_type, *args, **kwargs):
        if process_type == ray_constants.PROCESS_TYPE_RAYLET:
            agent = next((a for a in command if a.startswith("--dashboard_agent_command=")), "")
            port = re.search(r"--listen-port=(\d+)", " ".join(shlex.split(agent)))
            if port and int(port.group(1)):
                command = [*command, f"--dashboard_agent_listen_port={port.group(1)}"]
        return start(command, process_type, *args, **kwargs)

    start_ray_process.effkit_agent_port = True
    services.start_ray_process = start_ray_process  # start_raylet looks it up in its module


def main(argv: list[str]) -> int:
    from ray.scripts.scripts import main as ray_cli

    tell_raylets_their_agent_port()
    sys.argv = ["ray", *argv]
    return ray_cli()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
