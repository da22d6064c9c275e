# The official Airflow image with costaware installed (the way the Airflow docs recommend: extend the image,
# do not use _PIP_ADDITIONAL_REQUIREMENTS). Pinning apache-airflow keeps pip from changing Airflow's version.
# Extras: celery (the executor), tuning and examples (the example DAGs in ./dags; own_training.py and
# spot_tuning.py also need PyTorch, which this image does not install: see docs/deployment.md).
FROM apache/airflow:3.3.2-python3.11

# The sources go beside AIRFLOW_HOME: $AIRFLOW_HOME/costaware is where the stores live, a volume every
# container shares (docker-compose.yaml).
COPY --chown=airflow:0 pyproject.toml README.md /opt/costaware-src/
COPY --chown=airflow:0 src /opt/costaware-src/src
COPY --chown=airflow:0 runtime /opt/costaware-src/runtime
RUN pip install --no-cache-dir \
      "apache-airflow==${AIRFLOW_VERSION}" \
      /opt/costaware-src/runtime \
      "/opt/costaware-src[celery,tuning,examples]" \
 && mkdir -p /opt/airflow/costaware && chmod g+rwx /opt/airflow/costaware
