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

c.JupyterHub.load_roles = [
    # The service asks the Hub whose token a request carries, whether that user is an admin
    # and when the token expires.
    {"name": "gpudev-service", "scopes": ["read:users", "read:tokens"], "services": ["gpudev"]},
    # Users may use the service: it accepts only tokens with this scope (their own API tokens
    # inherit it; one they scope to something else, or another server's token, is refused).
    {"name": "user", "scopes": ["self", "access:services!service=gpudev"]},
]

# Users' servers use the service (client mode), with their own token, which gets the scope
# above besides the server role's. Users need no docker group membership.
c.Spawner.environment = {"GPUDEV_SERVICE_URL": "http://127.0.0.1:10101/services/gpudev/"}
c.Spawner.server_token_scopes = [
    "users:activity!user",
    "access:servers!server",
    "access:services!service=gpudev",
]
