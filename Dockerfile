# The official Airflow image with costaware installed (the way the Airflow docs recommend: extend the image,
# do not use _PIP_ADDITIONAL_REQUIREMENTS). Pinning apache-airflow keeps pip from changing Airflow's version.
# Extras: celery (the executor), tuning and examples (the two example DAGs in ./dags).
FROM apache/airflow:3.3.2-python3.11

COPY --chown=airflow:0 pyproject.toml README.md /opt/airflow/costaware/
COPY --chown=airflow:0 src /opt/airflow/costaware/src
COPY --chown=airflow:0 runtime /opt/airflow/costaware/runtime
RUN pip install --no-cache-dir \
      "apache-airflow==${AIRFLOW_VERSION}" \
      /opt/airflow/costaware/runtime \
      "/opt/airflow/costaware[celery,tuning,examples]"
