# JupyterHub with the shared gpudev service (the tests start a Hub with this file as is).
#
# The gpudev service alone talks to the Docker engines, keeps the GPU leases and applies the
# policies; it runs as the Hub's account (or set "user" to an account in the docker group).
# Users' servers run in client mode: they have no Docker engine, and act as their user.
# The service reads its own configuration (c.HostPool, c.EnvironmentManager, c.GPUDevService
# ...) from jupyter_gpudev_serve_config.py in the Jupyter config path of its account.
import sys

c = get_config()  # noqa: F821 (JupyterHub's config loader provides it)

c.JupyterHub.services = [
    {
        "name": "gpudev",
        "url": "http://127.0.0.1:10101",
        "command": [sys.executable, "-m", "jupyter_gpudev", "serve"],
        "environment": {},
    }
]

# The service asks the Hub whose token a request carries and whether that user is an admin.
c.JupyterHub.load_roles = [
    {"name": "gpudev-service", "scopes": ["read:users"], "services": ["gpudev"]},
]

# Users' servers use the service (client mode). Users need no docker group membership.
c.Spawner.environment = {"GPUDEV_SERVICE_URL": "http://127.0.0.1:10101/services/gpudev/"}
