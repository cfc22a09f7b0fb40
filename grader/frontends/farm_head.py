"""The farm's private Ray head: Ray's own ``ray start``, with the raylet told its agent's HTTP port.

Ray 2.60 hands the raylet every agent port it was given except the dashboard agent's HTTP port
(``--dashboard-agent-listen-port`` reaches the agent only). The raylet then waits a fixed 15 s
for the agent to write that port to a file and aborts past it, and on a loaded 2-core host the
agent's imports alone take ~30 s. The raylet has the flag (``--dashboard_agent_listen_port``):
this adds it to the raylet's command line and runs Ray's CLI. Run by ``farm_ray.start_head``:
``python -m grader.frontends.farm_head start --head ... --dashboard-agent-listen-port=N``.
"""

from __future__ import annotations

import sys

LISTEN = "--dashboard-agent-listen-port="


def main(argv: list[str]) -> int:
    port = next((a[len(LISTEN) :] for a in argv if a.startswith(LISTEN)), None)
    from ray._private import ray_constants, services  # the farm's pinned Ray (==2.60.0)
    from ray.scripts.scripts import main as ray_cli

    start = services.start_ray_process

    def start_ray_process(command, process_type, *args, **kwargs):
        if port and process_type == ray_constants.PROCESS_TYPE_RAYLET:
            command = [*command, f"--dashboard_agent_listen_port={port}"]
        return start(command, process_type, *args, **kwargs)

    services.start_ray_process = start_ray_process  # start_raylet looks it up in its module
    sys.argv = ["ray", *argv]
    return ray_cli()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
