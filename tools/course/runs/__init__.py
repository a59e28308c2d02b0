"""Running the course: papermill batch runs (`runner`), environment profiles, the asset registry and the
README chapter table, and the benchmark (`bench`)."""
