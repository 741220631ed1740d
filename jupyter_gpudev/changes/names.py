"""What a name, version or spec read from a container may look like.

Everything read from a dev container is hostile input. These patterns are checked whole
(``fullmatch``: a pattern ending in ``$`` would let a final newline through) wherever such a value
is parsed (``packages``, ``changes``) and again before it reaches a Dockerfile line
(``dockerfile``): one definition, so that what is read and what is written agree.
"""

from __future__ import annotations

import re

#: A Debian package name, without and with its architecture (``dpkg-query``'s
#: ``${binary:Package}``: ``name:arch`` for Multi-Arch: same packages).
DPKG_NAME = re.compile(r"[a-z0-9][a-z0-9+.-]{0,199}")
DPKG_ARCH = re.compile(r"[a-z0-9][a-z0-9-]{0,29}")
DPKG_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]{0,199}(:[a-z0-9-]{1,30})?")
DPKG_VERSION = re.compile(r"[A-Za-z0-9.+~:-]{1,200}")
#: A Python distribution's name (PEP 508) and version (a PEP 440 superset, no spaces).
PY_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,198}[A-Za-z0-9])?")
PY_VERSION = re.compile(r"[A-Za-z0-9.+!_-]{1,100}")
#: An interpreter's ``major.minor``.
PY_MINOR = re.compile(r"[0-9]{1,2}\.[0-9]{1,3}")
#: A conda match spec as its history records it, and a channel.
CONDA_SPEC = re.compile(r"[A-Za-z0-9_.:/=<>!*,-]{1,500}")
CONDA_CHANNEL = re.compile(r"[A-Za-z0-9_.:/~+%@-]{1,500}")
#: An environment variable's name.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,255}")
