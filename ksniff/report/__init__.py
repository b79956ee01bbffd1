"""Report room: the terminal report and the JSON, CSV and Parquet exports. No protocol knowledge."""
