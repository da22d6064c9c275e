"""Budget alerts through Airflow notifiers."""
