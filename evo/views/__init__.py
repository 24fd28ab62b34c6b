"""evo.views: reading a run: the run directory as a whole (run_view), the status and summary tables,
fast_p, the HTML report, the exported library and the console progress of a running search."""
