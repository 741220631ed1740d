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
#: A global npm package's name (scoped or not) and version; a crate's name and version; the
#: name of a command a package links into a ``bin`` folder.
NPM_NAME = re.compile(r"(?:@[a-z0-9][a-z0-9._~-]{0,100}/)?[a-z0-9][a-z0-9._~-]{0,213}")
NPM_VERSION = re.compile(r"[0-9A-Za-z.+-]{1,100}")
CRATE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
CRATE_VERSION = re.compile(r"[0-9A-Za-z.+-]{1,100}")
COMMAND_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,100}")
#: A user or group name (shadow-utils' default rule, upper case and dots allowed, at most 32),
#: a numeric id, and a home folder or login shell (an absolute path of plain characters).
ACCOUNT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,30}\$?")
ACCOUNT_ID = re.compile(r"[0-9]{1,10}")
ACCOUNT_PATH = re.compile(r"/[A-Za-z0-9._+@/-]{0,254}")
