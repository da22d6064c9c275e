"""The Cost page and its JSON API, served by the Airflow api-server through the plugin's ``fastapi_apps``."""
