"""Analysis service: metrics, statistics and reports over stored campaigns."""
