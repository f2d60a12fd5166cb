"""Names of a package imported on first use (PEP 562), so that `tvm-npu --help` and
`import tvm_npu.tools.cli` stay free of TVM and tvm-ffi (6 s with torch installed).

Standard library only: the package __init__ files import it before anything else.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable


class _Package(types.ModuleType):
    """A package whose public names may equal its submodules' (tvm_npu.build the function, in
    tvm_npu/build.py): the import system binds a submodule onto its package when it first loads it,
    which must not replace the function; the name then resolves through __getattr__."""

    def __setattr__(self, name: str, value) -> None:
        lazy = self.__dict__.get("_LAZY", {})
        if isinstance(value, types.ModuleType) and lazy.get(name, (None, None))[1] is not None:
            return
        super().__setattr__(name, value)


def lazy_exports(package: str, table: dict, namespace: dict, on_first: Callable[[], None] | None = None):
    """The `__getattr__` and `__dir__` of `package`: `table` maps a public name to (module relative to
    the package, attribute; None for the module itself); any other name that is a submodule imports it.
    Each value is cached in `namespace` (the package's globals). `on_first` runs after a name of `table`
    is first imported (tvm_npu: register the backend with TVM, as the eager package did at import).
    `table` is also the package's `_LAZY`."""
    namespace["_LAZY"] = table
    sys.modules[package].__class__ = _Package

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attr = table.get(name, ("." + name, None))
        try:
            value = importlib.import_module(module, package)
        except ModuleNotFoundError as err:
            if name in table or err.name != f"{package}.{name}":
                raise
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        if attr is not None:
            value = getattr(value, attr)
        namespace[name] = value
        if on_first is not None and name in table:
            on_first()
        return value

    def __dir__() -> list:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
