"""Cache keys for feature reuse: fingerprints of inputs, transform code, parameters and library versions.

Everything here is pure: the adapters list and hash the bytes (``costaware.adapters.object_store``) and
hand over :class:`FileStat` values; this package turns them, the transform's source and its parameters into
one hex key. A key changes when an input changes (size, modification time, ETag, version id or content),
when the transform's source or the source of a project module it uses changes, when a parameter changes,
or when pandas/pyarrow change version; nothing else changes it. The parts:

* :mod:`~costaware.core.fingerprint.canonical`: stable text and digests of values;
* :mod:`~costaware.core.fingerprint.inputs`: fingerprints of the input files;
* :mod:`~costaware.core.fingerprint.code`: fingerprints of the transform's code;
* :mod:`~costaware.core.fingerprint.key`: the key over all of them, and the library versions in it;
* :mod:`~costaware.core.fingerprint.path_safety`: keys and paths that cannot leave the store.
"""

from __future__ import annotations

from costaware.core.fingerprint.canonical import canonical_params
from costaware.core.fingerprint.code import CodeFingerprint, code_fingerprint, is_project_module
from costaware.core.fingerprint.inputs import FileStat, InputFingerprint, fingerprint_input
from costaware.core.fingerprint.key import DEFAULT_LIBRARIES, KEY_SCHEME, cache_key, library_versions
from costaware.core.fingerprint.path_safety import safe_relative_path, validate_key

__all__ = [
    "DEFAULT_LIBRARIES",
    "KEY_SCHEME",
    "CodeFingerprint",
    "FileStat",
    "InputFingerprint",
    "cache_key",
    "canonical_params",
    "code_fingerprint",
    "fingerprint_input",
    "is_project_module",
    "library_versions",
    "safe_relative_path",
    "validate_key",
]
