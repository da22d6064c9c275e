"""Model formats that load without pickle: skops with trusted types, XGBoost's UBJSON, LightGBM's text.

The SDKs are optional: each is imported where it is used, with how to install it when it is missing.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from costaware.adapters.model_versions import UntrustedModelError
from costaware.core.errors import ConfigurationError

#: Types beyond skops' own safe list that the built-in scikit-learn trainers need (reviewed: numpy's dtype,
#: a plain scikit-learn data holder, and a partial of scikit-learn's input validator).
DEFAULT_TRUSTED_TYPES: tuple[str, ...] = (
    "numpy.dtype",
    "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
    "functools.partial",
    "sklearn.utils.validation.check_array",
)


def dump_skops(model: Any) -> bytes:
    """A scikit-learn model as skops bytes."""
    with _quiet():
        return bytes(_skops_io().dumps(model))


def load_skops(data: bytes, *, trusted_types: Iterable[str] = DEFAULT_TRUSTED_TYPES) -> Any:
    """Load skops bytes, refusing any type that is neither safe by skops' list nor in ``trusted_types``."""
    allowed = set(trusted_types)
    with _quiet():
        sio = _skops_io()  # before the try: an import error is no fault of the file
    try:
        with _quiet():
            untrusted = sio.get_untrusted_types(data=data)
    except Exception as e:
        raise UntrustedModelError(f"model file is not a valid skops file ({type(e).__name__}: {e})") from e
    refused = sorted(set(untrusted) - allowed)
    if refused:
        raise UntrustedModelError(
            f"model file would load types nobody trusted: {refused}; if you reviewed where the file came "
            f"from, "
            f"add them to trusted_types"
        )
    with _quiet():
        return sio.loads(data, trusted=sorted(set(untrusted)))


#: scikit-learn's PyTorch shim: importing it imports PyTorch.
_SKLEARN_TORCH_SHIM = "sklearn.externals.array_api_compat.torch"


class _HoldBackShim(importlib.abc.MetaPathFinder):
    """Refuses scikit-learn's PyTorch shim to the thread that imports skops, while in ``sys.meta_path``.

    Other threads import it as usual.
    """

    def __init__(self) -> None:
        self.thread = threading.get_ident()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname == _SKLEARN_TORCH_SHIM and threading.get_ident() == self.thread:
            raise ModuleNotFoundError(f"{fullname} held back while skops lists estimators", name=fullname)
        return None


def _skops_io() -> Any:
    """``skops.io``, imported without importing PyTorch.

    On import, skops lists scikit-learn's estimators (``sklearn.utils.all_estimators``), and the
    ``pkgutil.walk_packages`` under it imports every package it walks, scikit-learn's PyTorch shim too,
    which imports PyTorch where it is installed: 2-3 s of CPU in each process that saves or loads a model,
    for no estimator. The shim is held back from that one import, in this thread only (the walk skips a
    package that fails to import); afterwards it imports as usual. PyTorch itself is not touched: code
    that finds ``torch`` in ``sys.modules`` takes it for imported.
    """
    if "skops.io" in sys.modules or _SKLEARN_TORCH_SHIM in sys.modules:
        import skops.io

        return skops.io
    finder = _HoldBackShim()
    sys.meta_path.insert(0, finder)
    try:
        import skops.io
    finally:
        sys.meta_path.remove(finder)
    return skops.io


@contextmanager
def _quiet() -> Iterator[None]:
    """Silence warnings while skops scans ``sys.modules`` (on import and when it names functions).

    The scan touches Airflow's deprecated module aliases, and each touch would print a deprecation warning.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def dump_xgboost(booster: Any) -> bytes:
    """An ``xgboost.Booster`` in XGBoost's own UBJSON format."""
    return bytes(booster.save_raw(raw_format="ubj"))


def load_xgboost(data: bytes) -> Any:
    """An ``xgboost.Booster`` from UBJSON bytes."""
    xgb = require("xgboost", "xgboost")
    booster = xgb.Booster()
    booster.load_model(bytearray(data))
    return booster


def dump_lightgbm(booster: Any) -> bytes:
    """A ``lightgbm.Booster`` in LightGBM's text format."""
    return str(booster.model_to_string()).encode()


def load_lightgbm(data: bytes) -> Any:
    """A ``lightgbm.Booster`` from LightGBM's text format."""
    lgb = require("lightgbm", "lightgbm")
    return lgb.Booster(model_str=data.decode())


def require(module: str, package: str) -> Any:
    """Import an optional SDK, or fail with how to install it (the costaware extra that brings it)."""
    import importlib

    from costaware.extras import EXTRAS, install_hint

    try:
        return importlib.import_module(module)
    except ImportError as e:
        extra = next((name for name, modules in EXTRAS.items() if module in modules), None)
        how = install_hint(extra) if extra else f"pip install {package}"
        raise ConfigurationError(
            f"{module} is not installed: `{how}` on the workers to use this trainer"
        ) from e
