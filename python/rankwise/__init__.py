"""rankwise's Python side: the `rankwise` command this wheel installs
(:func:`executable`), and the framework suite on torch.distributed
(``python -m rankwise.verify_torch``)."""

import os
import shutil
import sysconfig


def executable():
    """The path of the `rankwise` command installed with this package.

    Looked up where the wheel put it (this environment's scripts
    directory, or the user scheme's for ``pip install --user``), then on
    PATH; ``FileNotFoundError`` when it is nowhere.
    """
    names = ["rankwise"]
    dirs = [sysconfig.get_path("scripts")]
    try:
        dirs.append(sysconfig.get_path("scripts", f"{os.name}_user"))
    except KeyError:
        pass
    for d in dirs:
        if d:
            p = os.path.join(d, names[0])
            if os.path.isfile(p) and os.access(p, os.X_OK):
                return p
    found = shutil.which(names[0])
    if found:
        return found
    raise FileNotFoundError(
        "the rankwise command is not installed beside this package "
        f"(looked in {', '.join(d for d in dirs if d)} and on PATH)"
    )
