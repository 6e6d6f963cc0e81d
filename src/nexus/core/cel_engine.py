"""The CEL engine's compiled module, loaded without its package's command line.

`import cel` runs the package's `__init__`, which imports the package's own command line (typer, rich,
prompt_toolkit): about a quarter of a second of every `nexus` process's start, for a tool we never run.
The engine itself is one extension module beside that `__init__` (`cel/cel.*.so`): it is loaded alone,
under its own name `cel.cel` (so a later `import cel` reuses it rather than loading it twice), and the
package is imported as usual when the module is already loaded or cannot be found that way.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

_NAME = "cel.cel"


def load() -> ModuleType:
    """The engine's module: `cel.cel` alone when it can be found, else the `cel` package."""
    if _NAME in sys.modules or "cel" in sys.modules:
        return sys.modules.get(_NAME) or importlib.import_module("cel")
    package = importlib.util.find_spec("cel")
    places = package.submodule_search_locations if package is not None else None
    names = {"cel" + suffix for suffix in importlib.machinery.EXTENSION_SUFFIXES}
    found = [p for place in places or () for p in Path(place).iterdir() if p.name in names]
    if len(found) != 1:
        return importlib.import_module("cel")
    loader = importlib.machinery.ExtensionFileLoader(_NAME, str(found[0]))
    spec = importlib.util.spec_from_file_location(_NAME, found[0], loader=loader)
    if spec is None:
        return importlib.import_module("cel")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_NAME] = module
    try:
        loader.exec_module(module)
    except Exception:
        del sys.modules[_NAME]
        raise
    return module


if TYPE_CHECKING:
    import cel
else:
    cel = load()

__all__ = ["cel", "load"]
