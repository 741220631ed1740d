"""Shared mode: one gpudev service per deployment, and users' servers as its clients.

``server`` is ``jupyter gpudev serve`` (a Jupyter server offering gpudev's API only),
``identity`` tells it who calls (the JupyterHub user of the request's token), ``authority``
gives each user a view of the one engine connection, lease ledger and policy set, and
``client`` forwards a user's server's gpudev API to the service.
"""
