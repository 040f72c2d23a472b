"""Reports: run summaries, experiment results and their statistics, charts, HTML, lineage and export."""
