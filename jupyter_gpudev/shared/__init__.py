"""Shared mode: one gpudev service per deployment, and users' servers as its clients.

``server`` is ``jupyter gpudev serve`` (a Jupyter server offering gpudev's API only),
``identity`` tells it who calls (the JupyterHub user of the request's token), ``authority``
gives each user a view of the one engine connection, lease ledger and policy set,
``client`` forwards a user's server's gpudev API to the service, and ``service_api`` calls that
API (the command line in client mode, a client's kernel picker).

Shared mode is built on the handlers (its own are ``handlers.base.GPUDevHandler``s) and is
built on by the command line and the app: nothing here imports ``cli`` or ``app``, and
``handlers`` imports nothing from here (``tests/unit/test_layers.py``).
"""
