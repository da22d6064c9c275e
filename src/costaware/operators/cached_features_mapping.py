"""``CachedFeaturesOperator.partial(...)``: a ``None`` store in a mapping written out refused at parse."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk.definitions.mappedoperator import OperatorPartial

if TYPE_CHECKING:
    from airflow.sdk.definitions.mappedoperator import MappedOperator


class _FeaturesPartial(OperatorPartial):
    """Airflow's ``partial(...)`` of ``CachedFeaturesOperator``, refusing a ``None`` store when it expands.

    A literal ``.expand(store_uri=[..., None])`` or ``.expand_kwargs([..., {"store_uri": None}])`` built its
    copies at parse and refused that one only as it ran; an XComArg's elements are known only then, so they
    are still checked as each copy runs.
    """

    __slots__ = ()  # the layout of OperatorPartial, so that partial() can hand Airflow's own as this class

    def _refuse_no_store(self, where: str, what_to_leave_out: str) -> None:
        from costaware.core.errors import ConfigurationError

        raise ConfigurationError(
            f"task {self.kwargs.get('task_id')!r}: {where}, which "
            f"names no store for that copy: give each element a location, or leave store_uri out of "
            f"{what_to_leave_out} for the default cache ($COSTAWARE_FEATURE_CACHE or "
            "$AIRFLOW_HOME/costaware/features)"
        )

    def expand(self, **mapped_kwargs: Any) -> MappedOperator:
        stores = mapped_kwargs.get("store_uri")
        if isinstance(stores, Sequence) and not isinstance(stores, str):
            for index, store in enumerate(stores):
                if store is None:
                    self._refuse_no_store(
                        f"store_uri[{index}] is None in {self.operator_class.__name__}.partial(...)"
                        ".expand(store_uri=[...])",
                        ".expand()",
                    )
        return super().expand(**mapped_kwargs)

    def expand_kwargs(self, kwargs: Any, *, strict: bool = True) -> MappedOperator:
        if isinstance(kwargs, Sequence) and not isinstance(kwargs, str):
            for index, element in enumerate(kwargs):
                # A Mapping written out; an XComArg element (or list) is known only as its copy runs.
                if isinstance(element, Mapping) and "store_uri" in element and element["store_uri"] is None:
                    self._refuse_no_store(
                        f"store_uri is None in element {index} of {self.operator_class.__name__}"
                        ".partial(...).expand_kwargs([...])",
                        "that element",
                    )
        return super().expand_kwargs(kwargs, strict=strict)
