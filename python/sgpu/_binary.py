"""Where the sgpu binary is."""
from __future__ import annotations

import os
import shutil
import sysconfig

from ._errors import SgpuError


def sgpu_binary() -> str:
    """The sgpu binary this package drives.

    ``$SGPU_BIN`` when set; else the one this package's wheel installed (the
    environment's scripts directory, ``<venv>/bin/sgpu``); else ``sgpu`` on
    ``PATH``.
    """
    explicit = os.environ.get("SGPU_BIN")
    if explicit:
        return explicit
    for scheme in (None, f"{os.name}_user"):
        try:
            scripts = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            continue
        candidate = os.path.join(scripts, "sgpu")
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("sgpu")
    if found:
        return found
    raise SgpuError("the sgpu binary was not found: install the wheel (pip install sgpu), put sgpu on PATH, "
                    "or set SGPU_BIN to its path")
