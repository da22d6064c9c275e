"""The Cost API's request and response bodies as pydantic models, one module per resource.

The OpenAPI page (``/costaware/openapi.json``) documents each of them. Money is an exact decimal string in
USD (``"3.000000"``), never a float; times are ISO 8601 strings with their zone. A model's ``of`` builds it
from what the ledger adapter returns.
"""
