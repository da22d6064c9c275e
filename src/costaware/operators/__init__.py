"""costaware operators. Each module is imported on first use so DAG files parse fast."""
