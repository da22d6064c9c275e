"""Pure domain logic: money, prices, budgets, ledger entries.

Never imports airflow, boto3 or fastapi; pandas and pyarrow only inside functions.
"""
