"""The ``Budgets`` resource of Airflow's FAB auth manager; imported only when FAB is the auth manager.

FAB creates a resource and its permissions for each Flask-AppBuilder view registered with it
(``class_permission_name`` and ``base_permissions``). This view has no pages: it exists so that
``airflow sync-perm`` creates ``can_edit`` on ``Budgets``, the permission
:func:`costaware.plugins.ui.access.may_set_budgets` checks, and gives it to Admin.
"""

from __future__ import annotations

from airflow.providers.fab.www.utils import get_fab_action_from_method_map
from flask_appbuilder import BaseView

from costaware.plugins.ui.permissions import BUDGETS_VIEW, SET_BUDGETS_METHOD


class BudgetsPermissionView(BaseView):
    """Declares the FAB permission to set budgets (``can_edit`` on ``Budgets``); serves no page."""

    route_base = "/costaware-budgets"
    class_permission_name = BUDGETS_VIEW
    # Only the action costaware checks: `airflow sync-perm` deletes actions on the resource not listed here.
    base_permissions = [get_fab_action_from_method_map()[SET_BUDGETS_METHOD]]
